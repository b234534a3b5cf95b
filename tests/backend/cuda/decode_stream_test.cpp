// Host-side rules of the decode stream (kernels/decode_stream.cuh): which
// shapes it takes, and that the shared-memory plan of the headline models
// fits an H200 block with enough weight stages. The kernel itself is checked
// end to end in tests/gpu/decode_stream_gpu_test.cpp.
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "backend/cuda/kernels/decode_stream.cuh"

namespace cellm::cuda {
namespace {

constexpr std::int32_t kH200Sms = 132;
constexpr std::int32_t kH200SmemOptin = 232448;

TEST(DecodeStreamTest, TakesTheLlamaShapesAndSaysWhyNotOthers) {
  EXPECT_STREQ(decode_stream_unsupported(2048, 2048, 8192, 32, 8, 64), "");    // Llama-3.2-1B
  EXPECT_STREQ(decode_stream_unsupported(4096, 4096, 14336, 32, 8, 128), "");  // Llama-3.1-8B
  EXPECT_NE(std::string(decode_stream_unsupported(576, 576, 1536, 9, 3, 64)), "");  // SmolLM2
  EXPECT_NE(std::string(decode_stream_unsupported(4096, 4096, 14336, 32, 8, 96)), "");
  EXPECT_NE(std::string(decode_stream_unsupported(4096, 4096, 14336, 32, 2, 128)), "");  // 16 per kv head
  EXPECT_NE(std::string(decode_stream_unsupported(8192, 8192, 28672, 64, 8, 128)), "");  // k > 16384
  EXPECT_NE(std::string(decode_stream_unsupported(768, 768, 2048, 12, 4, 64)), "");      // k < 1024
}

TEST(DecodeStreamTest, LayoutOfTheHeadlineModelsFitsOneBlockPerSm) {
  for (const auto& [hidden, inter, heads, kv_heads, head_dim] :
       {std::tuple{2048, 8192, 32, 8, 64}, std::tuple{4096, 14336, 32, 8, 128}}) {
    const DecodeStreamLayout layout = decode_stream_layout(
        hidden, heads * head_dim, inter, heads, kv_heads, head_dim, kH200Sms, kH200SmemOptin);
    EXPECT_GE(layout.stages, 3) << hidden;
    EXPECT_GT(layout.smem_bytes, layout.stages * 32 * 1024) << hidden;
    EXPECT_LE(layout.smem_bytes, kH200SmemOptin) << hidden;
  }
  // Too little shared memory for three stages: no layout, so the chain runs.
  const DecodeStreamLayout small = decode_stream_layout(2048, 2048, 8192, 32, 8, 64, kH200Sms,
                                                        99 * 1024);
  EXPECT_EQ(small.stages, 0);
  EXPECT_EQ(small.smem_bytes, 0);
}

}  // namespace
}  // namespace cellm::cuda
