// Prefill attention over cell tables against a float64 CPU reference: mixed
// sessions on one token axis (a prefill chunk, decode tokens, interleaved
// sequences and a padding row), shuffled cells, GQA/MQA, windows, soft caps,
// head dims 16..256 and contexts beyond 8192. The split-KV decode kernel's
// own suite is attention_v2_test.cpp (same scenarios, decode_reference.h).
#include "backend/cuda/kernels/attention.cuh"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::nmse;
using testing::random_bf16;
using testing::to_float;

struct AttnCase {
  int heads;
  int kv_heads;
  int head_dim;
  int window;
  float softcap;
  int long_len;  // history of the longest sequence (its last 70 tokens are this step's chunk)
  int splits;
};

// The fixture: three sequences in a shuffled pool, plus the step's tokens.
struct Scenario {
  int max_seqs = 4;
  int table_stride = 0;
  int max_cells = 0;
  std::vector<int> lengths;         // per slot
  std::vector<std::int32_t> table;  // [max_seqs, table_stride]
  std::vector<std::int32_t> slots;  // per step token
  std::vector<std::int32_t> positions;
  std::vector<bf16> k_pool, v_pool, q;
  std::int64_t q_stride = 0;
};

Scenario make_scenario(const AttnCase& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Scenario s;
  s.lengths = {c.long_len, 21, 300, 0};
  s.table_stride = *std::max_element(s.lengths.begin(), s.lengths.end()) + 8;
  int total = 0;
  for (int len : s.lengths) total += len;
  s.max_cells = total + 1;  // cell 0 is scratch
  std::vector<std::int32_t> cells(total);
  std::iota(cells.begin(), cells.end(), 1);
  std::shuffle(cells.begin(), cells.end(), rng);
  s.table.assign(static_cast<std::size_t>(s.max_seqs) * s.table_stride, -1);
  int next = 0;
  for (int slot = 0; slot < s.max_seqs; ++slot) {
    for (int p = 0; p < s.lengths[slot]; ++p) s.table[slot * s.table_stride + p] = cells[next++];
  }
  // Step: seq 1 decodes, seq 0's 70-token chunk with one seq 2 token inside
  // it, a padding row, then seq 2's other two tokens.
  const int chunk = std::min(70, c.long_len);
  s.slots.push_back(1);
  s.positions.push_back(s.lengths[1] - 1);
  for (int i = 0; i < chunk; ++i) {
    if (i == 40) {
      s.slots.push_back(2);
      s.positions.push_back(s.lengths[2] - 3);
    }
    s.slots.push_back(0);
    s.positions.push_back(c.long_len - chunk + i);
  }
  s.slots.push_back(-1);
  s.positions.push_back(0);
  for (int i = 2; i >= 1; --i) {
    s.slots.push_back(2);
    s.positions.push_back(s.lengths[2] - i);
  }
  const std::size_t pool = static_cast<std::size_t>(s.max_cells) * c.kv_heads * c.head_dim;
  s.k_pool = random_bf16(pool, rng, -1.0f, 1.0f);
  s.v_pool = random_bf16(pool, rng, -1.0f, 1.0f);
  s.q_stride = static_cast<std::int64_t>(c.heads + 2 * c.kv_heads) * c.head_dim;  // fused qkv
  s.q = random_bf16(s.slots.size() * s.q_stride, rng, -3.0f, 3.0f);
  return s;
}

std::vector<double> reference(const AttnCase& c, const Scenario& s, float scale) {
  const auto q = to_float(s.q);
  const auto k = to_float(s.k_pool);
  const auto v = to_float(s.v_pool);
  const int tokens = static_cast<int>(s.slots.size());
  const int hd = c.head_dim;
  std::vector<double> out(static_cast<std::size_t>(tokens) * c.heads * hd, 0.0);
  std::vector<double> scores;
  for (int t = 0; t < tokens; ++t) {
    if (s.slots[t] < 0) continue;
    const int pos = s.positions[t];
    const int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
    for (int h = 0; h < c.heads; ++h) {
      const int kvh = h / (c.heads / c.kv_heads);
      scores.assign(pos - lo + 1, 0.0);
      double mx = -INFINITY;
      for (int j = lo; j <= pos; ++j) {
        const int cell = s.table[s.slots[t] * s.table_stride + j];
        double dot = 0.0;
        for (int d = 0; d < hd; ++d) {
          dot += double(q[t * s.q_stride + h * hd + d]) * k[(cell * c.kv_heads + kvh) * hd + d];
        }
        double sc = dot * scale;
        if (c.softcap > 0.0f) sc = c.softcap * std::tanh(sc / c.softcap);
        scores[j - lo] = sc;
        mx = std::max(mx, sc);
      }
      double sum = 0.0;
      for (double& sc : scores) {
        sc = std::exp(sc - mx);
        sum += sc;
      }
      for (int j = lo; j <= pos; ++j) {
        const int cell = s.table[s.slots[t] * s.table_stride + j];
        const double w = scores[j - lo] / sum;
        for (int d = 0; d < hd; ++d) {
          out[(static_cast<std::size_t>(t) * c.heads + h) * hd + d] +=
              w * v[(cell * c.kv_heads + kvh) * hd + d];
        }
      }
    }
  }
  return out;
}

struct DeviceScenario {
  DeviceArray<bf16> q, k_pool, v_pool, out;
  DeviceArray<std::int32_t> table, slots, positions;
  DeviceArray<float> workspace;

  DeviceScenario(const AttnCase& c, const Scenario& s)
      : q(s.q),
        k_pool(s.k_pool),
        v_pool(s.v_pool),
        out(s.slots.size() * c.heads * c.head_dim),
        table(s.table),
        slots(s.slots),
        positions(s.positions),
        workspace(std::max<std::size_t>(
            1, attention_decode_workspace_bytes(s.slots.size(), c.heads, c.head_dim, c.splits) /
                   sizeof(float))) {}

  AttentionParams params(const AttnCase& c, const Scenario& s, float scale) const {
    return AttentionParams{.q = q.data(),
                           .out = out.data(),
                           .k_pool = k_pool.data(),
                           .v_pool = v_pool.data(),
                           .cell_table = table.data(),
                           .seq_slots = slots.data(),
                           .positions = positions.data(),
                           .q_stride = s.q_stride,
                           .out_stride = c.heads * c.head_dim,
                           .num_tokens = static_cast<int>(s.slots.size()),
                           .num_heads = c.heads,
                           .num_kv_heads = c.kv_heads,
                           .head_dim = c.head_dim,
                           .max_cells = s.max_cells,
                           .max_seqs = s.max_seqs,
                           .table_stride = s.table_stride,
                           .window = c.window,
                           .scale = scale,
                           .softcap = c.softcap,
                           .num_splits = c.splits,
                           .workspace = workspace.data()};
  }
};

// bf16 probabilities inside the kernels cost ~2^-9 relative per weight.
constexpr double kAttentionNmse = 2e-4;

class AttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionTest, PrefillV2MatchesReference) {
  CELLM_REQUIRE_GPU();
  const AttnCase c = GetParam();
  const Scenario s = make_scenario(c, 100 + c.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  DeviceScenario d(c, s);
  const AttentionParams p = d.params(c, s, scale);
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  d.out.poison();
  launch_attention_prefill_v2(p, nullptr);
  const auto v2 = to_float(d.out.download());
  const auto ref = reference(c, s, scale);
  EXPECT_LT(nmse(v2, ref), kAttentionNmse);
  // The padding row is exactly zero.
  const int pad = static_cast<int>(std::find(s.slots.begin(), s.slots.end(), -1) - s.slots.begin());
  for (int i = 0; i < c.heads * c.head_dim; ++i) {
    ASSERT_EQ(v2[static_cast<std::size_t>(pad) * c.heads * c.head_dim + i], 0.0f);
  }
}

// A row map: the kernel serves the token rows in reverse order; every row's
// output must land where the identity launch put it.
TEST_P(AttentionTest, PrefillV2FollowsARowMap) {
  CELLM_REQUIRE_GPU();
  const AttnCase c = GetParam();
  const Scenario s = make_scenario(c, 300 + c.head_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  DeviceScenario d(c, s);
  AttentionParams p = d.params(c, s, scale);
  d.out.poison();
  launch_attention_prefill_v2(p, nullptr);
  const auto identity = to_float(d.out.download());
  std::vector<std::int32_t> reversed(s.slots.size());
  for (std::size_t i = 0; i < reversed.size(); ++i) {
    reversed[i] = static_cast<std::int32_t>(reversed.size() - 1 - i);
  }
  DeviceArray<std::int32_t> rows(reversed);
  p.rows = rows.data();
  d.out.poison();
  launch_attention_prefill_v2(p, nullptr);
  const auto mapped = to_float(d.out.download());
  ASSERT_EQ(mapped.size(), identity.size());
  // Tiles group the rows differently, so the key tiles of a segment start
  // elsewhere and the bf16 probabilities round against other running maxima;
  // a misplaced row would be off by O(1).
  EXPECT_LT(nmse(mapped, std::vector<double>(identity.begin(), identity.end())), kAttentionNmse);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionTest,
    ::testing::Values(AttnCase{4, 2, 16, 0, 0.0f, 40, 1},       // the fixtures' shape
                      AttnCase{8, 2, 64, 0, 0.0f, 300, 4},      // GQA
                      AttnCase{8, 8, 128, 0, 0.0f, 1000, 3},    // MHA
                      AttnCase{4, 1, 256, 0, 0.0f, 600, 2},     // MQA, Gemma head dim
                      AttnCase{16, 1, 64, 0, 0.0f, 200, 1},     // group of 16 (> 8 per block)
                      AttnCase{8, 2, 128, 64, 0.0f, 8300, 16},  // long context, window
                      AttnCase{8, 2, 80, 0, 50.0f, 500, 5},     // generic head dim, soft cap
                      AttnCase{4, 2, 128, 0, 0.0f, 9000, 64},   // long context, max splits
                      AttnCase{6, 2, 256, 1024, 0.0f, 8500, 8}  // window, head dim 256
                      ),
    [](const auto& info) {
      const AttnCase& c = info.param;
      return fmt::format("h{}_kv{}_hd{}_win{}{}_len{}_split{}", c.heads, c.kv_heads, c.head_dim,
                         c.window, c.softcap > 0 ? "_softcap" : "", c.long_len, c.splits);
    });

}  // namespace
}  // namespace cellm::cuda
