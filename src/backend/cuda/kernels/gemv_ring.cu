// The one-row GEMV fed by bulk copies into a ring of shared memory (see
// GemvParams::ring in gemv.cuh for when launch_gemv takes it).
//
// Why: the register GEMV (gemv.cu) keeps its weights in flight in registers,
// four blocks of 128 registers a thread fill an SM's register file, so the
// next kernel's blocks find room only as this one's leave: each projection
// of a batch-1 step pays its own ramp, and its gap, on the step's critical
// path (1B on the H200: 48 us a layer against 29 us of weight reads).
// Here one block per SM, whose shared memory and registers take at most half
// of the SM, streams its share of the units (gemv_units.cuh) into a ring of
// stages with one producer lane's bulk copies, and never waits on the
// computation for them: the next kernel's block, launched beside it when
// its consumers pass their wait, fills its own ring while this one runs.
// Weights do not depend on the activations, so a projection that follows
// another finds its first ~96 KB an SM already landed when its wait returns.
//
// The consumers are eight warps in teams (as in decode_stream.cu): a team
// takes every (8 / T)-th row of a stage and its T members the 512-byte
// pieces member, member + T, ... of that row, with their inputs in
// registers; a row's sum is its members' warp sums in member order, so the
// same inputs give the same bits on every run.
//
// Status: correct (the GEMV tests, the program tests against the CPU program
// and the register GEMV, memcheck clean) but slower on the H200, so
// CELLM_GEMV_RING is off. 1B batch 1: 0.964-0.978 ms/step against 0.916-0.932
// with 32 KB stages, 1.03-1.04 with a 192 KB ring (no second block), 1.28
// with 16 KB stages. In the timeline the ring streams at ~33 GB/s an SM once
// it runs (gate/up's 508 KB a block in 15.3 us), but the RMSNorm's inputs
// take 3-4 us after the wait (x, then the norm weight, one round trip after
// the other) while the full ring stalls the stream, and o and q/k/v took 5.0
// and 8.0 us against 4.8 and 4.0 on the register GEMV.
#include <algorithm>
#include <string>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/bulk_copy.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/gemv_units.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

CELLM_TRACE_TABLE(gemv_ring_trace);

constexpr int kWarps = 8;  // consumer warps
constexpr int kConsumers = kWarps * 32;
constexpr int kThreads = kConsumers + 32;  // and one producer warp
constexpr int kPieceShift = 8;             // 256 columns (512 bytes, 16 a lane) per piece
constexpr int kPieceBytes = 512;
constexpr int kRounds = 8;         // pieces of a row per warp, inputs in registers
constexpr int kHeaderBytes = 512;  // 2 x kMaxStages barriers, norm sums
// The ring: stages of whole units of about kStageBytes (at least one unit),
// at most kRingBytes in all, and the per-row sums, so that a block (with
// the header, the sums and the 1 KB the runtime reserves) takes under half
// of an SM's 228 KB: two consecutive projections share an SM, and so does
// the attention's one-block-an-SM launch (113 KB, AttentionParams::spread).
constexpr int kStageBytes = 32 * 1024;
constexpr int kRingBytes = 96 * 1024;
constexpr int kMaxStages = 8;
constexpr int kMaxRegionBytes = 12 * 1024;

__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(kConsumers) : "memory");
}

__host__ __device__ __forceinline__ int team_of(int pieces) {
  int t = 1;
  while (t < kWarps && t * kRounds < pieces) t *= 2;
  return t;
}

__host__ __device__ __forceinline__ int ring_units(const GemvParams& p, int rows_per_unit) {
  return rows_per_unit == 2 && !is_gated(p.epilogue) ? (p.n + 1) / 2 : p.n;
}

// The shape of a launch, the same on the host and in every block.
struct RingLayout {
  int units;      // of the whole projection
  int per_block;  // most units a block takes
  int per_stage;  // units a stage holds
  int stage_bytes;
  int stages;
  int region_bytes;  // per-row, per-member sums
  int smem_bytes;
};

__host__ __device__ __forceinline__ RingLayout ring_layout(const GemvParams& p, int rows_per_unit,
                                                           int grid) {
  RingLayout l;
  const int row_bytes = p.k * 2;
  const int unit_bytes = rows_per_unit * row_bytes;
  l.units = ring_units(p, rows_per_unit);
  l.per_block = (l.units + grid - 1) / grid;
  l.per_stage = max(1, kStageBytes / unit_bytes);
  l.stage_bytes = l.per_stage * unit_bytes;
  l.stages = min(kMaxStages, kRingBytes / l.stage_bytes);
  l.region_bytes = (l.per_block * rows_per_unit * kWarps * 4 + 127) / 128 * 128;
  l.smem_bytes = kHeaderBytes + l.region_bytes + l.stages * l.stage_bytes;
  return l;
}

__device__ __forceinline__ int share(int n, int b, int grid) {
  return static_cast<int>(static_cast<long long>(n) * b / grid);
}

// kR: weight rows per unit (2 for the gated and rope epilogues, else 1).
template <int kR>
__global__ void __maxnreg__(112) gemv_ring_kernel(const __grid_constant__ GemvParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const RingLayout l = ring_layout(p, kR, gridDim.x);
  auto* full = reinterpret_cast<std::uint64_t*>(smem);
  std::uint64_t* empty = full + kMaxStages;
  auto* norm_sums = reinterpret_cast<float*>(empty + kMaxStages);
  auto* region = reinterpret_cast<float*>(smem + kHeaderBytes);
  unsigned char* ring = smem + kHeaderBytes + l.region_bytes;
  const int tid = threadIdx.x;
  const int u0 = share(l.units, blockIdx.x, gridDim.x);
  const int units = share(l.units, blockIdx.x + 1, gridDim.x) - u0;
  const int block_stages = (units + l.per_stage - 1) / l.per_stage;
  const unsigned row_bytes = static_cast<unsigned>(p.k) * 2u;
  trace::mark(gemv_ring_trace, trace::slot_of(p), trace::kEntryMark);
  if (tid == 0) {
    for (int i = 0; i < l.stages; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], kWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (tid >= kConsumers) {
    // The producer: weights only, so it starts before the previous kernel
    // is done, and refills a stage as soon as every consumer warp let go.
    if (tid != kConsumers) return;
    const std::uint64_t policy = l2_evict_first_policy();
    for (int s = 0; s < block_stages; ++s) {
      const int slot = s % l.stages;
      const int use = s / l.stages;
      if (use > 0) mbar_wait(&empty[slot], (use - 1) & 1);
      const int first = s * l.per_stage;
      const int n_units = min(l.per_stage, units - first);
      mbar_expect_bytes(&full[slot], static_cast<unsigned>(n_units * kR) * row_bytes);
      // The stage holds row 0 of each of its units, then row 1 of each;
      // rows that follow each other in the weights go as one copy (a copy
      // has a fixed cost: 4 KB copies ran an SM at about 18 GB/s).
      unsigned char* dst = ring + slot * l.stage_bytes;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const bool packed = p.ldw == p.k;
        std::int64_t run_row = -1;
        int run_at = 0;
        int run_rows = 0;
        for (int i = 0; i < n_units; ++i) {
          const UnitCols c = unit_cols<kR>(p, u0 + first + i);
          const std::int64_t row = r == 0 ? c.row0 : c.row1;
          if (packed && run_rows > 0 && row == run_row + run_rows) {
            ++run_rows;
            continue;
          }
          if (run_rows > 0) {
            bulk_copy_to_shared(dst + run_at * row_bytes, p.w + run_row * p.ldw,
                                run_rows * row_bytes, &full[slot], policy);
          }
          run_row = row;
          run_at = r * n_units + i;
          run_rows = 1;
        }
        bulk_copy_to_shared(dst + run_at * row_bytes, p.w + run_row * p.ldw, run_rows * row_bytes,
                            &full[slot], policy);
      }
    }
    return;
  }

  griddep_wait();
  trace::mark(gemv_ring_trace, trace::slot_of(p), trace::kWaitMark);
  // The next kernel's blocks may take the other half of the SMs now and
  // start their own weight stream.
  griddep_launch_dependents();

  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int pieces = p.k >> kPieceShift;
  const int team = team_of(pieces);
  const int member = warp & (team - 1);
  const int teams = kWarps / team;
  const bool norm = p.prologue == GemvPrologue::kRmsNorm;

  // This warp's inputs: 8 columns a lane of each of its pieces, as floats,
  // the norm weight folded in; the 1/rms scales the finished sums.
  float x[kRounds][8];
  float squares = 0.0f;
#pragma unroll
  for (int j = 0; j < kRounds; ++j) {
    const int piece = member + team * j;
    if (piece < pieces) {
      unpack8(__ldg(reinterpret_cast<const uint4*>(p.a) + piece * 32 + lane), x[j]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) x[j][e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) squares = fmaf(x[j][e], x[j][e], squares);
  }
  float inv_rms = 1.0f;
  if (norm) {
    squares = warp_sum(squares);
    // Team 0's members hold every piece once.
    if (lane == 0 && warp < team) norm_sums[warp] = squares;
#pragma unroll
    for (int j = 0; j < kRounds; ++j) {
      const int piece = member + team * j;
      if (piece < pieces) {
        float g[8];
        unpack8(__ldg(reinterpret_cast<const uint4*>(p.norm_weight) + piece * 32 + lane), g);
#pragma unroll
        for (int e = 0; e < 8; ++e) x[j][e] *= g[e] + p.norm_weight_offset;
      }
    }
    consumers_sync();
    float total = 0.0f;
    for (int w = 0; w < team; ++w) total += norm_sums[w];
    inv_rms = rsqrtf(total / static_cast<float>(p.k) + p.norm_eps);
  }
  trace::mark(gemv_ring_trace, trace::slot_of(p), trace::kFirstPhaseMark);

  for (int s = 0; s < block_stages; ++s) {
    const int slot = s % l.stages;
    mbar_wait(&full[slot], (s / l.stages) & 1);
    if (s == 0) trace::mark(gemv_ring_trace, trace::slot_of(p), trace::kFirstPhaseMark + 1);
    const int n_units = min(l.per_stage, units - s * l.per_stage);
    const int rows = n_units * kR;
    const unsigned char* stage = ring + slot * l.stage_bytes + lane * 16;
    for (int r = warp / team; r < rows; r += teams) {
      const unsigned char* row = stage + r * row_bytes;
      float even = 0.0f;
      float odd = 0.0f;
#pragma unroll
      for (int j = 0; j < kRounds; ++j) {
        const int piece = member + team * j;
        if (piece < pieces) {
          float w[8];
          unpack8(*reinterpret_cast<const uint4*>(row + piece * kPieceBytes), w);
#pragma unroll
          for (int e = 0; e < 8; e += 2) {
            even = fmaf(x[j][e], w[e], even);
            odd = fmaf(x[j][e + 1], w[e + 1], odd);
          }
        }
      }
      const float sum = warp_sum(even + odd);
      // Stage row r is row r / n_units of the stage's unit r % n_units.
      const int unit = s * l.per_stage + r % n_units;
      if (lane == 0) region[(unit * kR + r / n_units) * kWarps + member] = sum;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[slot]);
  }
  trace::mark(gemv_ring_trace, trace::slot_of(p), trace::kFirstPhaseMark + 2);
  consumers_sync();

  // One thread a unit: its rows' sums in member order, then the epilogue.
  for (int t = tid; t < units; t += kConsumers) {
    float sums[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      float s = 0.0f;
      for (int w = 0; w < team; ++w) s += region[(t * kR + r) * kWarps + w];
      sums[r] = norm ? s * inv_rms : s;
    }
    const int u = u0 + t;
    const UnitCols c = unit_cols<kR>(p, u);
    if constexpr (kR == 2) {
      if (is_gated(p.epilogue)) {
        store_gated(p, 0, c.col0, sums[0], sums[1]);
      } else if (p.epilogue == GemvEpilogue::kRopeScatter) {
        store_rope(p, 0, c, sums[0], sums[1]);
        if (u == 0 && p.rope.cell_table != nullptr) {
          record_cell(p.rope.cell_table, p.rope.max_seqs, p.rope.table_stride, p.rope.max_cells,
                      p.rope.seq_slots[0], p.rope.positions[0], p.rope.cells[0]);
        }
      } else {
        store_value(p, 0, c.col0, sums[0]);
        if (c.col1 >= 0) store_value(p, 0, c.col1, sums[1]);
      }
    } else {
      store_value(p, 0, c.col0, sums[0]);
    }
  }
#if CELLM_KERNEL_TRACE
  trace::mark(gemv_ring_trace, trace::slot_of(p), trace::kFirstPhaseMark + 3);
  consumers_sync();
  trace::mark(gemv_ring_trace, trace::slot_of(p), trace::kExitMark);
#endif
}

// Rows a unit of this call: pairs where the epilogue needs both rows.
int rows_per_unit(const GemvParams& p) {
  return is_gated(p.epilogue) || p.epilogue == GemvEpilogue::kRopeScatter ? 2 : 1;
}

int ring_grid(const GemvParams& p) {
  return std::max(1, std::min(multiprocessor_count(), ring_units(p, rows_per_unit(p))));
}

}  // namespace

bool gemv_ring_takes(const GemvParams& p) {
  if (!p.ring || p.m != 1 || p.out_f32 || p.k % (1 << kPieceShift) != 0 ||
      (p.k >> kPieceShift) > kWarps * kRounds) {
    return false;
  }
  const RingLayout l = ring_layout(p, rows_per_unit(p), ring_grid(p));
  return l.stages >= 2 && l.region_bytes <= kMaxRegionBytes;
}

void launch_gemv_ring(const GemvParams& requested, cudaStream_t stream) {
  GemvParams params = requested;
  trace::assign_slot(params, gemv_ring_trace, [&] {
    return std::string("gemv_ring n=") + std::to_string(params.n) +
           " k=" + std::to_string(params.k);
  });
  const int kr = rows_per_unit(params);
  const int grid = ring_grid(params);
  const RingLayout l = ring_layout(params, kr, grid);
  const void* kernel = kr == 2 ? reinterpret_cast<const void*>(gemv_ring_kernel<2>)
                               : reinterpret_cast<const void*>(gemv_ring_kernel<1>);
  ensure_dynamic_smem(kernel, static_cast<std::size_t>(l.smem_bytes));
  LaunchConfig config{dim3(static_cast<unsigned>(grid)), dim3(kThreads),
                      static_cast<std::size_t>(l.smem_bytes), stream};
  config.pdl = params.pdl;
  if (kr == 2) {
    launch(gemv_ring_kernel<2>, config, params);
  } else {
    launch(gemv_ring_kernel<1>, config, params);
  }
}

}  // namespace cellm::cuda
