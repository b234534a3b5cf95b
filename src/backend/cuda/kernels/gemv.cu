#include <string>

#include <climits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/argmax_order.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/gemv_epilogue.cuh"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/kv_write.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

using namespace gemv_detail;  // NOLINT(google-build-using-namespace): the shared epilogues

CELLM_TRACE_TABLE(gemv_trace);
// The kernel's phases in its timeline (kernel_trace.cuh), as each block's
// first warp sees them: where the time after the wait goes.
enum Phase : int {
  kInputsStaged = trace::kFirstPhaseMark,  // staged kernels only
  kFirstBatchDone,                         // the first batch multiplied (its weights landed)
  kLastBatchDone,                          // the warp's last unit stored
  kFirstWeightsLanded,                     // trace builds: the first batch's first piece landed
  kSecondBatchDone,                        // the second batch multiplied (and its unit's epilogue
                                           // run, where the unit ends there)
};

// A warp owns a unit of two weight rows (two adjacent output columns, or the
// gate row and the up row of one column; one row for small projections, see
// GemvParams::single_rows) and streams them through registers in batches of
// kPieces 16-byte pieces per lane over the unit's rows, two batches in
// flight: the next batch is requested before the current one is multiplied.
// The grid is at most one resident wave; a warp walks its units and their
// batches as one sequence, so the loads of its next unit are already in
// flight while it finishes the current one, and the first two batches are
// requested before the kernel waits on its predecessor (programmatic
// dependent launch), so a small projection's weights stream in while the
// kernel before it still runs.
// Earlier versions on the H200, all slower than cuBLASLt: a cp.async
// pipeline of 16-row tiles feeding mma (1B batch 1: 1.257 against 1.167
// ms/step), persistent blocks over that pipeline (1.97), mma fed from
// 64-byte row pieces (1.53), and this layout with one batch in flight and
// the norm recomputed per piece (1.28; its batches waited one after another).
// This version runs 1B at 1.00 and 8B at 4.47 ms/step (cuBLASLt: 1.16, 4.83).
// Also tried on it and slower: pulling the third and fourth batches into L2
// before the wait (1B +0.05, 8B +0.12 ms/step).
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kPieces = 8;          // 16-byte loads per lane in a batch, over the unit's rows
constexpr int kMaxBlocksPerSm = 4;  // 16 warps; two batches each ~ 128 KB in flight per SM

__host__ __device__ __forceinline__ bool is_gated(GemvEpilogue e) {
  return e == GemvEpilogue::kGatedSilu || e == GemvEpilogue::kGatedGeluTanh;
}

// kR: weight rows per unit. Two is the rule (a rope or gated epilogue needs
// its pair of rows in one warp); one row per unit doubles the warps of a
// projection too small to fill the GPU with pairs, so as many bytes are in
// flight per SM as for a large one.
template <int kR>
__host__ __device__ __forceinline__ int gemv_units(const GemvParams& p) {
  return is_gated(p.epilogue) || kR == 1 ? p.n : (p.n + 1) / 2;
}

// A lane's 16-byte loads of one row in a batch, and the row's 8-value chunks
// a batch covers (1024 values for pairs, 2048 for single rows).
template <int kR>
inline constexpr int per_row_loads = kPieces / kR;
template <int kR>
inline constexpr int batch_chunks = 32 * per_row_loads<kR>;

template <int kR>
struct Batch {
  uint4 w[kR][per_row_loads<kR>];
};

struct UnitRows : UnitCols {
  const uint4* row[2];
};

template <int kR>
__device__ __forceinline__ UnitCols unit_cols(const GemvParams& p, int u) {
  UnitCols rows;
  if (is_gated(p.epilogue) || kR == 1) {
    rows.col0 = u;
    rows.col1 = -1;
  } else if (p.epilogue == GemvEpilogue::kRopeScatter &&
             u < (p.n - p.rope.num_kv_heads * p.rope.head_dim) / 2) {
    // q and k heads: rows i and i + half of a head (the k heads follow the q heads).
    const int half = p.rope.head_dim / 2;
    rows.col0 = (u / half) * p.rope.head_dim + u % half;
    rows.col1 = rows.col0 + half;
  } else {
    rows.col0 = 2 * u;
    rows.col1 = 2 * u + 1 < p.n ? 2 * u + 1 : -1;
  }
  return rows;
}

template <int kR>
__device__ __forceinline__ UnitRows unit_rows(const GemvParams& p, int u) {
  UnitRows rows;
  static_cast<UnitCols&>(rows) = unit_cols<kR>(p, u);
  const auto row = [&](std::int64_t r) { return reinterpret_cast<const uint4*>(p.w + r * p.ldw); };
  rows.row[0] = row(rows.col0);
  rows.row[1] = is_gated(p.epilogue) ? row(static_cast<std::int64_t>(p.n) + u)
                                     : row(rows.col1 >= 0 ? rows.col1 : rows.col0);
  return rows;
}

// kM: activation rows the kernel is built for (p.m <= kM); kR: weight rows
// per unit (gemv_units); kStaged: GemvParams::stage_inputs (a template
// argument, so the unstaged kernel's inner loop holds no choice).
template <int kM, int kR, bool kStaged>
__global__ void __launch_bounds__(kThreads, kMaxBlocksPerSm)
    gemv_kernel(const __grid_constant__ GemvParams p) {
  constexpr int kPerRow = per_row_loads<kR>;
  constexpr int kBatchChunks = batch_chunks<kR>;
  const int lane = threadIdx.x & 31;
  const int chunks = p.k >> 3;
  const int per_unit = (chunks + kBatchChunks - 1) / kBatchChunks;
  const int units = gemv_units<kR>(p);
  const int first = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int stride = gridDim.x * kWarps;
  const int my_units = first < units ? (units - 1 - first) / stride + 1 : 0;
  const int total = my_units * per_unit;  // this warp's batches
  const bool norm = p.prologue == GemvPrologue::kRmsNorm;
  const bool residual = p.epilogue == GemvEpilogue::kResidualAdd;
  // GemvParams::stage_inputs: the m input rows, then the norm weight.
  extern __shared__ uint4 staged_inputs[];
  constexpr bool staged = kStaged;
  uint4* const x_s = staged_inputs;
  uint4* const g_s = staged_inputs + p.m * chunks;

  // Which part of k the j-th batch covers. A unit starts at a part set by its
  // index: the warps of a wave then read different column ranges of their
  // rows at any moment, spread over all of memory, instead of all reading the
  // same column range of thousands of rows a row length apart.
  auto chunk_base = [&](int j) {
    const int u = first + (j / per_unit) * stride;
    return ((j % per_unit + u % per_unit) % per_unit) * kBatchChunks + lane;
  };
  auto load = [&](Batch<kR>& b, int j) {
    const UnitRows rows = unit_rows<kR>(p, first + (j / per_unit) * stride);
    const int base = chunk_base(j);
#pragma unroll
    for (int i = 0; i < kPerRow; ++i) {
      const int c = base + 32 * i;
      const bool ok = c < chunks;
#pragma unroll
      for (int w = 0; w < kR; ++w) {
        b.w[w][i] = ok ? load_weights(rows.row[w] + c) : make_uint4(0, 0, 0, 0);
      }
    }
  };

  // Weights never change: request the first two batches before waiting on
  // the kernel that produces the activations.
  trace::mark(gemv_trace, trace::slot_of(p), trace::kEntryMark);
  Batch<kR> next0;
  Batch<kR> next1;
  if (total > 0) load(next0, 0);
  if (total > 1) load(next1, 1);
  // So is the norm weight (asynchronously: the warp does not stall on it).
  if (staged && norm) {
    for (int c = threadIdx.x; c < chunks; c += kThreads) {
      cp_async16_ca(g_s + c, reinterpret_cast<const uint4*>(p.norm_weight) + c);
    }
  }
  griddep_wait();
  trace::mark(gemv_trace, trace::slot_of(p), trace::kWaitMark);
  // The next kernel may launch now: its blocks only find room as these
  // finish (one wave fills the SMs), and then request their own first
  // weights. (Letting it launch at the last batches instead measured the same.)
  griddep_launch_dependents();

  // Every input the warp needs is requested at once: the block's rows into
  // shared memory, and the residual of the warp's first unit.
  // Trace builds: whether the weights requested before the wait have landed
  // by the time the inputs are requested. The warp stalls on its first piece
  // here rather than in the first product, a few instructions later.
  const auto mark_landed = [&] {
#if CELLM_KERNEL_TRACE
    if (total > 0) {
      unsigned landed;
      asm volatile("mov.b32 %0, %1;" : "=r"(landed) : "r"(next0.w[0][0].x) : "memory");
      if (landed == 0x7fc07fc0u) __nanosleep(0);  // reads it, so the warp waits for the load
      trace::mark(gemv_trace, trace::slot_of(p), kFirstWeightsLanded);
    }
#endif
  };
  bf16 first_residual[2] = {};
  if (!staged) mark_landed();
  if (staged) {
    for (int i = threadIdx.x; i < p.m * chunks; i += kThreads) {
      const int r = i / chunks;
      cp_async16_ca(x_s + i, reinterpret_cast<const uint4*>(p.a + r * p.lda) + (i - r * chunks));
    }
    cp_async_commit();
    if (residual && my_units > 0 && lane < p.m) {
      const UnitCols rows = unit_cols<kR>(p, first);
      first_residual[0] = residual_at(p, lane, rows.col0);
      if (rows.col1 >= 0) first_residual[1] = residual_at(p, lane, rows.col1);
    }
    mark_landed();
    cp_async_wait<0>();
    __syncthreads();
    trace::mark(gemv_trace, trace::slot_of(p), kInputsStaged);
  }

  // GemvArgmax (one-row launches): the best stored output so far of the
  // warp's units, in lane 0 (better() breaks ties by column, so the order
  // of the walk does not matter).
  float best = -INFINITY;
  int best_i = INT_MAX;

  float acc[kR][kM];
  // The norm is folded into the sums: the products take x * (w_norm +
  // offset), and each row's sum is scaled by its 1/rms at the end. A warp's
  // first unit sees every piece of the rows once, so it adds up their
  // squares on the way; no block-wide pass or barrier is needed.
  float sum_sq[kM];
  float inv_rms[kM];
#pragma unroll
  for (int r = 0; r < kM; ++r) {
    sum_sq[r] = 0.0f;
#pragma unroll
    for (int w = 0; w < kR; ++w) acc[w][r] = 0.0f;
  }

  auto consume = [&](const Batch<kR>& b, int j) {
    const int base = chunk_base(j);
    const bool first_unit = j < per_unit;
    // Pieces past k hold zero weights (see load): reading zeros for their
    // activations too keeps the loop free of branches, so each row's pieces
    // are requested together. Inputs go four pieces at a time, which keeps
    // one-row units (eight pieces) within the register budget.
#pragma unroll
    for (int i0 = 0; i0 < kPerRow; i0 += 4) {
      uint4 nw[4];
      if (norm) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int c = base + 32 * (i0 + i);
          nw[i] = c >= chunks ? make_uint4(0, 0, 0, 0)
                  : staged    ? g_s[c]
                              : __ldg(reinterpret_cast<const uint4*>(p.norm_weight) + c);
        }
      }
#pragma unroll
      for (int r = 0; r < kM; ++r) {
        if (r < p.m) {
          const bf16* row = p.a + r * p.lda;
          uint4 xr[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int c = base + 32 * (i0 + i);
            xr[i] = c >= chunks ? make_uint4(0, 0, 0, 0)
                    : staged    ? x_s[r * chunks + c]
                                : __ldg(reinterpret_cast<const uint4*>(row) + c);
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float xv[8];
            unpack8(xr[i], xv);
            if (norm) {
              float g[8];
              unpack8(nw[i], g);
#pragma unroll
              for (int e = 0; e < 8; ++e) {
                if (first_unit) sum_sq[r] = fmaf(xv[e], xv[e], sum_sq[r]);
                xv[e] *= g[e] + p.norm_weight_offset;
              }
            }
#pragma unroll
            for (int w = 0; w < kR; ++w) {
              float wv[8];
              unpack8(b.w[w][i0 + i], wv);
#pragma unroll
              for (int e = 0; e < 8; ++e) acc[w][r] = fmaf(xv[e], wv[e], acc[w][r]);
            }
          }
        }
      }
    }
    if (j % per_unit != per_unit - 1) return;
    if (norm && first_unit) {
#pragma unroll
      for (int r = 0; r < kM; ++r) {
        inv_rms[r] = rsqrtf(warp_sum(sum_sq[r]) / static_cast<float>(p.k) + p.norm_eps);
      }
    }
    const int u = first + (j / per_unit) * stride;
    const UnitRows rows = unit_rows<kR>(p, u);
#pragma unroll
    for (int r = 0; r < kM; ++r) {
      float s0 = warp_sum(acc[0][r]);
      float s1 = 0.0f;
      if constexpr (kR == 2) s1 = warp_sum(acc[1][r]);
#pragma unroll
      for (int w = 0; w < kR; ++w) acc[w][r] = 0.0f;
      if (norm) {
        s0 *= inv_rms[r];
        s1 *= inv_rms[r];
      }
      if (lane == r && r < p.m) {
        if (kR == 2 && is_gated(p.epilogue)) {
          store_gated(p, r, rows.col0, s0, s1);
        } else if (kR == 2 && p.epilogue == GemvEpilogue::kRopeScatter) {
          store_rope(p, r, rows, s0, s1);
          if (u == 0 && p.rope.cell_table != nullptr) {
            record_cell(p.rope.cell_table, p.rope.max_seqs, p.rope.table_stride, p.rope.max_cells,
                        p.rope.seq_slots[r], p.rope.positions[r], p.rope.cells[r]);
          }
        } else {
          // The first unit's residual was read after the wait when staged.
          const bool early = staged && j < per_unit;
          const float v0 = store_value(p, r, rows.col0, s0, early ? &first_residual[0] : nullptr);
          if (kM == 1 && p.argmax.out != nullptr && better(v0, rows.col0, best, best_i)) {
            best = v0;
            best_i = rows.col0;
          }
          if (rows.col1 >= 0) {
            const float v1 = store_value(p, r, rows.col1, s1, early ? &first_residual[1] : nullptr);
            if (kM == 1 && p.argmax.out != nullptr && better(v1, rows.col1, best, best_i)) {
              best = v1;
              best_i = rows.col1;
            }
          }
        }
      }
    }
  };

  for (int j = 0; j < total; j += 2) {
    consume(next0, j);
    if (j == 0) trace::mark(gemv_trace, trace::slot_of(p), kFirstBatchDone);
    if (j + 2 < total) load(next0, j + 2);
    if (j + 1 < total) {
      consume(next1, j + 1);
      if (j == 0) trace::mark(gemv_trace, trace::slot_of(p), kSecondBatchDone);
      if (j + 3 < total) load(next1, j + 3);
    }
  }
  trace::mark(gemv_trace, trace::slot_of(p), kLastBatchDone);
  if constexpr (kM == 1) {
    if (p.argmax.out != nullptr) merge_argmax<kWarps>(p, best, best_i);
  }
  trace::block_exit(gemv_trace, trace::slot_of(p));
}

// The timeline's label of a GEMV launch: its epilogue and shape.
[[maybe_unused]] std::string trace_label(const GemvParams& p) {
  const char* epilogue = epilogue_name(p.epilogue);
  return std::string("gemv/") + epilogue + " m=" + std::to_string(p.m) +
         " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k);
}

template <int kM, int kR>
void launch_units(const GemvParams& requested, cudaStream_t stream) {
  GemvParams params = requested;
  trace::assign_slot(params, gemv_trace, [&] { return trace_label(params); });
  const long long blocks = ceil_div(gemv_units<kR>(params), kWarps);
  const long long wave = gemv_max_blocks();
  // As many rounds as one wave needs, spread evenly so no warp walks an extra unit.
  const long long rounds = (blocks + wave - 1) / wave;
  const long long grid = (blocks + rounds - 1) / rounds;
  params.stage_inputs = gemv_stages_inputs(params);
  const std::size_t smem =
      params.stage_inputs ? static_cast<std::size_t>(gemv_staged_bytes(params)) : 0;
  LaunchConfig config{dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, stream};
  config.pdl = params.pdl;
  if (params.stage_inputs) {
    launch(gemv_kernel<kM, kR, true>, config, params);
  } else {
    launch(gemv_kernel<kM, kR, false>, config, params);
  }
}

template <int kM>
void launch_rows(const GemvParams& params, cudaStream_t stream) {
  if (gemv_uses_single_rows(params)) {
    launch_units<kM, 1>(params, stream);
    return;
  }
  launch_units<kM, 2>(params, stream);
}

}  // namespace

GemvParams gemv_row_slice(const GemvParams& params, std::int32_t first, std::int32_t rows) {
  GemvParams slice = params;
  slice.m = rows;
  slice.a = params.a + first * params.lda;
  const std::int64_t out_at = first * params.ldc;
  slice.out = params.out_f32 ? static_cast<void*>(static_cast<float*>(params.out) + out_at)
                             : static_cast<void*>(static_cast<bf16*>(params.out) + out_at);
  if (params.epilogue == GemvEpilogue::kRopeScatter) {
    // The rope epilogue's per-token arrays (q is out).
    RopeScatterParams& rope = slice.rope;
    const auto skip = [first](auto* ptr, std::int64_t stride) {
      return ptr == nullptr ? ptr : ptr + first * stride;
    };
    rope.q = skip(params.rope.q, params.rope.q_stride);
    rope.k = skip(params.rope.k, params.rope.k_stride);
    rope.v = skip(params.rope.v, params.rope.v_stride);
    rope.cells = skip(params.rope.cells, 1);
    rope.seq_slots = skip(params.rope.seq_slots, 1);
    rope.positions = skip(params.rope.positions, 1);
    rope.num_tokens = rows;
  }
  return slice;
}

// Pairs of rows, unless they would fill at most half of one wave, a pair
// has more than the two batches a warp keeps in flight, and the epilogue
// takes single rows. The choice does not look at the row count: a unit's
// weight rows fix the order in which each lane adds its pieces, so a row of
// a many-row call gets the bits of the same row alone (what lets a
// speculative verification step reproduce plain one-row decoding exactly).
// On the H200 one-row units took 1B's
// down projection (k = 8192) from 13.5 to 10 us; its o projection (k = 2048,
// all of a pair's weights in flight at once) went from 4.7 to 3.7 us, but
// then filled every SM, so the gate/up GEMV after it could no longer start
// beside it and took 21 us instead of 17.5.
std::int32_t gemv_max_blocks() {
  return kMaxBlocksPerSm * multiprocessor_count();
}

bool gemv_uses_single_rows(const GemvParams& params) {
  const long long wave = gemv_max_blocks();
  return params.single_rows && !is_gated(params.epilogue) &&
         params.epilogue != GemvEpilogue::kRopeScatter && params.k > 2 * 8 * batch_chunks<2> &&
         2 * ceil_div(gemv_units<2>(params), kWarps) <= wave;
}

std::int64_t gemv_staged_bytes(const GemvParams& params) {
  const std::int64_t rows = params.m + (params.prologue == GemvPrologue::kRmsNorm ? 1 : 0);
  return rows * params.k * static_cast<std::int64_t>(sizeof(bf16));
}

bool gemv_stages_inputs(const GemvParams& params) {
  // The q/k/v projection (the rope epilogue) keeps its global loads: staged,
  // it ran 0.7-0.8 us a layer longer for a gap 0.4-0.5 us shorter at 1B
  // (H200: 1B batch 1 0.872-0.875 ms/step unstaged against 0.874-0.900;
  // 8B equal), for a reason not yet known (gemv.cuh, stage_inputs).
  return params.stage_inputs && params.epilogue != GemvEpilogue::kRopeScatter &&
         gemv_staged_bytes(params) <= kGemvMaxStagedBytes;
}

void launch_gemv(const GemvParams& params, cudaStream_t stream) {
  static_assert(kGemvMaxRows == 8, "buckets of 1, 2 and 4 rows; 5 to 8 run as two launches");
  if (params.m < 1 || params.m > kGemvMaxRows) {
    cuda_failed(cudaErrorInvalidValue, "launch_gemv: unvalidated row count");
  }
  if (gemv_uses_tensor_cores(params)) {
    launch_gemv_mma(params, stream);
    return;
  }
  if (params.m == 1) {
    launch_rows<1>(params, stream);
  } else if (params.m == 2) {
    launch_rows<2>(params, stream);
  } else if (params.m <= 4) {
    launch_rows<4>(params, stream);
  } else {
    // A bucket of 8 would spill (its sums and norm state need ~40 more
    // registers): rows 4.. run as a second launch over the same weights.
    launch_rows<4>(gemv_row_slice(params, 0, 4), stream);
    launch_rows<4>(gemv_row_slice(params, 4, params.m - 4), stream);
  }
}

}  // namespace cellm::cuda
