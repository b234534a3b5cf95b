// The argmax the one-row GEMV takes of its float outputs (GemvArgmax, the
// lm_head of a greedy one-token step): it must name the column the device
// argmax would name in the outputs it stored, with ties to the lower column,
// NaN never chosen and column 0 for an all-NaN row; and the counter it
// leaves must let the next launch merge again. Refusals run without a GPU.
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <climits>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/gemv.cuh"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::random_bf16;
using testing::to_bf16;

// The device argmax's rule over the stored outputs.
int host_argmax(const std::vector<float>& row) {
  float best = -std::numeric_limits<float>::infinity();
  int best_i = INT_MAX;
  for (int i = 0; i < static_cast<int>(row.size()); ++i) {
    if (row[i] > best || (row[i] == best && i < best_i)) {
      best = row[i];
      best_i = i;
    }
  }
  return best_i == INT_MAX ? 0 : best_i;
}

// One launch: the stored outputs and the column the kernel named.
struct Launched {
  std::vector<float> out;
  int column = -1;
};

class ArgmaxGemv {
 public:
  ArgmaxGemv(const std::vector<bf16>& a, const std::vector<bf16>& w, int n, int k,
             const std::vector<bf16>& norm_weight, bool tensor_cores)
      : tensor_cores_(tensor_cores),
        a_(a),
        w_(w),
        norm_(norm_weight),
        has_norm_(!norm_weight.empty()),
        out_(static_cast<std::size_t>(n)),
        partials_(static_cast<std::size_t>(gemv_max_blocks())),
        counter_(std::vector<std::int32_t>{0}),
        column_(std::vector<std::int32_t>{-1}),
        n_(n),
        k_(k) {}

  Launched launch() {
    GemvParams p = gemv_dense(a_.data(), w_.data(), out_.data(), 1, n_, k_);
    p.out_f32 = true;
    p.tensor_cores = tensor_cores_;
    if (has_norm_) {
      p.prologue = GemvPrologue::kRmsNorm;
      p.norm_weight = norm_.data();
    }
    p.argmax =
        GemvArgmax{.partials = partials_.data(), .counter = counter_.data(), .out = column_.data()};
    EXPECT_TRUE(p.validate().is_ok()) << p.validate().to_string();
    out_.poison();
    launch_gemv(p, nullptr);
    EXPECT_EQ(counter_.download()[0], 0) << "the last block leaves the counter at zero";
    return Launched{out_.download(), column_.download()[0]};
  }
  DeviceArray<bf16>& weights() { return w_; }

 private:
  bool tensor_cores_;
  DeviceArray<bf16> a_, w_, norm_;
  bool has_norm_;
  DeviceArray<float> out_;
  DeviceArray<std::int64_t> partials_;
  DeviceArray<std::int32_t> counter_, column_;
  int n_, k_;
};

TEST(GemvArgmaxTest, NamesTheLargestStoredOutputOfAnLmHeadShape) {
  CELLM_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (const auto& [n, k] : std::vector<std::pair<int, int>>{{50257, 2048}, {4097, 576}, {7, 64}}) {
    const auto a = random_bf16(static_cast<std::size_t>(k), rng);
    const auto w = random_bf16(static_cast<std::size_t>(n) * k, rng, -0.05f, 0.05f);
    const auto norm = random_bf16(static_cast<std::size_t>(k), rng, 0.5f, 1.5f);
    for (const bool mma : {false, true}) {  // CUDA cores, tensor cores (GemvParams::tensor_cores)
      ArgmaxGemv gemv(a, w, n, k, norm, mma);
      for (int run = 0; run < 2; ++run) {  // the second merges on the counter the first left
        const Launched got = gemv.launch();
        EXPECT_EQ(got.column, host_argmax(got.out))
            << "n=" << n << " k=" << k << " run " << run << " mma " << mma;
      }
    }
  }
}

// Small integer operands: every sum is exact whatever its order, so planted
// maxima tie exactly.
class GemvArgmaxTieTest : public ::testing::TestWithParam<bool> {};

TEST_P(GemvArgmaxTieTest, BreaksTiesToTheLowerColumnAndNeverPicksNan) {
  CELLM_REQUIRE_GPU();
  const bool mma = GetParam();
  const int n = 4099, k = 256;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<bf16> a(static_cast<std::size_t>(k), to_bf16(1.0f));
  std::vector<bf16> w(static_cast<std::size_t>(n) * k);
  for (bf16& x : w) x = to_bf16(static_cast<float>(small(rng)));
  const auto plant = [&](int column, float value) {
    for (int i = 0; i < k; ++i) w[static_cast<std::size_t>(column) * k + i] = to_bf16(0.0f);
    w[static_cast<std::size_t>(column) * k] = to_bf16(value);
  };
  for (int column : {4098, 1500, 7, 2051}) plant(column, 4000.0f);  // the row sums stay <= 2048
  w[static_cast<std::size_t>(3) * k + 5] = to_bf16(std::nanf(""));  // column 3: NaN
  ArgmaxGemv gemv(a, w, n, k, {}, mma);
  Launched got = gemv.launch();
  ASSERT_TRUE(std::isnan(got.out[3]));
  EXPECT_EQ(got.out[7], 4000.0f);
  EXPECT_EQ(got.column, 7);
  EXPECT_EQ(host_argmax(got.out), 7);

  plant(7, 10.0f);
  plant(1500, 10.0f);
  gemv.weights().assign(w);
  got = gemv.launch();
  EXPECT_EQ(got.column, 2051);

  // Every output NaN: column 0, as the device argmax answers.
  std::vector<bf16> nan_a(static_cast<std::size_t>(k), to_bf16(std::nanf("")));
  ArgmaxGemv all_nan(nan_a, w, n, k, {}, mma);
  EXPECT_EQ(all_nan.launch().column, 0);
}

// CUDA cores and tensor cores (GemvParams::tensor_cores).
INSTANTIATE_TEST_SUITE_P(Kernels, GemvArgmaxTieTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "mma" : "cuda_cores"; });

TEST(GemvArgmaxTest, RefusesWhatItCannotTakeTheArgmaxOf) {
  alignas(16) static std::byte a_storage[2 * 64 * 2];
  alignas(16) static std::byte out_storage[2 * 16 * 4];
  alignas(8) static std::int64_t partials[4];
  static std::int32_t counter, column;
  const auto* a = reinterpret_cast<const bf16*>(a_storage);
  GemvParams p = gemv_dense(a, a, out_storage, 1, 16, 64);
  p.out_f32 = true;
  p.argmax = GemvArgmax{.partials = partials, .counter = &counter, .out = &column};
  EXPECT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  GemvParams two_rows = p;
  two_rows.m = 2;
  EXPECT_NE(two_rows.validate().message().find("m=2"), std::string::npos);
  GemvParams bf16_out = p;
  bf16_out.out_f32 = false;
  EXPECT_NE(bf16_out.validate().message().find("argmax"), std::string::npos);
  GemvParams no_counter = p;
  no_counter.argmax.counter = nullptr;
  EXPECT_NE(no_counter.validate().message().find("argmax.counter"), std::string::npos);
}

}  // namespace
}  // namespace cellm::cuda
