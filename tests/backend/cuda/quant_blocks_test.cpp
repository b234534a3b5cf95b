// The quantized GEMV's block decoders (kernels/quant_blocks.h), run on the
// host: for random blocks of every type, the 32 lanes of every 256-weight
// group must together produce each weight of the row exactly once, at its
// position, with the value the CPU's reference dequantizer gives (up to the
// rounding of a fused multiply-add). Needs no GPU.
#include "backend/cuda/kernels/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cellm/status.h"
#include "core/dtype.h"
#include "format/fp8.h"
#include "format/ggml_types.h"

namespace cellm::cuda::qblocks {
namespace {

// Random blocks with f16 scales of 2^-7..2^-3 at `halves` (the rest of a
// block is quants, where any bytes are valid).
template <class D>
std::vector<std::uint8_t> random_row(int blocks, const std::vector<int>& halves,
                                     std::mt19937& rng) {
  std::vector<std::uint8_t> row(static_cast<std::size_t>(blocks) * D::kBlockBytes);
  std::uniform_int_distribution<int> byte(0, 255), exponent(8, 12), mantissa(0, 1023), sign(0, 1);
  for (auto& b : row) b = static_cast<std::uint8_t>(byte(rng));
  for (int b = 0; b < blocks; ++b) {
    for (int at : halves) {
      const auto bits = static_cast<std::uint16_t>((sign(rng) == 1 ? 0x8000 : 0) |
                                                   (exponent(rng) << 10) | mantissa(rng));
      std::memcpy(row.data() + static_cast<std::size_t>(b) * D::kBlockBytes + at, &bits, 2);
    }
  }
  return row;
}

template <class D>
void check_type(format::GgmlType type, const std::vector<int>& halves, int k) {
  std::mt19937 rng(static_cast<unsigned>(type) * 31u + static_cast<unsigned>(k));
  const int blocks = k / D::kBlockElems;
  for (int trial = 0; trial < 4; ++trial) {
    const std::vector<std::uint8_t> row = random_row<D>(blocks, halves, rng);
    std::vector<float> want(static_cast<std::size_t>(k));
    const Status s = format::dequantize_f32(type, row, want);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    std::vector<float> got(static_cast<std::size_t>(k), NAN);
    std::vector<int> hits(static_cast<std::size_t>(k), 0);
    const int groups = (k + 255) / 256;
    for (int g = 0; g < groups; ++g) {
      for (int lane = 0; lane < 32; ++lane) {
        if (!D::valid(g, lane, blocks)) continue;
        typename D::Raw raw;
        D::load(raw, row.data(), g, lane);
        float w[8];
        D::decode(raw, lane, w);
        for (int run = 0; run < D::kRuns; ++run) {
          for (int t = 0; t < D::kRunLen; ++t) {
            const int pos = D::pos(g, lane, run) + t;
            ASSERT_GE(pos, 0);
            ASSERT_LT(pos, k) << "group " << g << " lane " << lane;
            got[static_cast<std::size_t>(pos)] = w[run * D::kRunLen + t];
            ++hits[static_cast<std::size_t>(pos)];
          }
        }
      }
    }
    int wrong = 0;
    for (int i = 0; i < k; ++i) {
      const auto u = static_cast<std::size_t>(i);
      EXPECT_EQ(hits[u], 1) << format::ggml_type_name(type) << " weight " << i;
      const float tol = 1e-6f * std::fabs(want[u]) + 1e-30f;
      if (!(std::fabs(got[u] - want[u]) <= tol) && ++wrong <= 5) {
        ADD_FAILURE() << format::ggml_type_name(type) << " weight " << i << ": " << got[u]
                      << ", reference " << want[u];
      }
    }
  }
}

// The host path of half_bits (the device converts with cvt.f32.f16): every
// f16 bit pattern as core's converter reads it.
TEST(QuantBlocksTest, HalfBitsIsTheF16Value) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const float got = half_bits(bits);
    const float want = f16_to_f32(static_cast<std::uint16_t>(bits));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << bits;
    } else {
      EXPECT_EQ(got, want) << bits;
    }
  }
}

TEST(QuantBlocksTest, Q4_0) {
  check_type<Q4_0>(format::GgmlType::kQ4_0, {0}, 576);
}
TEST(QuantBlocksTest, Q4_1) {
  check_type<Q4_1>(format::GgmlType::kQ4_1, {0, 2}, 576);
}
TEST(QuantBlocksTest, Q5_0) {
  check_type<Q5_0>(format::GgmlType::kQ5_0, {0}, 576);
}
TEST(QuantBlocksTest, Q8_0) {
  check_type<Q8_0>(format::GgmlType::kQ8_0, {0}, 576);
}
TEST(QuantBlocksTest, Q4_K) {
  check_type<Q4_K>(format::GgmlType::kQ4_K, {0, 2}, 768);
}
TEST(QuantBlocksTest, Q5_K) {
  check_type<Q5_K>(format::GgmlType::kQ5_K, {0, 2}, 768);
}
TEST(QuantBlocksTest, Q6_K) {
  check_type<Q6_K>(format::GgmlType::kQ6_K, {208}, 768);
}
TEST(QuantBlocksTest, Q5_1) {
  check_type<Q5_1>(format::GgmlType::kQ5_1, {0, 2}, 576);
}
TEST(QuantBlocksTest, Q2_K) {
  check_type<Q2_K>(format::GgmlType::kQ2_K, {80, 82}, 768);
}
TEST(QuantBlocksTest, Q3_K) {
  check_type<Q3_K>(format::GgmlType::kQ3_K, {108}, 768);
}
TEST(QuantBlocksTest, IQ4_XS) {
  check_type<IQ4_XS>(format::GgmlType::kIQ4_XS, {0}, 768);
}

// FP8 rows: every code of a row (all 256 values, NaN codes included, in a
// shuffled order over a row of 576) decoded once, at its position, as
// format's table decodes it (the kernels apply the scales afterwards).
TEST(QuantBlocksTest, F8_E4M3) {
  constexpr int k = 576;
  std::vector<std::uint8_t> row(k);
  for (int i = 0; i < k; ++i) row[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 256);
  std::mt19937 rng(7);
  std::shuffle(row.begin(), row.end(), rng);
  std::vector<int> hits(k, 0);
  const int blocks = k / F8_E4M3::kBlockElems;
  for (int g = 0; g < (k + 255) / 256; ++g) {
    for (int lane = 0; lane < 32; ++lane) {
      if (!F8_E4M3::valid(g, lane, blocks)) continue;
      F8_E4M3::Raw raw;
      F8_E4M3::load(raw, row.data(), g, lane);
      float w[8];
      F8_E4M3::decode(raw, lane, w);
      for (int t = 0; t < 8; ++t) {
        const int pos = F8_E4M3::pos(g, lane, 0) + t;
        ASSERT_LT(pos, k);
        ++hits[static_cast<std::size_t>(pos)];
        const std::uint8_t code = row[static_cast<std::size_t>(pos)];
        const float want = format::e4m3_to_f32(code);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(w[t])) << "code " << int{code};
        } else {
          EXPECT_EQ(w[t], want) << "code " << int{code};
          EXPECT_EQ(std::signbit(w[t]), std::signbit(want)) << "code " << int{code};
        }
      }
    }
  }
  for (int i = 0; i < k; ++i) EXPECT_EQ(hits[static_cast<std::size_t>(i)], 1) << "weight " << i;
}

}  // namespace
}  // namespace cellm::cuda::qblocks
