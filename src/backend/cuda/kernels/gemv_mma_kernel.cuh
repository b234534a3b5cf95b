// The tensor-core GEMV's kernel body (gemv_mma.cuh has the layout and the
// why; gemv_mma.cu chooses the launch). Included by gemv_mma.cu only.
//
// Rows. Input row r (r < m <= 8) is column r of the mma's B operand, so one
// mma computes every row from one read of the weights. D[i][r] depends on A
// row i and B column r only, and nothing else the kernel does depends on m:
// the grid, the warps and each warp's k range come from n, k and the
// epilogue; every row's partial sums are added in the same warp order, and
// the norm prologue reduces each row's squares as a one-row call does. So
// row r's outputs are the bits of a one-row call on that row alone
// (gemv_rows_test.cpp checks it). m is a runtime value: one compiled kernel
// serves every row count, so no instruction differs between them.
//
// Thread-safety: device code; each launch writes only its own outputs.
#pragma once

#include <cstdint>

#include <climits>
#include <cuda_bf16.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/gemv_epilogue.cuh"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/kv_write.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"

namespace cellm::cuda::gemv_mma_detail {

using namespace gemv_detail;  // NOLINT(google-build-using-namespace): the shared epilogues

CELLM_TRACE_TABLE(gemv_mma_trace);
// The kernel's phases, as each block's first warp sees them (the labels of
// gemv.cu's kernel, so bench/tools/kernel_trace.py names them alike).
enum Phase : int {
  kInputsStaged = trace::kFirstPhaseMark,
  kFirstBatchDone,
  kLastBatchDone,
};

constexpr int kStepK = 32;               // k values of one step: 4 lanes x 8
constexpr int kSteps = 4;                // steps a batch: 8 16-byte loads a lane
constexpr int kGroupRows = 16;           // rows of the mma tile
constexpr int kMaxWarpsPerSm = 16;       // 128 registers a thread
constexpr int kPartFloats = kGroupRows;  // a warp's partial sums of a group, per input row
static_assert(kGemvMmaMaxRows <= 8 && kGemvMmaMaxRows <= kGemvMaxRows,
              "an input row a B column of the m16n8k16 mma");

// The staged input rows' pitch in 16-byte chunks. Lanes 0..7 of a 16-byte
// shared load are rows g and g + 1 at the same k: a pitch of 4 (mod 8)
// chunks puts them 64 bytes apart, in different banks. One row needs none
// (and keeps the one-row call's footprint).
__host__ __device__ __forceinline__ int mma_pitch(int chunks, int m) {
  return m == 1 ? chunks : chunks + (12 - chunks % 8) % 8;
}

// 16-byte chunks of staged inputs ahead of the floats: the rows (with the
// norm: their high parts, then their low parts, then the norm weight).
__host__ __device__ __forceinline__ std::int64_t mma_staged_chunks(const GemvParams& p) {
  const int chunks = p.k / 8;
  const std::int64_t rows = static_cast<std::int64_t>(p.m) * mma_pitch(chunks, p.m);
  return p.prologue == GemvPrologue::kRmsNorm ? 2 * rows + chunks : rows;
}

struct GroupCols {
  UnitCols cols;  // output columns of rows a and b (col1 < 0: b stores nothing)
  bool valid;     // col0 < n: the group's row g stores something
};

// Rope groups: the q and k heads' first halves, 8 dims a group, then the v
// heads as adjacent pairs.
__host__ __device__ __forceinline__ int rope_head_groups(const GemvParams& p) {
  return (p.rope.num_heads + p.rope.num_kv_heads) * (p.rope.head_dim / 2 / 8);
}

__host__ __device__ __forceinline__ int mma_groups(const GemvParams& p) {
  if (p.epilogue == GemvEpilogue::kGatedSilu || p.epilogue == GemvEpilogue::kGatedGeluTanh) {
    return (p.n + 7) / 8;
  }
  if (p.epilogue == GemvEpilogue::kRopeScatter) {
    return rope_head_groups(p) + p.rope.num_kv_heads * p.rope.head_dim / kGroupRows;
  }
  return (p.n + kGroupRows - 1) / kGroupRows;
}

// Group q's output columns for tile row g (0..7) and its partner g + 8.
__device__ __forceinline__ GroupCols group_cols(const GemvParams& p, int q, int g) {
  GroupCols c;
  if (p.epilogue == GemvEpilogue::kGatedSilu || p.epilogue == GemvEpilogue::kGatedGeluTanh) {
    c.cols.col0 = 8 * q + g;
    c.cols.col1 = -1;
    c.valid = c.cols.col0 < p.n;
    return c;
  }
  if (p.epilogue == GemvEpilogue::kRopeScatter && q < rope_head_groups(p)) {
    const int half = p.rope.head_dim / 2;
    const int per_head = half / 8;
    c.cols.col0 = (q / per_head) * p.rope.head_dim + (q % per_head) * 8 + g;
    c.cols.col1 = c.cols.col0 + half;
    c.valid = true;
    return c;
  }
  const int base = p.epilogue == GemvEpilogue::kRopeScatter
                       ? (p.rope.num_heads + p.rope.num_kv_heads) * p.rope.head_dim +
                             (q - rope_head_groups(p)) * kGroupRows
                       : q * kGroupRows;
  c.cols.col0 = base + 2 * g;
  c.cols.col1 = c.cols.col0 + 1 < p.n ? c.cols.col0 + 1 : -1;
  c.valid = c.cols.col0 < p.n;
  return c;
}

// The weight rows of tile rows g and g + 8 (row 0 where nothing is stored:
// read, multiplied, dropped).
__device__ __forceinline__ void group_rows(const GemvParams& p, int q, int g, const uint4** a,
                                           const uint4** b) {
  const GroupCols c = group_cols(p, q, g);
  const bool gated =
      p.epilogue == GemvEpilogue::kGatedSilu || p.epilogue == GemvEpilogue::kGatedGeluTanh;
  const std::int64_t ra = c.valid ? c.cols.col0 : 0;
  const std::int64_t rb = !c.valid           ? 0
                          : gated            ? p.n + c.cols.col0
                          : c.cols.col1 >= 0 ? c.cols.col1
                                             : 0;
  *a = reinterpret_cast<const uint4*>(p.w + ra * p.ldw);
  *b = reinterpret_cast<const uint4*>(p.w + rb * p.ldw);
}

struct Batch {
  uint4 w[kSteps][2];  // [step][row a, row b]
};

// Where a warp is in its walk: the group (its index among the block's) and
// the batch within the warp's share of that group's k.
struct Cursor {
  int gi = 0;
  int b = 0;
  const uint4* row_a = nullptr;
  const uint4* row_b = nullptr;
};

// The residual-add epilogue's early reads: word `it` holds the residuals of
// row 2 it + (lane / 16) at the lane's two columns (low half col0). Selected,
// not indexed, so the words stay in registers.
__device__ __forceinline__ unsigned residual_word(const unsigned (&words)[kGemvMaxRows / 2],
                                                  int it) {
  unsigned w = words[0];
#pragma unroll
  for (int i = 1; i < kGemvMaxRows / 2; ++i) w = it == i ? words[i] : w;
  return w;
}

// kW warps a block split k; kNorm: the RMS-norm prologue (high and low
// input parts).
template <int kW, bool kNorm>
__global__ void __launch_bounds__(kW * 32, kMaxWarpsPerSm / kW)
    gemv_mma_kernel(const __grid_constant__ GemvParams p) {
  constexpr int kThreads = kW * 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2;
  const int t = lane & 3;
  const int m = p.m;
  const int chunks = p.k >> 3;
  const int pitch = mma_pitch(chunks, m);
  const int steps = (p.k + kStepK - 1) / kStepK;
  const int warp_steps = (steps + kW - 1) / kW;
  const int per_group = (warp_steps + kSteps - 1) / kSteps;
  const int step0 = warp * warp_steps;
  const int step_end = min(steps, step0 + warp_steps);
  const int groups = mma_groups(p);
  const int my_groups =
      static_cast<int>(blockIdx.x) < groups ? (groups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int total = my_groups * per_group;  // every warp of the block walks as many batches

  // [m][pitch] the staged rows (with the norm: high parts of x * weight),
  // then with the norm [m][pitch] the low parts and [chunks] the norm
  // weight; then the floats: each row's warps' sums of squares ([m][kW]) and
  // the partial sums of every group of the block ([group][kW][m][16]).
  extern __shared__ uint4 smem[];
  uint4* const x_s = smem;
  uint4* const lo_s = smem + m * pitch;
  uint4* const g_s = smem + 2 * m * pitch;
  float* const ss_s = reinterpret_cast<float*>(smem + mma_staged_chunks(p));
  float* const part_s = ss_s + m * kW;
  const auto parts_of = [&](int gi, int w, int r) {
    return part_s + ((gi * kW + w) * m + r) * kPartFloats;
  };

  const auto set_rows = [&](Cursor& c) {
    if (c.gi < my_groups) {
      group_rows(p, static_cast<int>(blockIdx.x + c.gi * gridDim.x), g, &c.row_a, &c.row_b);
    }
  };
  const auto advance = [&](Cursor& c) {
    if (++c.b == per_group) {
      c.b = 0;
      ++c.gi;
      set_rows(c);
    }
  };
  const auto load = [&](Batch& bt, const Cursor& c) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int st = step0 + c.b * kSteps + s;
      const int ch = st * 4 + t;
      const bool ok = st < step_end && ch < chunks;
      bt.w[s][0] = ok ? load_weights(c.row_a + ch) : make_uint4(0, 0, 0, 0);
      bt.w[s][1] = ok ? load_weights(c.row_b + ch) : make_uint4(0, 0, 0, 0);
    }
  };

  trace::mark(gemv_mma_trace, trace::slot_of(p), trace::kEntryMark);
  Cursor lc;
  set_rows(lc);
  Batch next0;
  Batch next1;
  // Weights never change: the first two batches are requested before the
  // wait on the kernel that produces the input, and so is the norm weight.
  if (total > 0) {
    load(next0, lc);
    advance(lc);
  }
  if (total > 1) {
    load(next1, lc);
    advance(lc);
  }
  if constexpr (kNorm) {
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      cp_async16_ca(g_s + c, reinterpret_cast<const uint4*>(p.norm_weight) + c);
    }
  }
  griddep_wait();
  trace::mark(gemv_mma_trace, trace::slot_of(p), trace::kWaitMark);
  griddep_launch_dependents();

  // A thread copies the same chunks of every row, the ones it splits below.
  for (int r = 0; r < m; ++r) {
    const uint4* row = reinterpret_cast<const uint4*>(p.a + r * p.lda);
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      cp_async16_ca(x_s + r * pitch + c, row + c);
    }
  }
  cp_async_commit();
  // The residuals of the block's first group, read by its reducer (warp 0):
  // lane 16 h + i (i < 8) finishes tile row i of rows h, h + 2, ...
  unsigned first_residual[kGemvMaxRows / 2] = {};
  const bool residual = p.epilogue == GemvEpilogue::kResidualAdd;
  if (residual && warp == 0 && (lane & 15) < 8 && my_groups > 0) {
    const GroupCols c = group_cols(p, static_cast<int>(blockIdx.x), lane & 15);
    if (c.valid) {
#pragma unroll
      for (int it = 0; it < kGemvMaxRows / 2; ++it) {
        const int r = 2 * it + (lane >> 4);
        if (r < m) {
          const unsigned lo = __bfloat16_as_ushort(residual_at(p, r, c.cols.col0));
          const unsigned hi =
              c.cols.col1 >= 0 ? __bfloat16_as_ushort(residual_at(p, r, c.cols.col1)) : 0u;
          first_residual[it] = lo | (hi << 16);
        }
      }
    }
  }
  cp_async_wait<0>();
  if constexpr (kNorm) {
    // Each thread splits the chunks it copied (its own copies are complete);
    // each row's squares are added as in a one-row call.
    for (int r = 0; r < m; ++r) {
      float sum_sq = 0.0f;
      for (int c = threadIdx.x; c < chunks; c += kThreads) {
        float xv[8];
        float gv[8];
        unpack8(x_s[r * pitch + c], xv);
        unpack8(g_s[c], gv);
        unsigned hi[4];
        unsigned lo[4];
#pragma unroll
        for (int e = 0; e < 8; e += 2) {
          sum_sq = fmaf(xv[e], xv[e], sum_sq);
          sum_sq = fmaf(xv[e + 1], xv[e + 1], sum_sq);
          const float f0 = xv[e] * (gv[e] + p.norm_weight_offset);
          const float f1 = xv[e + 1] * (gv[e + 1] + p.norm_weight_offset);
          hi[e / 2] = pack_bf16x2(f0, f1);
          lo[e / 2] = pack_bf16x2(f0 - round_bf16(f0), f1 - round_bf16(f1));
        }
        x_s[r * pitch + c] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
        lo_s[r * pitch + c] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
      }
      sum_sq = warp_sum(sum_sq);
      if (lane == 0) ss_s[r * kW + warp] = sum_sq;
    }
  }
  __syncthreads();
  trace::mark(gemv_mma_trace, trace::slot_of(p), kInputsStaged);
  // Row r's 1/rms (1 without the norm).
  const auto inv_rms = [&](int r) {
    if constexpr (kNorm) {
      float total_sq = 0.0f;
#pragma unroll
      for (int w = 0; w < kW; ++w) total_sq += ss_s[r * kW + w];
      return rsqrtf(total_sq / static_cast<float>(p.k) + p.norm_eps);
    } else {
      static_cast<void>(r);
      return 1.0f;
    }
  };

  // GemvArgmax (one row): the best stored output of the groups this lane finished.
  float best = -INFINITY;
  int best_i = INT_MAX;
  float acc[kNorm ? 4 : 2][4] = {};
  // B column g is input row g: lanes of rows past m feed zeros.
  const bool has_row = g < m;
  const uint4* const x_row = x_s + (has_row ? g : 0) * pitch;
  const uint4* const lo_row = lo_s + (has_row ? g : 0) * pitch;

  const auto consume = [&](const Batch& bt, const Cursor& c) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int st = step0 + c.b * kSteps + s;
      const int ch = st * 4 + t;
      const bool ok = has_row && st < step_end && ch < chunks;
      // Tile k order: rows' values 8t..8t+3 for the first mma, 8t+4..8t+7
      // for the second, the same permutation for every row and the input.
      const unsigned a1[4] = {bt.w[s][0].x, bt.w[s][1].x, bt.w[s][0].y, bt.w[s][1].y};
      const unsigned a2[4] = {bt.w[s][0].z, bt.w[s][1].z, bt.w[s][0].w, bt.w[s][1].w};
      const uint4 xh = ok ? x_row[ch] : make_uint4(0, 0, 0, 0);
      mma_bf16_16816(acc[0], a1, xh.x, xh.y);
      mma_bf16_16816(acc[1], a2, xh.z, xh.w);
      if constexpr (kNorm) {
        const uint4 xl = ok ? lo_row[ch] : make_uint4(0, 0, 0, 0);
        mma_bf16_16816(acc[2], a1, xl.x, xl.y);
        mma_bf16_16816(acc[3], a2, xl.z, xl.w);
      }
    }
  };

  // A warp's partial sums of a group, kept until the walk ends: lane (g, t)
  // holds input rows 2t and 2t + 1 (c[e] for tile row g, c[2 + e] for g + 8).
  const auto record = [&](int gi) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float sa = acc[0][e] + acc[1][e];
      float sb = acc[0][2 + e] + acc[1][2 + e];
      if constexpr (kNorm) {
        sa += acc[2][e] + acc[3][e];
        sb += acc[2][2 + e] + acc[3][2 + e];
      }
      const int r = 2 * t + e;
      if (r < m) {
        float* const parts = parts_of(gi, warp, r);
        parts[g] = sa;
        parts[8 + g] = sb;
      }
    }
#pragma unroll
    for (int i = 0; i < (kNorm ? 4 : 2); ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
    }
  };

  // A group's sums, two input rows at a time: lanes 16h + i add the warps'
  // partials of tile row i of row r0 + h in warp order, then lanes 16h +
  // 0..7 run the epilogue of tile row i and its partner i + 8.
  const auto finish = [&](int gi) {
    const int q = static_cast<int>(blockIdx.x + gi * gridDim.x);
    const int i = lane & 15;
    for (int it = 0; 2 * it < m; ++it) {
      const int r = 2 * it + (lane >> 4);
      float v = 0.0f;
      if (r < m) {
#pragma unroll
        for (int w = 0; w < kW; ++w) v += parts_of(gi, w, r)[i];
        v *= inv_rms(r);
      }
      const float vb = __shfl_down_sync(0xffffffffu, v, 8);
      if (i >= 8 || r >= m) continue;
      const GroupCols c = group_cols(p, q, i);
      if (!c.valid) continue;
      if (p.epilogue == GemvEpilogue::kGatedSilu || p.epilogue == GemvEpilogue::kGatedGeluTanh) {
        store_gated(p, r, c.cols.col0, v, vb);
      } else if (p.epilogue == GemvEpilogue::kRopeScatter) {
        store_rope(p, r, c.cols, v, vb);
        if (q == 0 && i == 0 && p.rope.cell_table != nullptr) {
          record_cell(p.rope.cell_table, p.rope.max_seqs, p.rope.table_stride, p.rope.max_cells,
                      p.rope.seq_slots[r], p.rope.positions[r], p.rope.cells[r]);
        }
      } else {
        const bool early = residual && gi == 0;
        const unsigned word = residual_word(first_residual, it);
        const bf16 read[2] = {__ushort_as_bfloat16(static_cast<unsigned short>(word & 0xffffu)),
                              __ushort_as_bfloat16(static_cast<unsigned short>(word >> 16))};
        const float v0 = store_value(p, r, c.cols.col0, v, early ? &read[0] : nullptr);
        if (better(v0, c.cols.col0, best, best_i)) {
          best = v0;
          best_i = c.cols.col0;
        }
        if (c.cols.col1 >= 0) {
          const float v1 = store_value(p, r, c.cols.col1, vb, early ? &read[1] : nullptr);
          if (better(v1, c.cols.col1, best, best_i)) {
            best = v1;
            best_i = c.cols.col1;
          }
        }
      }
    }
  };

  Cursor cc;
  for (int j = 0; j < total; j += 2) {
    consume(next0, cc);
    if (j == 0) trace::mark(gemv_mma_trace, trace::slot_of(p), kFirstBatchDone);
    const bool ends0 = cc.b == per_group - 1;
    const int gi0 = cc.gi;
    advance(cc);
    if (j + 2 < total) {
      load(next0, lc);
      advance(lc);
    }
    if (ends0) record(gi0);
    if (j + 1 < total) {
      consume(next1, cc);
      const bool ends1 = cc.b == per_group - 1;
      const int gi1 = cc.gi;
      advance(cc);
      if (j + 3 < total) {
        load(next1, lc);
        advance(lc);
      }
      if (ends1) record(gi1);
    }
  }
  // One barrier for the whole walk: the warps never wait on each other
  // while they stream. Group gi's epilogue is warp gi % kW's (warp 0 has the
  // first group's residuals).
  __syncthreads();
  for (int gi = warp; gi < my_groups; gi += kW) finish(gi);
  trace::mark(gemv_mma_trace, trace::slot_of(p), kLastBatchDone);
  if (p.argmax.out != nullptr) {  // one row (validate)
    warp_argmax(best, best_i);
    merge_argmax<kW>(p, best, best_i);
  }
  trace::block_exit(gemv_mma_trace, trace::slot_of(p));
}

}  // namespace cellm::cuda::gemv_mma_detail
