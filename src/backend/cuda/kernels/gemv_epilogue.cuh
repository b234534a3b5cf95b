// The epilogues the one-row GEMVs share (gemv.cu's CUDA-core kernel and
// gemv_mma.cu's tensor-core one): what a finished sum becomes in out (the
// plain and float stores, the residual add, the gated activation, the rope
// and KV scatter of q/k/v) and the lm_head's argmax over the stored outputs,
// each with the roundings the unfused kernels apply (gemv.cuh).
//
// Thread-safety: device code; each call writes only the outputs it names,
// merge_argmax is called by every thread of the block.
#pragma once

#include <cmath>
#include <cstdint>

#include <climits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/argmax_order.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/kv_fp8.cuh"
#include "backend/cuda/kernels/kv_write.cuh"

namespace cellm::cuda::gemv_detail {

// The epilogue's name in a launch's timeline label (kernel_trace.cuh).
inline const char* epilogue_name(GemvEpilogue epilogue) {
  switch (epilogue) {
    case GemvEpilogue::kStore: return "store";
    case GemvEpilogue::kResidualAdd: return "residual";
    case GemvEpilogue::kGatedSilu: return "silu";
    case GemvEpilogue::kGatedGeluTanh: return "gelu";
    case GemvEpilogue::kRopeScatter: return "rope";
  }
  return "?";
}

// Streamed once per step: keep the weights from evicting the activations.
__device__ __forceinline__ uint4 load_weights(const uint4* ptr) {
  return __ldcs(ptr);
}

struct UnitCols {
  int col0;  // output column of the unit's first row
  int col1;  // of its second; < 0: none (one-row units, past an odd n, or gated)
};

// The residual stream value the residual-add epilogue adds to.
__device__ __forceinline__ bf16 residual_at(const GemvParams& p, int r, int col) {
  return static_cast<const bf16*>(p.out)[static_cast<std::int64_t>(r) * p.ldc + col];
}

// `read`: kResidualAdd's value of out at (r, col) when the caller has read
// it already (GemvParams::stage_inputs), else null. Returns the sum with its
// bias: what a float output holds.
__device__ __forceinline__ float store_value(const GemvParams& p, int r, int col, float sum,
                                             const bf16* read) {
  const std::int64_t at = static_cast<std::int64_t>(r) * p.ldc + col;
  if (p.bias != nullptr) sum += __bfloat162float(p.bias[col]);
  if (p.epilogue == GemvEpilogue::kResidualAdd) {
    bf16* out = static_cast<bf16*>(p.out) + at;
    const bf16 residual = read != nullptr ? *read : *out;
    *out = __float2bfloat16_rn(__bfloat162float(residual) + round_bf16(sum));
  } else if (p.out_f32) {
    static_cast<float*>(p.out)[at] = sum;
  } else {
    static_cast<bf16*>(p.out)[at] = __float2bfloat16_rn(sum);
  }
  return sum;
}

// GemvArgmax: the block's warps hand in their best stored (value, column);
// the block's best goes to its partial, and the last block to count itself
// in merges every block's partial and writes the column. Every thread of the
// block calls it.
static_assert(sizeof(ArgMax) == kGemvArgmaxPartBytes);
template <int kWarps>
__device__ void merge_argmax(const GemvParams& p, float best, int best_i) {
  constexpr int kThreads = kWarps * 32;
  __shared__ ArgMax warps_best[kWarps];
  __shared__ bool last;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // Thread 0's pick among the warps' candidates.
  const auto block_best = [&] {
    ArgMax pick = warps_best[0];
    for (int w = 1; w < kWarps; ++w) {
      if (better(warps_best[w].value, warps_best[w].index, pick.value, pick.index)) {
        pick = warps_best[w];
      }
    }
    return pick;
  };
  // Lane 0 holds its warp's candidate.
  if (lane == 0) warps_best[warp] = ArgMax{best, best_i};
  __syncthreads();
  auto* partials = static_cast<ArgMax*>(p.argmax.partials);
  const int parts = static_cast<int>(gridDim.x);
  // Only thread 0's pick is published (block_best reads shared memory).
  publish_part(threadIdx.x == 0 ? block_best() : ArgMax{}, partials, static_cast<int>(blockIdx.x),
               parts, p.argmax.counter, &last);
  if (!last) return;
  const ArgMax scanned = scan_parts(partials, parts, kThreads);
  best = scanned.value;
  best_i = scanned.index;
  warp_argmax(best, best_i);
  __syncthreads();  // warps_best is reused
  if (lane == 0) warps_best[warp] = ArgMax{best, best_i};
  __syncthreads();
  if (threadIdx.x == 0) {
    const ArgMax row = block_best();
    // All NaN: column 0, as the device argmax answers a row with no candidate.
    const int column = row.index < p.n ? row.index : 0;
    *p.argmax.out = column;
    if (p.argmax.feedback != nullptr) *p.argmax.feedback = column;
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
  // FP8 pools get the E4M3 codes of the bf16 values (kv_fp8.cuh): x0 and x1
  // are bf16 already, y0 and y1 are made so below.
  const bool fp8 = rp.kv_dtype == KvDtype::kFp8;
  if (head >= rp.num_heads + rp.num_kv_heads) {
    if (!cell_ok) return;
    const std::int64_t at = (static_cast<std::int64_t>(cell) * rp.num_kv_heads + head -
                             rp.num_heads - rp.num_kv_heads) *
                                hd +
                            dim;
    if (fp8) {
      // dim is even: the pair is one aligned 2-byte store.
      *reinterpret_cast<std::uint16_t*>(static_cast<fp8_e4m3*>(rp.v_pool) + at) =
          encode_e4m3x2(x0, x1);
      return;
    }
    bf16* dst = static_cast<bf16*>(rp.v_pool) + at;
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
  const std::int64_t at =
      (static_cast<std::int64_t>(cell) * rp.num_kv_heads + head - rp.num_heads) * hd + dim;
  if (fp8) {
    fp8_e4m3* dst = static_cast<fp8_e4m3*>(rp.k_pool) + at;
    dst[0] = encode_e4m3(__bfloat162float(y0));
    dst[half] = encode_e4m3(__bfloat162float(y1));
    return;
  }
  bf16* dst = static_cast<bf16*>(rp.k_pool) + at;
  dst[0] = y0;
  dst[half] = y1;
}

}  // namespace cellm::cuda::gemv_detail
