// Arena bookkeeping (host memory, no device needed), params validation
// (no device needed) and the RAII resources and graph capture (device).
#include <cstdlib>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/arena.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/rms_norm.cuh"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/kernels/soft_cap.cuh"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;

struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};

TEST(CudaArenaTest, LeasesStackAndReleaseInReverseOrder) {
  std::unique_ptr<void, AlignedFree> memory(std::aligned_alloc(kArenaAlignment, 4096));
  Arena arena(memory.get(), 4096);
  {
    auto a = arena.lease(10);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->data(), memory.get());
    EXPECT_EQ(arena.used(), kArenaAlignment);
    auto b = arena.lease(300);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->as<std::byte>(), static_cast<std::byte*>(memory.get()) + kArenaAlignment);
    EXPECT_EQ(arena.used(), 3 * kArenaAlignment);
  }
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.high_water(), 3 * kArenaAlignment);
}

TEST(CudaArenaTest, ExhaustionIsRefusedAndChangesNothing) {
  std::unique_ptr<void, AlignedFree> memory(std::aligned_alloc(kArenaAlignment, 1024));
  Arena arena(memory.get(), 1024);
  auto a = arena.lease(512);
  ASSERT_TRUE(a.ok());
  auto too_big = arena.lease(600);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kOutOfResources);
  EXPECT_EQ(arena.used(), 512u);
  auto fits = arena.lease(512);
  EXPECT_TRUE(fits.ok());
}

TEST(CudaArenaTest, MovedLeaseReleasesOnce) {
  std::unique_ptr<void, AlignedFree> memory(std::aligned_alloc(kArenaAlignment, 1024));
  Arena arena(memory.get(), 1024);
  {
    auto a = arena.lease(100);
    ASSERT_TRUE(a.ok());
    ArenaLease moved = std::move(*a);
    EXPECT_EQ(arena.used(), kArenaAlignment);
  }
  EXPECT_EQ(arena.used(), 0u);
}

TEST(CudaArenaTest, PlanSumsAlignedRequests) {
  ArenaPlan plan;
  plan.add(1);
  plan.add(kArenaAlignment);
  plan.add_max_of(10, 3 * kArenaAlignment);
  EXPECT_EQ(plan.total(), 5 * kArenaAlignment);
}

TEST(CudaValidateTest, RmsNormRefusesNullAliasAndBadDim) {
  alignas(16) bf16 buf[64];
  RmsNormParams p{.x = buf, .residual = buf, .weight = buf, .out = buf, .rows = 1, .dim = 8};
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);  // out aliases residual
  p.residual = nullptr;
  EXPECT_TRUE(p.validate().is_ok());
  p.dim = 12;
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p.dim = 8;
  p.weight = nullptr;
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
}

TEST(CudaValidateTest, AttentionChecksHeadDimGroupsAndSplits) {
  alignas(16) bf16 buf[64];
  std::int32_t ints[4] = {};
  AttentionParams p{.q = buf,
                    .out = buf,
                    .k_pool = buf,
                    .v_pool = buf,
                    .cell_table = ints,
                    .seq_slots = ints,
                    .positions = ints,
                    .q_stride = 64,
                    .out_stride = 64,
                    .num_tokens = 1,
                    .num_heads = 4,
                    .num_kv_heads = 2,
                    .head_dim = 16,
                    .max_cells = 4,
                    .max_seqs = 1,
                    .table_stride = 4,
                    .scale = 0.25f};
  EXPECT_TRUE(p.validate().is_ok());
  EXPECT_TRUE(p.validate_decode().is_ok());
  p.head_dim = 12;
  EXPECT_EQ(p.validate().code(), StatusCode::kNotSupported);
  p.head_dim = 512;
  EXPECT_EQ(p.validate().code(), StatusCode::kNotSupported);
  p.head_dim = 16;
  p.num_kv_heads = 3;
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p.num_kv_heads = 2;
  p.num_splits = 4;
  EXPECT_EQ(p.validate_decode().code(), StatusCode::kInvalidArgument);  // no workspace
  p.num_splits = kAttentionMaxSplits + 1;
  EXPECT_EQ(p.validate_decode().code(), StatusCode::kInvalidArgument);
}

TEST(CudaValidateTest, DecodeSplitsFillTheMachineAndRespectLength) {
  // Wide steps already fill the SMs; one row of a long context splits, at
  // most as often as the keys allow, rounded to whole clusters.
  EXPECT_EQ(attention_decode_v2_splits(256, 32, 8, 8192, 132, 128), 1);
  EXPECT_GT(attention_decode_v2_splits(1, 32, 8, 8192, 132, 128), 8);
  EXPECT_EQ(attention_decode_v2_splits(1, 32, 8, 64, 132, 128), 1);
  EXPECT_LE(attention_decode_v2_splits(1, 1, 1, 1 << 20, 132, 1), kAttentionMaxSplits);
  EXPECT_EQ(attention_decode_v2_splits(1, 32, 8, 8192, 132, 128, 2, 8) % 8, 0);
  EXPECT_EQ(attention_decode_workspace_bytes(3, 4, 64, 1), 0u);
  EXPECT_EQ(attention_decode_workspace_bytes(3, 4, 64, 2), 3u * 4 * 2 * 66 * sizeof(float));
}

TEST(CudaValidateTest, SamplerNeedsParams) {
  float logits[8] = {};
  std::int32_t out[1] = {};
  SampleParams p{.logits = logits, .out = out, .logits_stride = 8, .rows = 1, .vocab = 8};
  EXPECT_TRUE(p.validate_argmax().is_ok());
  EXPECT_EQ(p.validate().code(), StatusCode::kInvalidArgument);
  p.logits_stride = 4;
  EXPECT_EQ(p.validate_argmax().code(), StatusCode::kInvalidArgument);
  // The split argmax's workspace comes whole or not at all.
  p.logits_stride = 8;
  std::int64_t partials[kArgmaxMaxParts] = {};
  std::int32_t counters[1] = {};
  p.argmax_partials = partials;
  EXPECT_EQ(p.validate_argmax().code(), StatusCode::kInvalidArgument);
  p.argmax_counters = counters;
  EXPECT_TRUE(p.validate_argmax().is_ok());
  p.argmax_partials = nullptr;
  EXPECT_EQ(p.validate_argmax().code(), StatusCode::kInvalidArgument);
}

TEST(CudaResourcesTest, BuffersStreamsEventsAndGraphReplay) {
  CELLM_REQUIRE_GPU();
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  EXPECT_TRUE(stream->owns());
  auto pinned = PinnedBuffer<float>::allocate(1000);
  ASSERT_TRUE(pinned.ok());
  for (int i = 0; i < 1000; ++i) pinned->data()[i] = static_cast<float>(i % 37) - 18.0f;
  DeviceArray<float> logits(1000);
  CELLM_CUDA_CHECK(cudaMemcpyAsync(logits.data(), pinned->data(), pinned->bytes(),
                                   cudaMemcpyHostToDevice, stream->get()));
  SoftCapParams cap{.logits = logits.data(), .count = 1000, .cap = 5.0f};
  ASSERT_TRUE(cap.validate().is_ok());

  // Capture one soft cap, replay it twice: same as applying it twice eagerly.
  GraphExec::begin_capture(stream->get());
  launch_soft_cap(cap, stream->get());
  auto graph = GraphExec::end_capture(stream->get());
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  graph->launch(stream->get());
  graph->launch(stream->get());
  auto done = Event::create();
  ASSERT_TRUE(done.ok());
  done->record(stream->get());
  done->synchronize();
  const std::vector<float> got = logits.download();
  for (int i = 0; i < 1000; ++i) {
    float x = pinned->data()[i];
    x = 5.0f * std::tanh(x / 5.0f);
    x = 5.0f * std::tanh(x / 5.0f);
    EXPECT_NEAR(got[i], x, 1e-5f) << i;
  }
}

}  // namespace
}  // namespace cellm::cuda
