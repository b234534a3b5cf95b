// The ring GEMV (CELLM_GEMV_RING: a one-token step's q/k/v, o, gate/up and
// down projections stream their weights into shared memory by bulk copies,
// one block an SM beside the next projection's) against the float32 CPU
// program and against the register GEMV chain, on random-weight models with
// 64- and 128-wide heads, 2, 4 and 8 q heads per kv head, hidden sizes of 4 and
// 5 times 256, intermediate sizes of 6, 11 and 13 times 256, a q/k/v bias, and
// histories of 1 to 4,200 keys. The decode stream is off in both GPU
// programs. The check itself is one_token_variant.h's.
#include <string>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_program.h"
#include "one_token_variant.h"

namespace cellm::gpu_testing {
namespace {

class GemvRingProgramTest : public ::testing::TestWithParam<OneTokenCase> {};

TEST_P(GemvRingProgramTest, OneTokenStepsMatchTheCpuProgramAndTheRegisterGemv) {
  expect_one_token_variant_matches(
      GetParam(), "ring",
      [](cuda::CudaProgramKnobs& knobs, bool on) {
        knobs.kernels.gemv_ring = on;
        knobs.kernels.decode_stream = false;
      },
      cuda::gemv_ring_unavailable);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvRingProgramTest,
                         ::testing::Values(OneTokenCase{"llama_hd64_short", kLlama64, 1, 12},
                                           OneTokenCase{"llama_hd64_long", kLlama64, 4200, 6},
                                           OneTokenCase{"llama_hd128_group8", kLlama128, 700, 8},
                                           OneTokenCase{"qwen2_bias_hd128", kQwen2Bias, 300, 8}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cellm::gpu_testing
