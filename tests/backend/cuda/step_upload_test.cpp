// The step upload kernel: it copies the leading entries of each array from
// page-locked host memory (through its device mapping) and nothing else, and
// a replayed graph reads what the host wrote since, not an earlier copy.
#include "backend/cuda/kernels/step_upload.cuh"

#include <numeric>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;

constexpr std::int32_t kPitch = 300;
constexpr std::int32_t kArrays = 6;

struct Mapped {
  PinnedBuffer<std::int32_t> host;
  const std::int32_t* device = nullptr;
};

Mapped mapped_staging() {
  Mapped m;
  auto host = PinnedBuffer<std::int32_t>::allocate(kPitch * kArrays);
  EXPECT_TRUE(host.ok()) << host.status().to_string();
  m.host = std::move(*host);
  void* device = nullptr;
  CELLM_CUDA_CHECK(cudaHostGetDevicePointer(&device, m.host.data(), 0));
  m.device = static_cast<const std::int32_t*>(device);
  return m;
}

void fill(std::int32_t* host, std::int32_t base) {
  for (std::int32_t i = 0; i < kPitch * kArrays; ++i) host[i] = base + i * 7;
}

// Entries outside [0, width) of each array keep the poison.
void expect_copied(const std::vector<std::int32_t>& out, const std::int32_t* host,
                   std::int32_t width, std::int32_t arrays) {
  for (std::int32_t a = 0; a < kArrays; ++a) {
    for (std::int32_t i = 0; i < kPitch; ++i) {
      const std::int32_t at = a * kPitch + i;
      const bool copied = a < arrays && i < width;
      ASSERT_EQ(out[at], copied ? host[at] : -1) << "array " << a << " entry " << i;
    }
  }
}

TEST(StepUploadTest, CopiesTheLeadingEntriesOfEachArray) {
  CELLM_REQUIRE_GPU();
  Mapped staging = mapped_staging();
  fill(staging.host.data(), 11);
  for (const auto& [width, arrays] : std::vector<std::pair<int, int>>{
           {1, 6}, {3, 2}, {64, 5}, {257, 6}, {kPitch, 1}, {0, 6}, {5, 0}}) {
    DeviceArray<std::int32_t> out(std::vector<std::int32_t>(kPitch * kArrays, -1));
    const StepUploadParams p{.src = staging.device,
                             .dst = out.data(),
                             .pitch = kPitch,
                             .width = width,
                             .arrays = arrays};
    ASSERT_TRUE(p.validate().is_ok());
    launch_step_upload(p, nullptr);
    expect_copied(out.download(), staging.host.data(), width, arrays);
  }
}

TEST(StepUploadTest, AReplayedGraphReadsTheHostsLatestValues) {
  CELLM_REQUIRE_GPU();
  Mapped staging = mapped_staging();
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  DeviceArray<std::int32_t> out(std::vector<std::int32_t>(kPitch * kArrays, -1));
  const StepUploadParams p{
      .src = staging.device, .dst = out.data(), .pitch = kPitch, .width = 9, .arrays = 4};
  fill(staging.host.data(), 0);
  GraphExec::begin_capture(stream->get());
  launch_step_upload(p, stream->get());
  auto graph = GraphExec::end_capture(stream->get());
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  for (std::int32_t step = 1; step <= 5; ++step) {
    fill(staging.host.data(), 1000 * step);
    graph->launch(stream->get());
    stream->synchronize();
    expect_copied(out.download(), staging.host.data(), 9, 4);
  }
}

TEST(StepUploadTest, RefusesAWidthPastThePitch) {
  const StepUploadParams p{.src = reinterpret_cast<const std::int32_t*>(16),
                           .dst = reinterpret_cast<std::int32_t*>(16),
                           .pitch = 8,
                           .width = 9,
                           .arrays = 1};
  const Status s = p.validate();
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("width=9"), std::string::npos) << s.to_string();
  EXPECT_FALSE(
      (StepUploadParams{.dst = p.dst, .pitch = 8, .width = 1, .arrays = 1}.validate().is_ok()));
}

}  // namespace
}  // namespace cellm::cuda
