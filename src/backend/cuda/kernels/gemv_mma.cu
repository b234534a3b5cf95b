#include <string>

#include <climits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/gemv_epilogue.cuh"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

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
constexpr int kPartFloats = kGroupRows;  // a warp's partial sums of a group

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
  const int chunks = p.k >> 3;
  const int steps = (p.k + kStepK - 1) / kStepK;
  const int warp_steps = (steps + kW - 1) / kW;
  const int per_group = (warp_steps + kSteps - 1) / kSteps;
  const int step0 = warp * warp_steps;
  const int step_end = min(steps, step0 + warp_steps);
  const int groups = mma_groups(p);
  const int my_groups =
      static_cast<int>(blockIdx.x) < groups ? (groups - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int total = my_groups * per_group;  // every warp of the block walks as many batches

  // [chunks] the staged row (with the norm: high parts of x * weight), then
  // with the norm the low parts and the norm weight; then the warps' sums of
  // squares and the partial sums of every group of the block ([group][kW][16]).
  extern __shared__ uint4 smem[];
  uint4* const x_s = smem;
  uint4* const lo_s = smem + chunks;
  uint4* const g_s = smem + 2 * chunks;
  float* const ss_s = reinterpret_cast<float*>(smem + (kNorm ? 3 : 1) * chunks);
  float* const part_s = ss_s + kW;

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

  for (int c = threadIdx.x; c < chunks; c += kThreads) {
    cp_async16_ca(x_s + c, reinterpret_cast<const uint4*>(p.a) + c);
  }
  cp_async_commit();
  // The residual of the block's first group, read by its reducer (warp 0).
  bf16 first_residual[2] = {};
  const bool residual = p.epilogue == GemvEpilogue::kResidualAdd;
  if (residual && warp == 0 && lane < 8 && my_groups > 0) {
    const GroupCols c = group_cols(p, static_cast<int>(blockIdx.x), lane);
    if (c.valid) {
      first_residual[0] = residual_at(p, 0, c.cols.col0);
      if (c.cols.col1 >= 0) first_residual[1] = residual_at(p, 0, c.cols.col1);
    }
  }
  cp_async_wait<0>();
  if constexpr (kNorm) {
    // Each thread splits the chunks it copied (its own copies are complete).
    float sum_sq = 0.0f;
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      float xv[8];
      float gv[8];
      unpack8(x_s[c], xv);
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
      x_s[c] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      lo_s[c] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    sum_sq = warp_sum(sum_sq);
    if (lane == 0) ss_s[warp] = sum_sq;
  }
  __syncthreads();
  trace::mark(gemv_mma_trace, trace::slot_of(p), kInputsStaged);
  float inv_rms = 1.0f;
  if constexpr (kNorm) {
    float total_sq = 0.0f;
#pragma unroll
    for (int w = 0; w < kW; ++w) total_sq += ss_s[w];
    inv_rms = rsqrtf(total_sq / static_cast<float>(p.k) + p.norm_eps);
  }

  // GemvArgmax: the best stored output of the groups this lane finished.
  float best = -INFINITY;
  int best_i = INT_MAX;
  float acc[kNorm ? 4 : 2][4] = {};

  const auto consume = [&](const Batch& bt, const Cursor& c) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int st = step0 + c.b * kSteps + s;
      const int ch = st * 4 + t;
      const bool ok = st < step_end && ch < chunks;
      // Tile k order: rows' values 8t..8t+3 for the first mma, 8t+4..8t+7
      // for the second, the same permutation for every row and the input.
      const unsigned a1[4] = {bt.w[s][0].x, bt.w[s][1].x, bt.w[s][0].y, bt.w[s][1].y};
      const unsigned a2[4] = {bt.w[s][0].z, bt.w[s][1].z, bt.w[s][0].w, bt.w[s][1].w};
      const uint4 xh = ok ? x_s[ch] : make_uint4(0, 0, 0, 0);
      mma_bf16_16816(acc[0], a1, xh.x, xh.y);
      mma_bf16_16816(acc[1], a2, xh.z, xh.w);
      if constexpr (kNorm) {
        const uint4 xl = ok ? lo_s[ch] : make_uint4(0, 0, 0, 0);
        mma_bf16_16816(acc[2], a1, xl.x, xl.y);
        mma_bf16_16816(acc[3], a2, xl.z, xl.w);
      }
    }
  };

  // A warp's partial sums of a group, kept until the walk ends: every column
  // of the tile holds the same sums, c[0] for row g and c[2] for row g + 8.
  const auto record = [&](int gi) {
    float sa = acc[0][0] + acc[1][0];
    float sb = acc[0][2] + acc[1][2];
    if constexpr (kNorm) {
      sa += acc[2][0] + acc[3][0];
      sb += acc[2][2] + acc[3][2];
    }
#pragma unroll
    for (int i = 0; i < (kNorm ? 4 : 2); ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;
    }
    float* const parts = part_s + (gi * kW + warp) * kPartFloats;
    if (t == 0) {
      parts[g] = sa;
      parts[8 + g] = sb;
    }
  };

  // A group's sums: the warps' partials added in warp order by one warp,
  // then its epilogue from lanes 0..7 (row g and its partner g + 8).
  const auto finish = [&](int gi) {
    float v = 0.0f;
    if (lane < kPartFloats) {
#pragma unroll
      for (int w = 0; w < kW; ++w) v += part_s[(gi * kW + w) * kPartFloats + lane];
      v *= inv_rms;
    }
    const float vb = __shfl_down_sync(0xffffffffu, v, 8);
    if (lane >= 8) return;
    const int q = static_cast<int>(blockIdx.x + gi * gridDim.x);
    const GroupCols c = group_cols(p, q, lane);
    if (!c.valid) return;
    if (p.epilogue == GemvEpilogue::kGatedSilu || p.epilogue == GemvEpilogue::kGatedGeluTanh) {
      store_gated(p, 0, c.cols.col0, v, vb);
    } else if (p.epilogue == GemvEpilogue::kRopeScatter) {
      store_rope(p, 0, c.cols, v, vb);
      if (q == 0 && lane == 0 && p.rope.cell_table != nullptr) {
        record_cell(p.rope.cell_table, p.rope.max_seqs, p.rope.table_stride, p.rope.max_cells,
                    p.rope.seq_slots[0], p.rope.positions[0], p.rope.cells[0]);
      }
    } else {
      const bool early = residual && gi == 0;
      const float v0 = store_value(p, 0, c.cols.col0, v, early ? &first_residual[0] : nullptr);
      if (better(v0, c.cols.col0, best, best_i)) {
        best = v0;
        best_i = c.cols.col0;
      }
      if (c.cols.col1 >= 0) {
        const float v1 = store_value(p, 0, c.cols.col1, vb, early ? &first_residual[1] : nullptr);
        if (better(v1, c.cols.col1, best, best_i)) {
          best = v1;
          best_i = c.cols.col1;
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
  // first group's residual).
  __syncthreads();
  for (int gi = warp; gi < my_groups; gi += kW) finish(gi);
  trace::mark(gemv_mma_trace, trace::slot_of(p), kLastBatchDone);
  if (p.argmax.out != nullptr) {
    warp_argmax(best, best_i);
    merge_argmax<kW>(p, best, best_i);
  }
  trace::block_exit(gemv_mma_trace, trace::slot_of(p));
}

[[maybe_unused]] std::string trace_label(const GemvParams& p) {
  const char* epilogue = epilogue_name(p.epilogue);
  return std::string("gemv/mma-") + epilogue + " m=1 n=" + std::to_string(p.n) +
         " k=" + std::to_string(p.k);
}

// Sixteen warps a block where the groups alone would leave SMs empty and k
// is long enough for each warp to keep two batches (1B's down: 128 groups of
// 8192), eight otherwise (a block per SM for the o projection, so the next
// kernel's blocks find room beside it).
bool wide_blocks(const GemvParams& p) {
  if (p.mma_warps != 0) return p.mma_warps == 16;
  return mma_groups(p) <= multiprocessor_count() && p.k >= 16 * kStepK * kSteps * 2;
}

// The grid of a launch of `warps`-warp blocks (at most one wave) and the
// most groups one of its blocks walks.
struct Walk {
  long long grid;
  long long rounds;
};

Walk walk(const GemvParams& p, int warps) {
  const long long groups = mma_groups(p);
  const long long wave = static_cast<long long>(kMaxWarpsPerSm / warps) * multiprocessor_count();
  const long long rounds = (groups + wave - 1) / wave;
  return Walk{(groups + rounds - 1) / rounds, rounds};
}

std::int64_t smem_bytes(const GemvParams& p, int warps) {
  const std::int64_t rows = p.prologue == GemvPrologue::kRmsNorm ? 3 : 1;
  return rows * p.k * static_cast<std::int64_t>(sizeof(bf16)) +
         (walk(p, warps).rounds * warps * kPartFloats + warps) *
             static_cast<std::int64_t>(sizeof(float));
}

template <int kW>
void launch_warps(const GemvParams& requested, cudaStream_t stream) {
  GemvParams params = requested;
  trace::assign_slot(params, gemv_mma_trace, [&] { return trace_label(params); });
  const long long grid = walk(params, kW).grid;
  LaunchConfig config{dim3(static_cast<unsigned>(grid)), dim3(kW * 32),
                      static_cast<std::size_t>(smem_bytes(params, kW)), stream};
  config.pdl = params.pdl;
  if (params.prologue == GemvPrologue::kRmsNorm) {
    launch(gemv_mma_kernel<kW, true>, config, params);
  } else {
    launch(gemv_mma_kernel<kW, false>, config, params);
  }
}

}  // namespace

int gemv_mma_rounds(const GemvParams& params) {
  return static_cast<int>(walk(params, wide_blocks(params) ? 16 : 8).rounds);
}

bool gemv_uses_tensor_cores(const GemvParams& params) {
  if (!params.tensor_cores || params.m != 1) return false;
  if (params.epilogue == GemvEpilogue::kRopeScatter && params.rope.head_dim % 16 != 0) {
    return false;
  }
  return smem_bytes(params, wide_blocks(params) ? 16 : 8) <= kGemvMmaMaxSharedBytes;
}

void launch_gemv_mma(const GemvParams& params, cudaStream_t stream) {
  if (wide_blocks(params)) {
    launch_warps<16>(params, stream);
  } else {
    launch_warps<8>(params, stream);
  }
}

}  // namespace cellm::cuda
