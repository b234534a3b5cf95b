// The kernel choices left open: their defaults are the measured ones, a
// program's options (or the CELLM_* knobs, core/env.h) set them, and
// describe() names them for benchmark labels. The knobs' parsing and the
// start-up check are tests/core/env_test.cpp. Runs without a GPU.
#include "backend/cuda/kernels/kernel_choice.h"

#include <string>

#include <gtest/gtest.h>

#include "backend/cuda/kernels/attention.cuh"

namespace cellm::cuda {
namespace {

TEST(KernelChoiceTest, DefaultsAreTheMeasuredOnes) {
  const KernelChoice k;
  EXPECT_EQ(k.gemv_max_rows, 1);
  EXPECT_EQ(k.gemv_mma, kMmaQkv | kMmaO | kMmaGateUp | kMmaDown);
  // Parsing an empty environment gives the same choices.
  auto parsed = parse_knobs([](const char*) -> std::optional<std::string> { return std::nullopt; });
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->kernels, k);
}

TEST(KernelChoiceTest, FrozenDecodeSplitsAreValidForTheKernel) {
  EXPECT_TRUE(valid_attention_cluster(kDecodeCluster));
  EXPECT_EQ(kAttentionMaxSplits % kDecodeCluster, 0);
  EXPECT_GE(kDecodeSplitKeys, 64);  // the split plan's granularity
  EXPECT_GE(kDecodeSplitTarget, 1);
}

TEST(KernelChoiceTest, DescribeNamesEveryOpenChoice) {
  EXPECT_EQ(describe(KernelChoice{}), "gemv_max_rows=1 mma=qkv,o,gate_up,down");
  KernelChoice k;
  k.gemv_max_rows = 4;
  k.gemv_mma = kMmaO | kMmaHead;
  EXPECT_EQ(describe(k), "gemv_max_rows=4 mma=o,lm_head");
  k.gemv_mma = kMmaAll;
  EXPECT_EQ(describe(k), "gemv_max_rows=4 mma=1");
  k.gemv_mma = 0;
  EXPECT_EQ(describe(k), "gemv_max_rows=4 mma=0");
}

}  // namespace
}  // namespace cellm::cuda
