// The GEMVs' shared pieces (gemv.cu and gemv_ring.cu): which weight rows
// a unit of work multiplies and which output columns they give, and the
// epilogues that store a unit's finished sums (see gemv.cuh for what each
// epilogue computes and rounds).
//
// Thread-safety: device helpers; a unit's stores touch only its columns
// (and, for the rope epilogue, its cells of the pools).
#pragma once

#include <cstdint>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/kv_write.cuh"

namespace cellm::cuda {
// Internal linkage: each kernel file gets its own copy of these helpers.
namespace {

__host__ __device__ __forceinline__ bool is_gated(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

// A unit's output columns and the weight rows that give them. col1 < 0: the
// unit has one column (one-row units, past an odd n, or gated, whose second
// row is the up row of col0); row1 is then row0 or the up row.
struct UnitCols {
  int col0;
  int col1;
  std::int64_t row0;
  std::int64_t row1;
};

// kR: weight rows per unit (1 or 2). Pairs are two adjacent columns, the
// gate and up rows of one column, or for the rope epilogue the rows i and
// i + half of a q or k head, so both halves of a rotation meet in one unit.
template <int kR>
__device__ __forceinline__ UnitCols unit_cols(const GemvParams& p, int u) {
  UnitCols c;
  if (is_gated(p.epilogue) || kR == 1) {
    c.col0 = u;
    c.col1 = -1;
  } else if (p.epilogue == GemvEpilogue::kRopeScatter &&
             u < (p.n - p.rope.num_kv_heads * p.rope.head_dim) / 2) {
    // q and k heads (the k heads follow the q heads).
    const int half = p.rope.head_dim / 2;
    c.col0 = (u / half) * p.rope.head_dim + u % half;
    c.col1 = c.col0 + half;
  } else {
    c.col0 = 2 * u;
    c.col1 = 2 * u + 1 < p.n ? 2 * u + 1 : -1;
  }
  c.row0 = c.col0;
  c.row1 =
      is_gated(p.epilogue) ? static_cast<std::int64_t>(p.n) + u : (c.col1 >= 0 ? c.col1 : c.col0);
  return c;
}

__device__ __forceinline__ void store_value(const GemvParams& p, int r, int col, float sum) {
  const std::int64_t at = static_cast<std::int64_t>(r) * p.ldc + col;
  if (p.bias != nullptr) sum += __bfloat162float(p.bias[col]);
  if (p.epilogue == GemvEpilogue::kResidualAdd) {
    bf16* out = static_cast<bf16*>(p.out) + at;
    *out = __float2bfloat16_rn(__bfloat162float(*out) + round_bf16(sum));
  } else if (p.out_f32) {
    static_cast<float*>(p.out)[at] = sum;
  } else {
    static_cast<bf16*>(p.out)[at] = __float2bfloat16_rn(sum);
  }
}

__device__ __forceinline__ void store_gated(const GemvParams& p, int r, int col, float gate,
                                            float up) {
  const float g = round_bf16(gate);
  const float act = p.epilogue == GemvEpilogue::kGatedSilu ? silu(g) : gelu_tanh(g);
  static_cast<bf16*>(p.out)[static_cast<std::int64_t>(r) * p.ldc + col] =
      __float2bfloat16_rn(act * round_bf16(up));
}

// What rope_scatter does with one pair of product values of token r (see
// gemv.cuh): x0, x1 are the sums for columns col0 and col1.
__device__ __forceinline__ void store_rope(const GemvParams& p, int r, const UnitCols& rows,
                                           float x0, float x1) {
  const RopeScatterParams& rp = p.rope;
  if (p.bias != nullptr) {
    x0 += __bfloat162float(p.bias[rows.col0]);
    x1 += __bfloat162float(p.bias[rows.col1]);
  }
  // The separate kernels read the product back as bf16.
  x0 = round_bf16(x0);
  x1 = round_bf16(x1);
  const int hd = rp.head_dim;
  const int head = rows.col0 / hd;  // q heads, then k heads, then v heads
  const int dim = rows.col0 % hd;
  const std::int32_t cell = rp.cells[r];
  const bool cell_ok = cell >= 0 && cell < rp.max_cells;
  if (head >= rp.num_heads + rp.num_kv_heads) {
    if (!cell_ok) return;
    bf16* dst = rp.v_pool +
                (static_cast<std::int64_t>(cell) * rp.num_kv_heads + head - rp.num_heads -
                 rp.num_kv_heads) *
                    hd +
                dim;
    dst[0] = __float2bfloat16_rn(x0);
    dst[1] = __float2bfloat16_rn(x1);
    return;
  }
  float r0;
  float r1;
  rope_rotate(x0, x1, static_cast<float>(rp.positions[r]), rp.inv_freq[dim], &r0, &r1);
  const bf16 y0 = __float2bfloat16_rn(r0);
  const bf16 y1 = __float2bfloat16_rn(r1);
  const int half = hd / 2;
  if (head < rp.num_heads) {
    bf16* q = static_cast<bf16*>(p.out) + static_cast<std::int64_t>(r) * p.ldc;
    q[rows.col0] = y0;
    q[rows.col1] = y1;
    return;
  }
  if (!cell_ok) return;
  bf16* dst = rp.k_pool +
              (static_cast<std::int64_t>(cell) * rp.num_kv_heads + head - rp.num_heads) * hd + dim;
  dst[0] = y0;
  dst[half] = y1;
}

}  // namespace
}  // namespace cellm::cuda
