// Float64 host references of the fused GEMV (gemv.cuh), shared by its tests:
// the product of the bf16 operands with the norm prologue applied unrounded,
// the epilogues with the roundings the kernels repeat from the unfused path
// (the residual add's, the gated activation's), deliberately wrong variants
// a test must sit far from, and the rope epilogue's rotation and scatter
// (rope_scatter.cuh's rules) for per-token positions and cells.
//
// Thread-safety: test-only helpers; call from the test thread.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "backend/cuda/kernels/gemv.cuh"
#include "gpu_test_util.h"

namespace cellm::cuda::testing {

inline bool gated(GemvEpilogue epilogue) {
  return epilogue == GemvEpilogue::kGatedSilu || epilogue == GemvEpilogue::kGatedGeluTanh;
}

// One fused call as the host sees it: float copies of the bf16 operands and
// the settings the kernel gets.
struct HostGemv {
  int m = 0;
  int n = 0;
  int k = 0;
  std::int64_t lda = 0;
  std::vector<float> a;            // [m, lda]
  std::vector<float> w;            // [n or 2n, k]
  std::vector<float> bias;         // [n], or empty
  std::vector<float> norm_weight;  // [k], or empty: no prologue
  float eps = 1e-5f;
  float offset = 0.0f;
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  std::vector<float> residual;  // [>= m, ldc], kResidualAdd
  std::int64_t ldc = 0;
};

// Deliberately wrong references: each must sit far from the kernel's output,
// so a test comparing against the right one can fail.
struct RefVariant {
  bool norm = true;
  bool round_norm = false;  // the norm kernel's bf16 rounding: the GEMV does not repeat it
  float offset_delta = 0.0f;
  bool residual = true;
  bool round_gate = true;
  bool act_on_up = false;
};

inline double bf16_round(double value) {
  return from_bf16(to_bf16(static_cast<float>(value)));
}

inline double silu_ref(double x) {
  return x / (1.0 + std::exp(-x));
}

inline double gelu_tanh_ref(double x) {
  const double kSqrt2OverPi = 0.7978845608028654;
  return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
}

// The rows the product consumes: a's first k columns, RMS-normalised in
// float64 (rounded to bf16 as the norm kernel would store them only when the
// variant asks).
inline std::vector<double> gemv_inputs(const HostGemv& h, const RefVariant& v) {
  std::vector<double> x(static_cast<std::size_t>(h.m) * h.k);
  for (int r = 0; r < h.m; ++r) {
    const float* row = h.a.data() + r * h.lda;
    double sum_sq = 0.0;
    for (int c = 0; c < h.k; ++c) sum_sq += static_cast<double>(row[c]) * row[c];
    const double inv_rms = 1.0 / std::sqrt(sum_sq / h.k + static_cast<double>(h.eps));
    for (int c = 0; c < h.k; ++c) {
      double value = row[c];
      if (!h.norm_weight.empty() && v.norm) {
        const double weight = static_cast<double>(h.norm_weight[static_cast<std::size_t>(c)]) +
                              h.offset + v.offset_delta;
        value = value * inv_rms * weight;
        if (v.round_norm) value = bf16_round(value);
      }
      x[static_cast<std::size_t>(r) * h.k + c] = value;
    }
  }
  return x;
}

// out[m, n] as the kernel must leave it, before the output's own rounding.
inline std::vector<double> reference(const HostGemv& h, const RefVariant& v = {}) {
  const auto x = gemv_inputs(h, v);
  const int w_rows = gated(h.epilogue) ? 2 * h.n : h.n;
  std::vector<double> sums(static_cast<std::size_t>(h.m) * w_rows);
  for (int r = 0; r < h.m; ++r) {
    const double* xr = x.data() + static_cast<std::size_t>(r) * h.k;
    for (int j = 0; j < w_rows; ++j) {
      const float* wj = h.w.data() + static_cast<std::size_t>(j) * h.k;
      double sum = 0.0;
      for (int c = 0; c < h.k; ++c) sum += xr[c] * wj[c];
      sums[static_cast<std::size_t>(r) * w_rows + j] = sum;
    }
  }
  std::vector<double> out(static_cast<std::size_t>(h.m) * h.n);
  for (int r = 0; r < h.m; ++r) {
    for (int j = 0; j < h.n; ++j) {
      const double sum = sums[static_cast<std::size_t>(r) * w_rows + j];
      const double bias = h.bias.empty() ? 0.0 : h.bias[static_cast<std::size_t>(j)];
      double value = 0.0;
      switch (h.epilogue) {
        case GemvEpilogue::kStore:
        case GemvEpilogue::kRopeScatter:  // tested against rope_scatter in gemv_rope_test.cpp
          value = sum + bias;
          break;
        case GemvEpilogue::kResidualAdd: {
          const double old = v.residual ? h.residual[static_cast<std::size_t>(r * h.ldc + j)] : 0.0;
          value = old + bf16_round(sum + bias);
          break;
        }
        case GemvEpilogue::kGatedSilu:
        case GemvEpilogue::kGatedGeluTanh: {
          double gate = sum;
          double up = sums[static_cast<std::size_t>(r) * w_rows + h.n + j];
          if (v.act_on_up) std::swap(gate, up);
          if (v.round_gate) gate = bf16_round(gate);
          up = bf16_round(up);
          const double act =
              h.epilogue == GemvEpilogue::kGatedSilu ? silu_ref(gate) : gelu_tanh_ref(gate);
          value = act * up;
          break;
        }
      }
      out[static_cast<std::size_t>(r) * h.n + j] = value;
    }
  }
  return out;
}

// Share of outputs whose bf16 bits differ from the rounded reference.
inline double mismatch_fraction(const std::vector<float>& got, const std::vector<double>& ref) {
  EXPECT_EQ(got.size(), ref.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    differ += std::bit_cast<std::uint16_t>(to_bf16(got[i])) !=
              std::bit_cast<std::uint16_t>(to_bf16(static_cast<float>(ref[i])));
  }
  return got.empty() ? 0.0 : static_cast<double>(differ) / static_cast<double>(got.size());
}

// f32 output of a normalised input. The GEMV folds the norm into its float
// sums, so what is left is float accumulation error; rounding the normalised
// inputs to bf16, as the separate norm kernel does, moves the result by ~2e-6,
// a missing norm by ~0.1.
inline constexpr double kNormF32Nmse = 5e-7;

// The rope epilogue's geometry and per-token arrays, as the kernel gets them.
struct HostRope {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int max_cells = 0;
  std::vector<float> inv_freq;          // [head_dim / 2]
  std::vector<std::int32_t> positions;  // [m]
  std::vector<std::int32_t> cells;      // [m]; outside [0, max_cells): not written
};

// What the rope epilogue leaves: q rotated ([m, heads * head_dim]), k rotated
// and v copied into each token's cell ([max_cells, kv_heads, head_dim]; NaN
// where no token writes).
struct RopeReference {
  std::vector<double> q;
  std::vector<double> k_pool;
  std::vector<double> v_pool;
};

// `h` is the q/k/v product (its epilogue kRopeScatter or kStore: sum + bias).
// The product is read back as bf16 and the angle is the float position times
// the float inverse frequency, as the kernels compute them; the rotation
// itself is float64.
inline RopeReference rope_reference(const HostGemv& h, const HostRope& rope) {
  const auto product = reference(h);
  const int hd = rope.head_dim;
  const int half = hd / 2;
  const std::size_t pool = static_cast<std::size_t>(rope.max_cells) * rope.kv_heads * hd;
  RopeReference ref;
  ref.q.assign(static_cast<std::size_t>(h.m) * rope.heads * hd, 0.0);
  ref.k_pool.assign(pool, std::numeric_limits<double>::quiet_NaN());
  ref.v_pool.assign(pool, std::numeric_limits<double>::quiet_NaN());
  for (int r = 0; r < h.m; ++r) {
    const double* x = product.data() + static_cast<std::size_t>(r) * h.n;
    const std::int32_t cell = rope.cells[static_cast<std::size_t>(r)];
    const bool cell_ok = cell >= 0 && cell < rope.max_cells;
    const auto at_cell = [&](int kv_head, int dim) {
      return (static_cast<std::size_t>(cell) * rope.kv_heads + kv_head) * hd + dim;
    };
    for (int head = 0; head < rope.heads + rope.kv_heads; ++head) {
      for (int d = 0; d < half; ++d) {
        const double x0 = bf16_round(x[head * hd + d]);
        const double x1 = bf16_round(x[head * hd + d + half]);
        const float angle = static_cast<float>(rope.positions[static_cast<std::size_t>(r)]) *
                            rope.inv_freq[static_cast<std::size_t>(d)];
        const double c = std::cos(static_cast<double>(angle));
        const double s = std::sin(static_cast<double>(angle));
        const double y0 = x0 * c - x1 * s;
        const double y1 = x1 * c + x0 * s;
        if (head < rope.heads) {
          const std::size_t q = (static_cast<std::size_t>(r) * rope.heads + head) * hd + d;
          ref.q[q] = y0;
          ref.q[q + half] = y1;
        } else if (cell_ok) {
          ref.k_pool[at_cell(head - rope.heads, d)] = y0;
          ref.k_pool[at_cell(head - rope.heads, d + half)] = y1;
        }
      }
    }
    if (!cell_ok) continue;
    for (int kv = 0; kv < rope.kv_heads; ++kv) {
      for (int d = 0; d < hd; ++d) {
        ref.v_pool[at_cell(kv, d)] = bf16_round(x[(rope.heads + rope.kv_heads + kv) * hd + d]);
      }
    }
  }
  return ref;
}

}  // namespace cellm::cuda::testing
