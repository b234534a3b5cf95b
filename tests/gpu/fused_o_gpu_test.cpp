// The fused o projection (CELLM_DECODE_FUSED_O: a one-token step's decode
// attention also multiplies its output by the o projection and adds it to the
// residual stream, so no o GEMV runs) against the float32 CPU program and
// against the GEMV kernel chain, on random-weight models shaped to reach each
// path of the fused kernel: 64- and 128-wide heads, 2 and 4 q heads per kv
// head (at 64), a hidden size of 4 and of 5 times 256, a q/k/v bias, and histories
// of one split (the single-split merge), of several and of splits longer than
// one 512-key window of the cell table. The decode stream is off in both GPU
// programs. The check itself is one_token_variant.h's.
#include <string>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_program.h"
#include "one_token_variant.h"

namespace cellm::gpu_testing {
namespace {

class FusedOTest : public ::testing::TestWithParam<OneTokenCase> {};

TEST_P(FusedOTest, OneTokenStepsMatchTheCpuProgramAndTheKernelChain) {
  expect_one_token_variant_matches(
      GetParam(), "fused_o",
      [](cuda::CudaProgramKnobs& knobs, bool on) {
        knobs.kernels.decode_fused_o = on;
        knobs.kernels.decode_stream = false;
      },
      cuda::decode_fused_o_unavailable);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedOTest,
    ::testing::Values(
        // Histories of 1..12 keys, shorter than one split: the single-split merge.
        OneTokenCase{"llama_hd64_short", kLlama64, 1, 12},
        // ~500 keys: several splits of 128 keys.
        OneTokenCase{"llama_hd64_mid", kLlama64, 500, 8},
        // ~4,200 keys: eight splits of ~576 keys, more than one 512-key window of
        // the cell table per block.
        OneTokenCase{"llama_hd64_long", kLlama64, 4200, 6},
        // Two 128-wide q heads per kv head (four do not fit beside three key stages), 700 keys.
        OneTokenCase{"llama_hd128_group2", kLlama128Group2, 700, 8},
        // A q/k/v bias, two q heads per kv head, hidden 1280 = 5 * 256.
        OneTokenCase{"qwen2_bias_hd128", kQwen2Bias, 300, 8}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cellm::gpu_testing
