// Decode-attention fixtures for the kernel A/B tests: a batch of query tokens
// over sequences of chosen lengths in a shuffled K/V pool, with the awkward
// rows the kernels must honour (a padding row, a row at position -1, two
// tokens of one sequence, table entries outside the pool), and the float64
// CPU reference the kernels are judged by; plus params for validate()-only checks.
//
// Thread-safety: test-only helpers; call from the test thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/cuda_types.h"
#include "backend/cuda/kernels/attention.cuh"
#include "gpu_test_util.h"

namespace cellm::cuda::testing {

struct DecodeCase {
  int heads = 8;
  int kv_heads = 2;
  int head_dim = 64;
  int batch = 1;
  int min_len = 1;  // history per token, its own key included
  int max_len = 1;
  int window = 0;
  float softcap = 0.0f;
  int splits = 0;  // 0: what attention_decode_v2_splits picks for 132 SMs
  int split_min_keys = 256;
  std::uint32_t seed = 1;
};

struct DecodeScenario {
  int max_seqs = 0;
  int table_stride = 0;
  int max_cells = 0;
  std::vector<std::int32_t> table;  // [max_seqs, table_stride]
  std::vector<std::int32_t> slots;  // per token
  std::vector<std::int32_t> positions;
  std::vector<bf16> k_pool, v_pool, q;
  std::int64_t q_stride = 0;
  int splits = 1;
};

inline DecodeScenario make_decode_scenario(const DecodeCase& c) {
  std::mt19937 rng(c.seed);
  DecodeScenario s;
  s.max_seqs = c.batch + 1;
  std::vector<int> lengths(static_cast<std::size_t>(s.max_seqs), 0);
  std::uniform_int_distribution<int> len_dist(c.min_len, c.max_len);
  for (int t = 0; t < c.batch; ++t) lengths[static_cast<std::size_t>(t)] = len_dist(rng);
  lengths[0] = c.max_len;
  if (c.batch > 1) lengths[static_cast<std::size_t>(c.batch - 1)] = c.min_len;
  s.table_stride = c.max_len + 8;
  const int total = std::accumulate(lengths.begin(), lengths.end(), 0);
  s.max_cells = total + 1;  // cell 0 is scratch
  std::vector<std::int32_t> cells(static_cast<std::size_t>(total));
  std::iota(cells.begin(), cells.end(), 1);
  std::shuffle(cells.begin(), cells.end(), rng);
  s.table.assign(static_cast<std::size_t>(s.max_seqs) * s.table_stride, -1);
  std::size_t next = 0;
  for (int slot = 0; slot < s.max_seqs; ++slot) {
    for (int p = 0; p < lengths[static_cast<std::size_t>(slot)]; ++p) {
      s.table[static_cast<std::size_t>(slot) * s.table_stride + p] = cells[next++];
    }
  }
  // Token t decodes sequence t at its last position.
  for (int t = 0; t < c.batch; ++t) {
    s.slots.push_back(t);
    s.positions.push_back(lengths[static_cast<std::size_t>(t)] - 1);
  }
  if (c.batch >= 4) {
    s.slots[1] = -1;  // padding row
    s.positions[1] = 0;
    s.positions[2] = -1;  // a live slot at position -1 attends nothing
    // Token 3 is a second query of sequence 0, two keys earlier.
    s.slots[3] = 0;
    s.positions[3] = std::max(0, lengths[0] - 3);
  }
  if (c.max_len >= 4) {
    // Entries outside the pool are skipped keys (sequence 0, early positions).
    s.table[1] = -7;
    s.table[2] = s.max_cells + 5;
  }
  const std::size_t pool = static_cast<std::size_t>(s.max_cells) * c.kv_heads * c.head_dim;
  s.k_pool = random_bf16(pool, rng, -1.0f, 1.0f);
  s.v_pool = random_bf16(pool, rng, -1.0f, 1.0f);
  s.q_stride = static_cast<std::int64_t>(c.heads + 2 * c.kv_heads) * c.head_dim;  // fused qkv
  s.q = random_bf16(s.slots.size() * static_cast<std::size_t>(s.q_stride), rng, -3.0f, 3.0f);
  s.splits = c.splits > 0 ? c.splits
                          : attention_decode_v2_splits(c.batch, c.heads, c.kv_heads, s.table_stride,
                                                       132, c.split_min_keys);
  return s;
}

// [tokens, heads, head_dim]; rows with nothing to attend are zero.
inline std::vector<double> decode_reference(const DecodeCase& c, const DecodeScenario& s,
                                            float scale) {
  const auto q = to_float(s.q);
  const auto k = to_float(s.k_pool);
  const auto v = to_float(s.v_pool);
  const int tokens = static_cast<int>(s.slots.size());
  const int hd = c.head_dim;
  std::vector<double> out(static_cast<std::size_t>(tokens) * c.heads * hd, 0.0);
  std::vector<double> scores;
  std::vector<std::int64_t> rows;
  for (int t = 0; t < tokens; ++t) {
    const int slot = s.slots[static_cast<std::size_t>(t)];
    const int pos = s.positions[static_cast<std::size_t>(t)];
    if (slot < 0 || slot >= s.max_seqs || pos < 0 || pos >= s.table_stride) continue;
    const int lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
    for (int h = 0; h < c.heads; ++h) {
      const int kvh = h / (c.heads / c.kv_heads);
      scores.clear();
      rows.clear();
      double mx = -INFINITY;
      for (int j = lo; j <= pos; ++j) {
        const int cell = s.table[static_cast<std::size_t>(slot) * s.table_stride + j];
        if (cell < 0 || cell >= s.max_cells) continue;
        const std::int64_t row = (static_cast<std::int64_t>(cell) * c.kv_heads + kvh) * hd;
        double dot = 0.0;
        for (int d = 0; d < hd; ++d) {
          dot += static_cast<double>(q[static_cast<std::size_t>(t * s.q_stride + h * hd + d)]) *
                 k[static_cast<std::size_t>(row + d)];
        }
        double sc = dot * scale;
        if (c.softcap > 0.0f) sc = c.softcap * std::tanh(sc / c.softcap);
        scores.push_back(sc);
        rows.push_back(row);
        mx = std::max(mx, sc);
      }
      double sum = 0.0;
      for (double& sc : scores) {
        sc = std::exp(sc - mx);
        sum += sc;
      }
      double* dst = out.data() + (static_cast<std::size_t>(t) * c.heads + h) * hd;
      for (std::size_t j = 0; j < scores.size(); ++j) {
        const double w = scores[j] / sum;
        for (int d = 0; d < hd; ++d) dst[d] += w * v[static_cast<std::size_t>(rows[j] + d)];
      }
    }
  }
  return out;
}

// Device copies of a scenario and the params over them.
struct DecodeDevice {
  DeviceArray<bf16> q, k_pool, v_pool, out;
  DeviceArray<std::int32_t> table, slots, positions, counters;
  DeviceArray<float> workspace;

  DecodeDevice(const DecodeCase& c, const DecodeScenario& s)
      : q(s.q),
        k_pool(s.k_pool),
        v_pool(s.v_pool),
        out(s.slots.size() * c.heads * c.head_dim),
        table(s.table),
        slots(s.slots),
        positions(s.positions),
        counters(std::vector<std::int32_t>(
            std::max<std::size_t>(
                1, attention_decode_v2_counters(static_cast<std::int64_t>(s.slots.size()), c.heads,
                                                c.kv_heads)),
            0)),
        workspace(std::max<std::size_t>(
            1, attention_decode_workspace_bytes(static_cast<std::int64_t>(s.slots.size()), c.heads,
                                                c.head_dim, s.splits) /
                   sizeof(float))) {}

  AttentionParams params(const DecodeCase& c, const DecodeScenario& s, float scale) const {
    AttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.k_pool = k_pool.data();
    p.v_pool = v_pool.data();
    p.cell_table = table.data();
    p.seq_slots = slots.data();
    p.positions = positions.data();
    p.q_stride = s.q_stride;
    p.out_stride = static_cast<std::int64_t>(c.heads) * c.head_dim;
    p.num_tokens = static_cast<std::int32_t>(s.slots.size());
    p.num_heads = c.heads;
    p.num_kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.max_cells = s.max_cells;
    p.max_seqs = s.max_seqs;
    p.table_stride = s.table_stride;
    p.window = c.window;
    p.scale = scale;
    p.softcap = c.softcap;
    p.num_splits = s.splits;
    p.workspace = workspace.data();
    p.split_min_keys = c.split_min_keys;
    p.counters = counters.data();
    return p;
  }
};

// Params over a few static bytes, for validate() only: never launch them.
// Four tokens of 8 q heads over 2 kv heads of 64, four splits.
inline AttentionParams unlaunched_decode_params() {
  alignas(16) static std::byte storage[64];
  auto* any = reinterpret_cast<bf16*>(storage);
  auto* ints = reinterpret_cast<std::int32_t*>(storage);
  AttentionParams p;
  p.q = any;
  p.out = any;
  p.k_pool = any;
  p.v_pool = any;
  p.cell_table = ints;
  p.seq_slots = ints;
  p.positions = ints;
  p.q_stride = 8 * 64;
  p.out_stride = 8 * 64;
  p.num_tokens = 4;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.max_cells = 100;
  p.max_seqs = 4;
  p.table_stride = 100;
  p.scale = 0.125f;
  p.num_splits = 4;
  p.workspace = reinterpret_cast<float*>(storage);
  p.counters = ints;
  return p;
}

}  // namespace cellm::cuda::testing
