// The fast program's float32 attention and activations against the
// reference ops (double accumulation, libm) on random inputs: they must
// agree within float rounding, on every ISA this processor runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/fast_attention.h"
#include "backend/cpu/fast_math.h"
#include "backend/cpu/ops.h"

namespace cellm::cpu {
namespace {

std::vector<Isa> isas() {
  std::vector<Isa> out = {Isa::kScalar};
  if (best_isa() != Isa::kScalar) out.push_back(best_isa());
  return out;
}

struct AttnCase {
  int heads, kv_heads, dim, cells;
  bool softcap;
};

// One row's random query, a pool of random keys and values a few cells larger
// than the row sees, and the row's cells spread over the pool (every
// `stride`-th cell from 1, wrapping).
struct AttnInputs {
  std::vector<float> q, k, v;
  std::vector<std::int32_t> cells;
  AttentionParams params;
};

AttnInputs random_attention(const AttnCase& c, std::mt19937& rng, float key_scale, int stride,
                            float scale, float softcap) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int pool_cells = c.cells + 9;
  AttnInputs in;
  in.q.resize(static_cast<std::size_t>(c.heads * c.dim));
  in.k.resize(static_cast<std::size_t>(pool_cells * c.kv_heads * c.dim));
  in.v.resize(in.k.size());
  for (auto& x : in.q) x = normal(rng);
  for (auto& x : in.k) x = normal(rng) * key_scale;
  for (auto& x : in.v) x = normal(rng);
  for (int i = 0; i < c.cells; ++i) in.cells.push_back((i * stride + 1) % pool_cells);
  in.params.heads = c.heads;
  in.params.kv_heads = c.kv_heads;
  in.params.head_dim = c.dim;
  in.params.scale = scale;
  if (c.softcap) in.params.softcap = softcap;
  return in;
}

TEST(FastOps, AttentionMatchesReference) {
  const AttnCase cases[] = {{4, 1, 256, 37, false}, {9, 3, 64, 130, false},
                            {8, 8, 72, 5, true},    {2, 2, 12, 1, false},
                            {4, 2, 32, 0, false}};
  std::mt19937 rng(17);
  for (const AttnCase& c : cases) {
    const AttnInputs in = random_attention(c, rng, 2.0f, 7,
                                           1.0f / std::sqrt(static_cast<float>(c.dim)), 5.0f);
    const std::vector<float>& q = in.q;
    const std::vector<float>& k = in.k;
    const std::vector<float>& v = in.v;
    const std::vector<std::int32_t>& cells = in.cells;
    const AttentionParams& p = in.params;
    std::vector<float> want(q.size(), -1.0f);
    const std::span<const std::int32_t> row(cells);
    attend_cells(q.data(), k.data(), v.data(),
                 std::span<const std::span<const std::int32_t>>(&row, 1), p, want.data());
    for (const Isa isa : isas()) {
      std::vector<float> got(q.size(), -1.0f);
      std::vector<float> scratch;
      attend_row_fast(q.data(), k.data(), v.data(), row, p, isa, got.data(), scratch);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i])))
            << isa_name(isa) << " heads " << c.heads << " dim " << c.dim << " cells " << c.cells
            << " element " << i;
      }
    }
  }
}

// A head's bits do not depend on the heads computed with it: the forward
// spreads a row's heads over threads, and speculative verification relies on
// a row giving the bits it gives decoded alone.
TEST(FastOps, AttentionHeadSplitsGiveTheSameBits) {
  const AttnCase cases[] = {{9, 3, 64, 300, false}, {4, 1, 256, 70, true}, {12, 2, 72, 41, false}};
  std::mt19937 rng(23);
  for (const AttnCase& c : cases) {
    const AttnInputs in = random_attention(c, rng, 1.0f, 5, 0.1f, 4.0f);
    const std::vector<float>& q = in.q;
    const std::vector<float>& k = in.k;
    const std::vector<float>& v = in.v;
    const std::vector<std::int32_t>& cells = in.cells;
    const AttentionParams& p = in.params;
    for (const Isa isa : isas()) {
      std::vector<float> whole(q.size(), -1.0f);
      std::vector<float> scratch;
      attend_row_fast(q.data(), k.data(), v.data(), cells, p, isa, whole.data(), scratch);
      // Single heads, then uneven spans that cut through KV groups.
      for (const int step : {1, 5}) {
        std::vector<float> split(q.size(), -1.0f);
        for (int h = 0; h < c.heads; h += step) {
          attend_heads_fast(q.data(), k.data(), v.data(), cells, p, isa, h,
                            std::min(c.heads, h + step), split.data(), scratch);
        }
        ASSERT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)))
            << isa_name(isa) << " heads " << c.heads << " in spans of " << step;
      }
    }
  }
}

TEST(FastOps, GatedActivationsMatchReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const std::int64_t n = 1003;  // not a whole number of vectors
  std::vector<float> gate(static_cast<std::size_t>(n)), up(static_cast<std::size_t>(n));
  for (auto& x : gate) x = normal(rng);
  for (auto& x : up) x = normal(rng);
  // The tails of the curves and the clamp of the vector exp.
  gate[0] = -120.0f;
  gate[1] = 95.0f;
  gate[2] = 0.0f;
  gate[3] = -9.5f;
  for (const model::Activation act : {model::Activation::kSilu, model::Activation::kGeluTanh}) {
    std::vector<float> want = gate;
    gated_activation(want.data(), up.data(), n, act);
    for (const Isa isa : isas()) {
      std::vector<float> got = gate;
      gated_activation_fast(got.data(), up.data(), n, act, isa);
      for (std::int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        ASSERT_NEAR(got[k], want[k], 3e-6f * (std::fabs(want[k]) + std::fabs(up[k])))
            << isa_name(isa) << " activation " << static_cast<int>(act) << " x " << gate[k];
      }
    }
  }
}

}  // namespace
}  // namespace cellm::cpu
