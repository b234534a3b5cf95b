// The embedding as a captured step's first kernel: it copies entry t of each
// step array from page-locked host memory (through its device mapping) for
// each of its tokens and nothing else, gathers the rows of the tokens it read,
// and a replayed graph reads what the host wrote since, not an earlier copy.
// Refusals run without a GPU.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/embedding.cuh"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::from_bf16;
using testing::random_bf16;

constexpr std::int32_t kPitch = 300;
constexpr std::int32_t kArrays = 6;
constexpr int kVocab = 97;
constexpr int kDim = 64;

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

// Array 0 holds token ids (some outside the vocabulary), the others anything.
void fill(std::int32_t* host, std::int32_t base) {
  for (std::int32_t i = 0; i < kPitch * kArrays; ++i) {
    host[i] = i < kPitch ? (base + i * 7) % (kVocab + 3) : base + i * 7;
  }
}

class Upload {
 public:
  explicit Upload(const std::vector<bf16>& table)
      : table_(table),
        arrays_(std::vector<std::int32_t>(kPitch * kArrays, -1)),
        out_(std::vector<bf16>(static_cast<std::size_t>(kPitch) * kDim)) {}

  EmbeddingParams params(const Mapped& staging, int tokens, int arrays) {
    EmbeddingParams p{.tokens = arrays_.data(),
                      .table = table_.data(),
                      .out = out_.data(),
                      .num_tokens = tokens,
                      .vocab = kVocab,
                      .dim = kDim};
    p.upload_src = staging.device;
    p.upload_dst = arrays_.data();
    p.upload_pitch = kPitch;
    p.upload_arrays = arrays;
    return p;
  }
  // Entries [0, tokens) of the first `arrays` arrays hold the host's values,
  // the others the poison; each row of out is its token's row (or zeros).
  void expect_uploaded(const std::int32_t* host, const std::vector<bf16>& table, int tokens,
                       int arrays) {
    const auto got = arrays_.download();
    for (std::int32_t a = 0; a < kArrays; ++a) {
      for (std::int32_t i = 0; i < kPitch; ++i) {
        const std::int32_t at = a * kPitch + i;
        ASSERT_EQ(got[at], a < arrays && i < tokens ? host[at] : -1) << "array " << a << " " << i;
      }
    }
    const auto rows = out_.download();
    for (int t = 0; t < tokens; ++t) {
      const int token = host[t];
      const bool valid = token >= 0 && token < kVocab;
      for (int d = 0; d < kDim; ++d) {
        ASSERT_EQ(from_bf16(rows[static_cast<std::size_t>(t) * kDim + d]),
                  valid ? from_bf16(table[static_cast<std::size_t>(token) * kDim + d]) : 0.0f)
            << "token " << t << " dim " << d;
      }
    }
  }
  void reset() { arrays_.assign(std::vector<std::int32_t>(kPitch * kArrays, -1)); }

 private:
  DeviceArray<bf16> table_;
  DeviceArray<std::int32_t> arrays_;
  DeviceArray<bf16> out_;
};

TEST(EmbeddingUploadTest, CopiesEachTokensEntriesAndGathersTheTokensItRead) {
  CELLM_REQUIRE_GPU();
  std::mt19937 rng(3);
  const auto table = random_bf16(static_cast<std::size_t>(kVocab) * kDim, rng);
  Mapped staging = mapped_staging();
  fill(staging.host.data(), 11);
  Upload upload(table);
  for (const auto& [tokens, arrays] :
       std::vector<std::pair<int, int>>{{1, 6}, {3, 2}, {64, 5}, {257, 6}, {kPitch, 1}}) {
    upload.reset();
    const EmbeddingParams p = upload.params(staging, tokens, arrays);
    ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
    launch_embedding(p, nullptr);
    upload.expect_uploaded(staging.host.data(), table, tokens, arrays);
  }
}

TEST(EmbeddingUploadTest, AReplayedGraphReadsTheHostsLatestValues) {
  CELLM_REQUIRE_GPU();
  std::mt19937 rng(4);
  const auto table = random_bf16(static_cast<std::size_t>(kVocab) * kDim, rng);
  Mapped staging = mapped_staging();
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  Upload upload(table);
  fill(staging.host.data(), 0);
  GraphExec::begin_capture(stream->get());
  launch_embedding(upload.params(staging, 9, 4), stream->get());
  auto graph = GraphExec::end_capture(stream->get());
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  for (std::int32_t step = 1; step <= 5; ++step) {
    fill(staging.host.data(), 13 * step);
    graph->launch(stream->get());
    stream->synchronize();
    upload.expect_uploaded(staging.host.data(), table, 9, 4);
  }
}

TEST(EmbeddingUploadTest, RefusesTooManyArraysOrAShortPitch) {
  alignas(16) static std::byte storage[64];
  auto* ints = reinterpret_cast<std::int32_t*>(storage);
  const auto* rows = reinterpret_cast<const bf16*>(storage);
  EmbeddingParams p{.tokens = ints,
                    .table = rows,
                    .out = reinterpret_cast<bf16*>(storage),
                    .num_tokens = 9,
                    .vocab = 4,
                    .dim = 8};
  p.upload_src = ints;
  p.upload_dst = ints;
  p.upload_pitch = 8;
  p.upload_arrays = 2;
  Status s = p.validate();
  EXPECT_NE(s.message().find("pitch 8 for 9 tokens"), std::string::npos) << s.to_string();
  p.upload_pitch = 9;
  EXPECT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  p.upload_arrays = kEmbeddingMaxUploadArrays + 1;
  EXPECT_FALSE(p.validate().is_ok());
  p.upload_arrays = 2;
  p.upload_dst = nullptr;
  EXPECT_NE(p.validate().message().find("upload_dst"), std::string::npos);
}

}  // namespace
}  // namespace cellm::cuda
