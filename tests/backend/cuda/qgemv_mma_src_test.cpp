// The tensor-core quantized GEMV's operands, without a GPU: a warp's walk
// over 16 weight rows replayed on the CPU with the kernel's own weight
// sources and operand builders (qgemv_mma_src.cuh: every source, every
// step, every lane) and the m16n8k16 mma emulated from the PTX ISA's
// fragment layout, in float64. Each of the 16 x 8 results must be the
// float64 product of the host-decoded bf16 weights with the eight input
// rows: a lane's A words and its B words must name the same k, every k of
// the rows exactly once, and the sources must decode the bits the block
// decoders decode.
#include "backend/cuda/kernels/qgemv_mma_src.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "qgemv_test_util.h"

namespace cellm::cuda {
namespace {

using namespace qgemv_mma_detail;  // NOLINT(google-build-using-namespace): the sources
using namespace qgemv_test;        // NOLINT(google-build-using-namespace): the block builders

float lo_of(unsigned word) {
  return testing::from_bf16(std::bit_cast<bf16>(static_cast<std::uint16_t>(word & 0xffffu)));
}
float hi_of(unsigned word) {
  return testing::from_bf16(std::bit_cast<bf16>(static_cast<std::uint16_t>(word >> 16)));
}

// d += A (16 x 16) B (16 x 8), the operands rebuilt from the 32 lanes'
// registers as the PTX ISA lays out m16n8k16 (g = lane / 4, t = lane % 4):
// A: a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8,
// 2t + 8..); B: b0 = (k 2t..2t+1, column g), b1 = (k 2t + 8.., column g);
// the lower index in the low half of each word.
void emulate_mma(const unsigned (&a)[32][4], const unsigned (&b)[32][2], double (&d)[16][8]) {
  float am[16][16];
  float bm[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const int rows[4] = {g, g + 8, g, g + 8};
    const int cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int r = 0; r < 4; ++r) {
      am[rows[r]][cols[r]] = lo_of(a[lane][r]);
      am[rows[r]][cols[r] + 1] = hi_of(a[lane][r]);
    }
    for (int r = 0; r < 2; ++r) {
      bm[2 * t + 8 * r][g] = lo_of(b[lane][r]);
      bm[2 * t + 8 * r + 1][g] = hi_of(b[lane][r]);
    }
  }
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      for (int k = 0; k < 16; ++k) d[i][j] += static_cast<double>(am[i][k]) * bm[k][j];
    }
  }
}

// Replays Src over 16 rows of `type` blocks (k columns; rows padded to 16
// bytes past their blocks, as the 16-byte sources need) and 8 input rows.
template <class Src>
void replay(QuantType type, int k) {
  SCOPED_TRACE(type_name(type) + " k=" + std::to_string(k));
  using D = typename Src::Dec;
  std::mt19937 rng(static_cast<unsigned>(k) * 31u + static_cast<unsigned>(type));
  constexpr int kRows = 16, kCols = 8;
  const std::int64_t ldw_bytes =
      static_cast<std::int64_t>(k / quant_block_elems(type)) * quant_block_bytes(type) + 16;
  const auto file = random_rows(file_type(type), kRows, k, ldw_bytes, rng);
  const auto rows = device_rows(type, file, kRows, k, ldw_bytes);
  const Fp8Scales scales = random_scales(kRows, k, 64, rng);
  const int groups = (k + 255) / 256;
  const int blocks = k / D::kBlockElems;
  const std::vector<bf16> x = testing::random_bf16(static_cast<std::size_t>(kCols) * k, rng);
  double d[16][8] = {};
  for (int grp = 0; grp < groups; ++grp) {
    for (int s = 0; s < kStepsPerGroup; ++s) {
      unsigned a1[32][4], a2[32][4], b1[32][2], b2[32][2];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        typename Src::Raw ra{}, rb{};
        Src::load(ra, rows.data() + g * ldw_bytes, grp, t, blocks);
        Src::load(rb, rows.data() + (g + 8) * ldw_bytes, grp, t, blocks);
        float wa[8], wb[8];
        Src::decode(ra, Src::prepare(ra, t), s, t, wa);
        Src::decode(rb, Src::prepare(rb, t), s, t, wb);
        const bool live = Src::live(grp, s, t, blocks);
        if constexpr (qblocks::scaled_v<D>) {
          const int at = live ? Src::pos(grp, s, t, 0) : 0;
          for (int e = 0; e < 8; ++e) {
            wa[e] *= scales.values[static_cast<std::size_t>(g * scales.ld + at / scales.cols)];
            wb[e] *=
                scales.values[static_cast<std::size_t>((g + 8) * scales.ld + at / scales.cols)];
          }
        }
        a_words(wa, wb, live, a1[lane], a2[lane]);
        unsigned b[4];
        host_b_words<Src>(x.data() + static_cast<std::size_t>(g) * k, k, grp, s, t, b);
        b1[lane][0] = b[0];
        b1[lane][1] = b[1];
        b2[lane][0] = b[2];
        b2[lane][1] = b[3];
      }
      emulate_mma(a1, b1, d);
      emulate_mma(a2, b2, d);
    }
  }

  const std::vector<float> w = host_decoded(type, file, kRows, k, ldw_bytes, scales);
  const std::vector<float> xf = testing::to_float(x);
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kCols; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int c = 0; c < k; ++c) {
        const double p = static_cast<double>(w[static_cast<std::size_t>(i) * k + c]) *
                         xf[static_cast<std::size_t>(j) * k + c];
        ref += p;
        mag += std::fabs(p);
      }
      // The same exact products, added in another order in float64.
      EXPECT_NEAR(d[i][j], ref, 1e-12 * mag + 1e-30) << "weight row " << i << ", input row " << j;
    }
  }
}

TEST(QGemvMmaSrcTest, GenericSourcesFeedTheMmaTheDecodedProduct) {
  using namespace qblocks;  // NOLINT(google-build-using-namespace): the decoders
  // 32-weight types: one block, and 18 (a group cut short: dead steps).
  for (int k : {32, 576}) {
    replay<GenericSrc<Q4_0>>(QuantType::kQ4_0, k);
    replay<GenericSrc<Q4_1>>(QuantType::kQ4_1, k);
    replay<GenericSrc<Q5_0>>(QuantType::kQ5_0, k);
    replay<GenericSrc<Q5_1>>(QuantType::kQ5_1, k);
    replay<GenericSrc<Q8_0>>(QuantType::kQ8_0, k);
    replay<GenericSrc<F8_E4M3>>(QuantType::kF8_E4M3, k);
  }
  replay<GenericSrc<Q2_K>>(QuantType::kQ2_K, 512);
  replay<GenericSrc<Q3_K>>(QuantType::kQ3_K, 512);
  replay<GenericSrc<Q4_K>>(QuantType::kQ4_K, 512);
  replay<GenericSrc<Q5_K>>(QuantType::kQ5_K, 512);
  replay<GenericSrc<Q6_K>>(QuantType::kQ6_K, 512);
  replay<GenericSrc<IQ4_XS>>(QuantType::kIQ4_XS, 512);
  replay<GenericSrc<Q6_K_R8>>(QuantType::kQ6_K_R8, 4096);
}

TEST(QGemvMmaSrcTest, SixteenByteSourcesFeedTheMmaTheDecodedProduct) {
  replay<Q4kWideSrc>(QuantType::kQ4_K, 512);
  replay<Fp8WideSrc>(QuantType::kF8_E4M3, 256);
  replay<Fp8WideSrc>(QuantType::kF8_E4M3, 576);  // the last group's second half dead
  replay<Q6r8WideSrc>(QuantType::kQ6_K_R8, 2048);
  replay<Q6r8WideSrc>(QuantType::kQ6_K_R8, 4096);
}

}  // namespace
}  // namespace cellm::cuda
