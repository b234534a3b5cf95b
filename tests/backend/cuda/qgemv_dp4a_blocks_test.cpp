// The int8 GEMV's lanes (kernels/qgemv_dp4a_blocks.h) on the host, without
// a GPU: for every type and load width, a row walked unit by unit as one
// lane walks it (load, prep, load_act, dot) equals the float64 product of
// the CPU reference dequantizer's weights with the same int8 activations, up
// to float rounding; every load width gives the same bits. This checks the
// bit layouts, the shifts of the 18- and 34-byte blocks, the fifth and sixth
// bits, the scale indices and the activation positions the kernel uses.
#include "backend/cuda/kernels/qgemv_dp4a_blocks.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/kernels/qgemv_dp4a_blocks_q6.h"
#include "gpu_test_util.h"
#include "qgemv_test_util.h"

namespace cellm::cuda {
namespace {

// One lane's sum over a row: every unit in order, as the kernel's lanes
// add theirs (the kernel then adds the lanes' sums).
template <class T, int A>
float lane_sum(const std::uint8_t* row, const dp4a::ActRow& x, int k) {
  float acc = 0.0f;
  for (int u = 0; u < k / T::kUnit; ++u) {
    typename T::Raw raw;
    T::template load<A>(raw, row, u);
    const typename T::Scales sc = T::prep(raw, u);
    typename T::Act a;
    T::load_act(a, x, u);
    acc = T::dot(raw, sc, a, acc);
  }
  return acc;
}

template <class T, int... kAligns>
void check_type(QuantType type, int k) {
  std::mt19937 rng(static_cast<unsigned>(type) * 7919u + static_cast<unsigned>(k));
  const int n = 3, m = 2;
  const std::int64_t ldw_bytes =
      static_cast<std::int64_t>(k / quant_block_elems(type)) * quant_block_bytes(type);
  const auto w = qgemv_test::random_rows(qgemv_test::file_type(type), n, k, ldw_bytes, rng);
  const auto dev = qgemv_test::device_rows(type, w, n, k, ldw_bytes);
  const std::vector<float> a =
      testing::to_float(testing::random_bf16(static_cast<std::size_t>(m) * k, rng));
  const qgemv_test::HostQ8 q = qgemv_test::quantize_host(a, m, k, k);
  const qgemv_test::Fp8Scales no_scales;
  for (int r = 0; r < n; ++r) {
    const std::vector<float> wr =
        qgemv_test::dequantized_row(qgemv_test::file_type(type), w, r, k, ldw_bytes, no_scales);
    for (int i = 0; i < m; ++i) {
      const dp4a::ActRow x{q.q.data() + static_cast<std::size_t>(i) * k,
                           q.d.data() + static_cast<std::size_t>(i) * (k / 32),
                           q.s.data() + static_cast<std::size_t>(i) * (k / 32)};
      double ref = 0.0, scale = 0.0;
      for (int c = 0; c < k; ++c) {
        const std::size_t at = static_cast<std::size_t>(i) * k + c;
        const double term =
            static_cast<double>(wr[static_cast<std::size_t>(c)]) * q.d[at / 32] * q.q[at];
        ref += term;
        scale += std::fabs(term);
      }
      const std::uint8_t* row = dev.data() + r * ldw_bytes;
      const float sums[] = {lane_sum<T, kAligns>(row, x, k)...};
      // Float rounding of the scale products and of a sum over k / kUnit units.
      EXPECT_NEAR(sums[0], ref, 2e-5 * scale) << "row " << r << " activation row " << i;
      for (const float s : sums) {
        EXPECT_EQ(0, std::memcmp(&s, &sums[0], sizeof(float))) << "load widths disagree";
      }
    }
  }
}

TEST(QGemvDp4aBlocksTest, Q4_0) {
  check_type<dp4a::Q4_0, 4, 2>(QuantType::kQ4_0, 2080);  // 65 blocks: the last is even
  check_type<dp4a::Q4_0, 4, 2>(QuantType::kQ4_0, 576);
}
TEST(QGemvDp4aBlocksTest, Q4_1) {
  check_type<dp4a::Q4_1, 4, 2>(QuantType::kQ4_1, 2080);
}
TEST(QGemvDp4aBlocksTest, Q8_0) {
  check_type<dp4a::Q8_0, 4, 2>(QuantType::kQ8_0, 2080);
  check_type<dp4a::Q8_0, 4, 2>(QuantType::kQ8_0, 576);
}
TEST(QGemvDp4aBlocksTest, Q4_K) {
  check_type<dp4a::Q4_K, 16, 4>(QuantType::kQ4_K, 2304);
}
TEST(QGemvDp4aBlocksTest, Q5_K) {
  check_type<dp4a::Q5_K, 16, 4>(QuantType::kQ5_K, 2304);
}
TEST(QGemvDp4aBlocksTest, Q6_K) {
  check_type<dp4a::Q6_K, 2>(QuantType::kQ6_K, 2304);
}
TEST(QGemvDp4aBlocksTest, Q6_K_R8) {
  check_type<dp4a::Q6_K_R8, 16, 4, 2>(QuantType::kQ6_K_R8, 4096);
}

}  // namespace
}  // namespace cellm::cuda
