// The decode stream (one-token steps in one persistent kernel) against the
// float32 CPU program and against the GEMV kernel chain, on random-weight
// models small enough for the CPU but shaped to reach every path of the
// kernel: 64- and 128-wide heads, 2 to 8 q heads per kv head, a q/k/v bias,
// llama3 rope scaling, histories of one key range per kv head (written
// directly), of many ranges (merged by the last one) and of ranges longer
// than a warp's batch of keys. The check itself is one_token_variant.h's.
#include <string>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_program.h"
#include "one_token_variant.h"

namespace cellm::gpu_testing {
namespace {

class DecodeStreamTest : public ::testing::TestWithParam<OneTokenCase> {};

TEST_P(DecodeStreamTest, OneTokenStepsMatchTheCpuProgramAndTheKernelChain) {
  expect_one_token_variant_matches(
      GetParam(), "stream",
      [](cuda::CudaProgramKnobs& knobs, bool on) {
        knobs.kernels.decode_stream = on;
        knobs.kernels.decode_fused_o = false;  // the chain as it was
      },
      cuda::decode_stream_unavailable);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeStreamTest,
    ::testing::Values(
        // Histories of 1..12 keys: one range per kv head, written without a merge.
        OneTokenCase{"llama_hd64_short", kLlama64, 1, 12},
        // ~4,200 keys: 33 ranges of 128 keys per kv head, four batches per block.
        OneTokenCase{"llama_hd64_long", kLlama64, 4200, 6},
        // Eight q heads per kv head, 700 keys in 44 ranges.
        OneTokenCase{"llama_hd128_group8", kLlama128, 700, 8},
        OneTokenCase{"qwen2_bias_hd128", kQwen2Bias, 300, 8}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cellm::gpu_testing
