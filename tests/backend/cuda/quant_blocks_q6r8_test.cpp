// Q6_K rows repacked for 16-byte loads (kernels/quant_blocks_q6r8.h), on the
// host: the repacking moves every byte and only within its row; the generic
// decoder over the repacked rows, and the wide-load kernel's lane map and bit
// unpacking (the arithmetic of qgemv_q6k_r8_kernel, with the host's integer
// to float conversions), give each weight once, at its position, with the
// value the CPU's reference dequantizer gives for the file's rows. Needs no
// GPU.
#include "backend/cuda/kernels/quant_blocks_q6r8.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "cellm/status.h"
#include "format/ggml_types.h"

namespace cellm::cuda::qblocks {
namespace {

constexpr int kQ6kBytes = 210;

// `rows` rows of random Q6_K blocks, `stride` bytes apart: any quant and
// scale bytes, d an f16 of either sign and magnitude 2^-7..2^-3.
std::vector<std::uint8_t> random_q6k(int rows, int k, int stride, std::mt19937& rng) {
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows) * stride);
  std::uniform_int_distribution<int> byte(0, 255), exponent(8, 12), mantissa(0, 1023), sign(0, 1);
  for (auto& b : out) b = static_cast<std::uint8_t>(byte(rng));
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < k / 256; ++b) {
      const auto bits = static_cast<std::uint16_t>((sign(rng) == 1 ? 0x8000 : 0) |
                                                   (exponent(rng) << 10) | mantissa(rng));
      std::memcpy(out.data() + static_cast<std::size_t>(r) * stride + b * kQ6kBytes + 208, &bits,
                  2);
    }
  }
  return out;
}

std::vector<float> reference(const std::uint8_t* row, int k) {
  std::vector<float> out(static_cast<std::size_t>(k));
  const Status s = format::dequantize_f32(
      format::GgmlType::kQ6_K,
      std::span<const std::uint8_t>(row, static_cast<std::size_t>(k / 256 * kQ6kBytes)), out);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

// Compares decoded weights with the reference: each exactly once, equal up
// to the rounding of a fused multiply-add.
void expect_matches(const std::vector<float>& got, const std::vector<int>& hits,
                    const std::vector<float>& want, const char* what) {
  int wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(hits[i], 1) << what << " weight " << i;
    const float tol = 1e-6f * std::fabs(want[i]) + 1e-30f;
    if (!(std::fabs(got[i] - want[i]) <= tol) && ++wrong <= 5) {
      ADD_FAILURE() << what << " weight " << i << ": " << got[i] << ", reference " << want[i];
    }
  }
}

TEST(Q6R8Test, RepackableRowsAreWholeGroups) {
  EXPECT_TRUE(q6r8_repackable(2048));
  EXPECT_TRUE(q6r8_repackable(14336));  // Llama 3 8B's intermediate size
  EXPECT_FALSE(q6r8_repackable(768));
  EXPECT_FALSE(q6r8_repackable(3072));  // 12 blocks: one group and a half
  EXPECT_FALSE(q6r8_repackable(0));
  // A group is 105 16-byte lines; its fields start on 16-byte boundaries.
  EXPECT_EQ(Q6R8::kBytes, 8 * kQ6kBytes);
  EXPECT_EQ(Q6R8::kBytes % 16, 0);
  for (int j = 0; j < Q6R8::kBlocks; ++j) {
    EXPECT_EQ(Q6R8::ql(j) % 16, 0);
    EXPECT_EQ(Q6R8::qh(j) % 16, 0);
    EXPECT_EQ(Q6R8::scales(j) % 16, 0);
  }
  EXPECT_EQ(Q6R8::d(7) + 2, Q6R8::kBytes);
}

// Every byte of a row stays in that row (the same bytes, in another order),
// and the stride's padding is not written.
TEST(Q6R8Test, RepackMovesEveryByteWithinItsRow) {
  std::mt19937 rng(11);
  const int rows = 3, k = 4096, row_bytes = k / 256 * kQ6kBytes, stride = row_bytes + 16;
  const std::vector<std::uint8_t> src = random_q6k(rows, k, stride, rng);
  std::vector<std::uint8_t> dst(src.size(), 0xAB);
  repack_q6k_r8_rows(src.data(), dst.data(), rows, stride, k);
  for (int r = 0; r < rows; ++r) {
    const auto* s = src.data() + static_cast<std::size_t>(r) * stride;
    const auto* d = dst.data() + static_cast<std::size_t>(r) * stride;
    std::vector<std::uint8_t> a(s, s + row_bytes), b(d, d + row_bytes);
    EXPECT_NE(a, b) << "row " << r << " not rearranged";
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b) << "row " << r;
    for (int i = row_bytes; i < stride; ++i) EXPECT_EQ(d[i], 0xAB) << "row " << r << " pad " << i;
  }
}

// The generic kernel's walk (Q6_K's lanes, 256 weights a step) over the
// repacked rows.
TEST(Q6R8Test, GenericDecoderMatchesTheReference) {
  for (const int k : {2048, 6144, 14336}) {
    std::mt19937 rng(static_cast<unsigned>(k));
    const int row_bytes = k / 256 * kQ6kBytes;
    for (int trial = 0; trial < 3; ++trial) {
      const std::vector<std::uint8_t> row = random_q6k(1, k, row_bytes, rng);
      std::vector<std::uint8_t> packed(row.size());
      repack_q6k_r8_rows(row.data(), packed.data(), 1, row_bytes, k);
      std::vector<float> got(static_cast<std::size_t>(k), NAN);
      std::vector<int> hits(static_cast<std::size_t>(k), 0);
      const int blocks = k / Q6_K_R8::kBlockElems;
      for (int g = 0; g < k / 256; ++g) {
        for (int lane = 0; lane < 32; ++lane) {
          ASSERT_TRUE(Q6_K_R8::valid(g, lane, blocks));
          Q6_K_R8::Raw raw;
          Q6_K_R8::load(raw, packed.data(), g, lane);
          float w[8];
          Q6_K_R8::decode(raw, lane, w);
          for (int run = 0; run < Q6_K_R8::kRuns; ++run) {
            for (int t = 0; t < Q6_K_R8::kRunLen; ++t) {
              const int pos = Q6_K_R8::pos(g, lane, run) + t;
              ASSERT_GE(pos, 0);
              ASSERT_LT(pos, k);
              got[static_cast<std::size_t>(pos)] = w[run * Q6_K_R8::kRunLen + t];
              ++hits[static_cast<std::size_t>(pos)];
            }
          }
        }
      }
      expect_matches(got, hits, reference(row.data(), k), "Q6_K_R8 generic");
    }
  }
}

std::uint32_t word_at(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The wide kernel's lanes: their loads (aligned as the kernel's vector loads
// need, and covering every quant byte of a group exactly once) and the
// values qgemv_q6k_r8_kernel computes from them, (d * scale) * (q - 32).
TEST(Q6R8Test, WideLanesMatchTheReference) {
  for (const int k : {2048, 4096, 14336}) {
    std::mt19937 rng(static_cast<unsigned>(k) + 5u);
    const int row_bytes = k / 256 * kQ6kBytes;
    const std::vector<std::uint8_t> row = random_q6k(1, k, row_bytes, rng);
    std::vector<std::uint8_t> packed(row.size());
    repack_q6k_r8_rows(row.data(), packed.data(), 1, row_bytes, k);
    std::vector<float> got(static_cast<std::size_t>(k), NAN);
    std::vector<int> hits(static_cast<std::size_t>(k), 0);
    for (int g = 0; g < k / Q6R8::kElems; ++g) {
      std::vector<int> quant_reads(Q6R8::kScales, 0);  // ql and qh bytes of the group
      const std::uint8_t* group = packed.data() + static_cast<std::size_t>(g) * Q6R8::kBytes;
      for (int lane = 0; lane < 32; ++lane) {
        const int ql = Q6R8Wide::ql_at(lane), qh = Q6R8Wide::qh_at(lane);
        const int sc = Q6R8Wide::scales_at(lane), d_at = Q6R8Wide::d_at(lane);
        ASSERT_EQ(ql % 16, 0) << "lane " << lane;
        ASSERT_EQ(qh % 16, 0) << "lane " << lane;
        ASSERT_EQ(sc % 8, 0) << "lane " << lane;
        ASSERT_EQ(d_at % 2, 0) << "lane " << lane;
        ASSERT_LT(qh, Q6R8::kScales);
        ASSERT_LT(ql + 32, Q6R8::kQh);
        for (int i = 0; i < 16; ++i) {
          ++quant_reads[static_cast<std::size_t>(ql + i)];
          ++quant_reads[static_cast<std::size_t>(ql + 32 + i)];
          ++quant_reads[static_cast<std::size_t>(qh + i)];
        }
        std::uint16_t d_bits;
        std::memcpy(&d_bits, group + d_at, 2);
        const float d = half_bits(d_bits);
        for (int run = 0; run < 4; ++run) {
          const auto scale = static_cast<std::int8_t>(group[sc + Q6R8Wide::scale_index(lane, run)]);
          const float ds = d * small_if(scale);
          for (int w = 0; w < 4; ++w) {
            const std::uint32_t v =
                Q6R8Wide::quants(word_at(group + ql + 4 * w), word_at(group + ql + 32 + 4 * w),
                                 word_at(group + qh + 4 * w), run);
            for (int t = 0; t < 4; ++t) {
              const int pos = Q6R8Wide::pos(g, lane, run) + 4 * w + t;
              ASSERT_GE(pos, 0);
              ASSERT_LT(pos, k);
              const std::uint32_t q = byte_of(v, t);
              ASSERT_LT(q, 64u) << "a six-bit quant";
              got[static_cast<std::size_t>(pos)] = ds * small_if(static_cast<int>(q) - 32);
              ++hits[static_cast<std::size_t>(pos)];
            }
          }
        }
      }
      for (int i = 0; i < Q6R8::kScales; ++i) {
        EXPECT_EQ(quant_reads[static_cast<std::size_t>(i)], 1) << "group byte " << i;
      }
    }
    expect_matches(got, hits, reference(row.data(), k), "Q6_K_R8 wide");
  }
}

}  // namespace
}  // namespace cellm::cuda::qblocks
