// The tensor-core quantized GEMV (qgemv_mma.cuh): the kernel, its split of
// the work and its launch. The weight sources (which bits a lane loads, how
// they become an mma step's floats) are qgemv_mma_src.cuh.
//
// The m16n8k16 fragments (PTX ISA, bf16; g = lane / 4, t = lane % 4), which
// every index below follows:
//   A (16 x 16, row-major), 4 registers of 2 bf16: a0 = (row g, cols 2t,
//     2t + 1), a1 = (row g + 8, cols 2t, 2t + 1), a2 = (row g, cols 2t + 8,
//     2t + 9), a3 = (row g + 8, cols 2t + 8, 2t + 9); the lower column in
//     the low half.
//   B (16 x 8, col-major), 2 registers: b0 = (k rows 2t, 2t + 1, column g),
//     b1 = (k rows 2t + 8, 2t + 9, column g).
//   C/D (16 x 8, float): c0, c1 = (row g, cols 2t, 2t + 1), c2, c3 = (row
//     g + 8, cols 2t, 2t + 1).
// Here A row i is weight row 16 tile + i, B column r is input row r, and a
// step's 32 k values are the 8 weights each lane quad t decodes (its
// source's positions pos(run) + i, in decode order w[0..7]): the first mma
// takes w[0..3] (tile k 2t, 2t + 1 <- w[0], w[1]; 2t + 8, 2t + 9 <- w[2],
// w[3]), the second w[4..7]; lane (g, t) reads B column g at the same
// positions, so each C element sums weight x input over the same k. The
// inputs are staged in shared memory in that order (for_each_b_run), so a
// lane's B words of a step are one conflict-free 16-byte load.
//
// Work. The n rows are tiles of 16; k is cut into groups of 256. A launch
// splits k in `slices` (a cluster of that many blocks, one slice each: the
// grid's z) and each slice among `kk` warps of a block; the other warps of
// the block take other tiles over the same k, so the input columns a block
// stages in shared memory serve several tiles. A warp walks its tiles one
// after the other, each over its groups in order, prefetching the next
// group's weights while it multiplies this one (the sources with small Raws).
// Partial sums (one per slice and warp of a tile) meet in shared memory and
// are added, in rank order and then warp order, by the cluster's blocks over
// distributed shared memory; with one slice and one warp a tile, a warp
// stores its own sums. slices and kk come from n and k only (never m), so
// every output's sum runs in the same order whatever the row count.
#include <algorithm>
#include <cooperative_groups.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/kernels/qgemv_mma.cuh"
#include "backend/cuda/kernels/qgemv_mma_src.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

namespace cg = cooperative_groups;
using namespace qgemv_mma_detail;  // NOLINT(google-build-using-namespace): the weight sources

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16;                 // A rows of the mma
constexpr int kTileOut = kTileRows * 8;       // a tile's sums: 16 weight rows x 8 B columns
constexpr int kGroupK = 32 * kStepsPerGroup;  // 256
// bf16 past each staged row: rows g and g + 1 start 64 bytes apart (mod
// 128), so the 16-byte B loads of a quarter warp (rows g, g + 1, quads
// 0..3) hit eight distinct 16-byte bank groups.
constexpr int kPad = 32;
constexpr int kMaxSlices = 8;  // the portable cluster size
constexpr int kMaxRounds = 8;  // tiles a warp walks when sums are partial
// A block stages at most this much input (eight rows of its slice of k).
constexpr std::int64_t kMaxStageBytes = 96 * 1024;
// The launch aims for this many warps an SM, two blocks of kWarps.
constexpr int kTargetWarpsPerSm = 16;
constexpr int kBlocksPerSm = 2;
static_assert(kQGemvMaxRows <= 8, "an input row a B column of the m16n8k16 mma");
static_assert(static_cast<std::int64_t>(kQGemvMmaMaxK) * kQGemvMaxRows * 2 <=
                  kMaxStageBytes * kMaxSlices,
              "the longest k fits the cluster's staging");

struct Plan {
  int slices;    // blocks of a cluster splitting k (grid z)
  int kk;        // warps of a block splitting a slice
  int blocks_x;  // blocks along the tiles
  int rounds;    // most tiles a warp walks
  int pitch;     // staged row pitch, bf16
  bool direct;   // one slice, one warp a tile: warps store their own sums
  std::size_t smem;
};

int ceil_div_int(long long a, long long b) {
  return static_cast<int>((a + b - 1) / b);
}

// From n and k (m only sizes the staging): enough warp tasks (tile x
// share of k) for kTargetWarpsPerSm warps on every SM, each at least one
// group, a cluster's slice short enough to stage eight rows of.
Plan plan_for(const QGemvParams& p) {
  const int tiles = ceil_div_int(p.n, kTileRows);
  const int groups = ceil_div_int(p.k, kGroupK);
  const int sms = multiprocessor_count();
  const int want = std::clamp(ceil_div_int(static_cast<long long>(sms) * kTargetWarpsPerSm, tiles),
                              1, std::min(groups, kMaxSlices * kWarps));
  const int stage_min =
      ceil_div_int(static_cast<long long>(groups) * kGroupK * kQGemvMaxRows * 2, kMaxStageBytes);
  Plan plan{};
  plan.slices =
      std::clamp(std::max(std::min(want, kMaxSlices), stage_min), 1, std::min(kMaxSlices, groups));
  plan.kk = 1;
  while (plan.kk * 2 <= kWarps && plan.slices * plan.kk * 2 <= want) plan.kk *= 2;
  const int per_round = kWarps / plan.kk;
  const int wave = std::max(1, sms * kBlocksPerSm / plan.slices);
  plan.direct = plan.slices == 1 && plan.kk == 1;
  const int all = ceil_div_int(tiles, per_round);
  plan.blocks_x = std::min(all, wave);
  if (!plan.direct) plan.blocks_x = std::max(plan.blocks_x, ceil_div_int(all, kMaxRounds));
  plan.rounds = ceil_div_int(tiles, static_cast<long long>(plan.blocks_x) * per_round);
  plan.pitch = ceil_div_int(groups, plan.slices) * kGroupK + kPad;
  plan.smem =
      static_cast<std::size_t>(p.m) * plan.pitch * sizeof(bf16) +
      (plan.direct ? 0 : static_cast<std::size_t>(plan.rounds) * kWarps * kTileOut * sizeof(float));
  return plan;
}

// The scale of weight (r, col) of rows whose blocks hold none (FP8): the
// factor qgemv_detail::apply_row_scale multiplies in.
__device__ __forceinline__ float row_scale(const RowScales& s, std::int64_t r, int col) {
  return __ldg(s.scales + r * s.ld + col / s.cols);
}

__device__ __forceinline__ void store_out(const QGemvParams& p, int r, int col, float sum) {
  if (p.bias != nullptr) sum += __bfloat162float(p.bias[col]);
  const std::int64_t at = static_cast<std::int64_t>(r) * p.ldc + col;
  if (p.out_f32) {
    static_cast<float*>(p.out)[at] = sum;
  } else {
    static_cast<bf16*>(p.out)[at] = __float2bfloat16(sum);
  }
}

template <class Src>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    qgemv_mma_kernel(const __grid_constant__ QGemvParams p, const int kk, const int pitch) {
  using D = typename Src::Dec;
  using Raw = typename Src::Raw;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int g = lane >> 2;
  const int t = lane & 3;
  const int slices = static_cast<int>(gridDim.z);
  const int z = static_cast<int>(blockIdx.z);
  const int groups = (p.k + kGroupK - 1) / kGroupK;
  const int blocks = p.k / D::kBlockElems;
  // The block's slice of k (groups bg0..bg1, staged); this warp's share of it.
  const int bg0 = groups * z / slices;
  const int bg1 = groups * (z + 1) / slices;
  const int share = warp % kk;
  const int wg0 = bg0 + (bg1 - bg0) * share / kk;
  const int ng = bg0 + (bg1 - bg0) * (share + 1) / kk - wg0;
  // Tiles: per_round a block at once, the warp's every stride-th from first.
  const int tiles = (p.n + kTileRows - 1) / kTileRows;
  const int per_round = kWarps / kk;
  const int first = static_cast<int>(blockIdx.x) * per_round + warp / kk;
  const int stride = static_cast<int>(gridDim.x) * per_round;
  const int my_tiles = first < tiles ? (tiles - 1 - first) / stride + 1 : 0;
  const int total = my_tiles * ng;
  const bool direct = slices == 1 && kk == 1;

  // [m][pitch] bf16 staged inputs, then (partial sums) [rounds][kWarps][16 x 8].
  extern __shared__ uint4 smem[];
  bf16* const x_s = reinterpret_cast<bf16*>(smem);
  float* const part_s = reinterpret_cast<float*>(x_s + p.m * pitch);

  const auto* w_bytes = static_cast<const std::uint8_t*>(p.w);
  const auto row_of = [&](int tile, int i) { return min(tile * kTileRows + i, p.n - 1); };
  struct Pair {
    Raw a, b;  // weight rows g and g + 8 of the tile
  };
  const auto load_unit = [&](Pair& u, int j) {
    const int i = j / ng;
    const int grp = wg0 + j - i * ng;
    const int tile = first + i * stride;
    Src::load(u.a, w_bytes + static_cast<std::int64_t>(row_of(tile, g)) * p.ldw_bytes, grp, t,
              blocks);
    Src::load(u.b, w_bytes + static_cast<std::int64_t>(row_of(tile, g + 8)) * p.ldw_bytes, grp, t,
              blocks);
  };

  // The weights never change: the first groups are requested before the
  // wait on the kernel that writes the inputs.
  Pair u0{};
  [[maybe_unused]] Pair u1{};
  if (total > 0) load_unit(u0, 0);
  if constexpr (Src::kPrefetch) {
    if (total > 1) load_unit(u1, 1);
  }
  griddep_wait();
  griddep_launch_dependents();
  {
    // The slice's columns of every row in step order (for_each_b_run): row
    // r's words of group bg0 + j, step s, quad t at 16-byte word (8j + s) *
    // 4 + t; past k, zeros (the last group of a 32-weight type may end
    // early: its dead steps multiply zeros).
    constexpr int kRunBytes = 2 * D::kRunLen;
    const int words = (bg1 - bg0) * kStepsPerGroup * 4;
    for (int r = 0; r < p.m; ++r) {
      const bf16* row = p.a + static_cast<std::int64_t>(r) * p.lda;
      auto* dst = reinterpret_cast<unsigned*>(x_s + r * pitch);
      for (int u = static_cast<int>(threadIdx.x); u < words; u += kThreads) {
        const int grp = bg0 + u / (4 * kStepsPerGroup);
        for_each_b_run<Src>(grp, (u / 4) % kStepsPerGroup, u % 4, [&](int word, int at) {
          cp_async_ca_zfill<kRunBytes>(dst + 4 * u + word, row + (at < p.k ? at : 0), at < p.k);
        });
      }
    }
    cp_async_commit();
    cp_async_wait<0>();
  }
  __syncthreads();

  // B column g is input row g: lanes of rows past m feed zeros.
  const bool has_row = g < p.m;
  const uint4* const x_row = reinterpret_cast<const uint4*>(x_s + (has_row ? g : 0) * pitch);
  float acc[2][4] = {};

  const auto finish = [&](int i, int tile) {
    float c[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      c[e] = acc[0][e] + acc[1][e];
      acc[0][e] = 0.0f;
      acc[1][e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e >> 1);  // tile row (C fragment)
      const int r = 2 * t + (e & 1);     // input row
      if (direct) {
        const int col = tile * kTileRows + row;
        if (r < p.m && col < p.n) store_out(p, r, col, c[e]);
      } else {
        part_s[(i * kWarps + warp) * kTileOut + row * 8 + r] = c[e];
      }
    }
  };

  const auto consume = [&](const Pair& u, int j) {
    const int i = j / ng;
    const int grp = wg0 + j - i * ng;
    const int tile = first + i * stride;
    const int ra = row_of(tile, g);
    const int rb = row_of(tile, g + 8);
    const auto prep_a = Src::prepare(u.a, t);
    const auto prep_b = Src::prepare(u.b, t);
    // FP8's scales, one a row and run of scales.cols columns: read once a
    // group where all the lane's steps lie in one run (the source's
    // kScaleSpan divides the run: per-row and 128-column scales), else a
    // step at a time. Dead steps read the row's first (none past k).
    [[maybe_unused]] bool one_scale = false;
    [[maybe_unused]] float group_sa = 1.0f, group_sb = 1.0f;
    if constexpr (scaled_v<D>) {
      one_scale = p.scales.cols % Src::kScaleSpan == 0;
      if (one_scale) {
        const int at = Src::live(grp, 0, t, blocks) ? Src::pos(grp, 0, t, 0) : 0;
        group_sa = row_scale(p.scales, ra, at);
        group_sb = row_scale(p.scales, rb, at);
      }
    }
#pragma unroll
    for (int s = 0; s < kStepsPerGroup; ++s) {
      const bool live = Src::live(grp, s, t, blocks);
      float wa[8];
      float wb[8];
      Src::decode(u.a, prep_a, s, t, wa);
      Src::decode(u.b, prep_b, s, t, wb);
      if constexpr (scaled_v<D>) {
        float sa = group_sa, sb = group_sb;
        if (!one_scale) {
          const int at = live ? Src::pos(grp, s, t, 0) : 0;
          sa = row_scale(p.scales, ra, at);
          sb = row_scale(p.scales, rb, at);
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          wa[e] *= sa;
          wb[e] *= sb;
        }
      }
      unsigned a1[4];
      unsigned a2[4];
      a_words(wa, wb, live, a1, a2);
      const uint4 b =
          has_row ? x_row[((grp - bg0) * kStepsPerGroup + s) * 4 + t] : make_uint4(0, 0, 0, 0);
      mma_bf16_16816(acc[0], a1, b.x, b.y);
      mma_bf16_16816(acc[1], a2, b.z, b.w);
    }
    if (j - i * ng == ng - 1) finish(i, tile);
  };

  if constexpr (Src::kPrefetch) {
    for (int j = 0; j < total; j += 2) {
      consume(u0, j);
      if (j + 2 < total) load_unit(u0, j + 2);
      if (j + 1 < total) {
        consume(u1, j + 1);
        if (j + 3 < total) load_unit(u1, j + 3);
      }
    }
  } else {
    for (int j = 0; j < total; ++j) {
      if (j > 0) load_unit(u0, j);
      consume(u0, j);
    }
  }
  if (direct) return;

  // Partial sums: every warp's are in its block's shared memory, every
  // block's in its cluster's. The block's outputs are dealt over the
  // cluster's ranks (item % slices) and threads; each is added over the
  // ranks in order, and over the slice's warps in order within a rank.
  __syncthreads();
  if (slices > 1) cg::this_cluster().sync();
  const int base = static_cast<int>(blockIdx.x) * per_round;
  const int rounds = (tiles - 1 - base) / stride + 1;
  const int items = rounds * per_round * kTileOut;
  for (int item = z + slices * static_cast<int>(threadIdx.x); item < items;
       item += slices * kThreads) {
    const int o = item % kTileOut;
    const int lt = (item / kTileOut) % per_round;
    const int i = item / (kTileOut * per_round);
    const int tile = base + lt + i * stride;
    const int col = tile * kTileRows + o / 8;
    const int r = o % 8;
    if (tile >= tiles || col >= p.n || r >= p.m) continue;
    float sum = 0.0f;
    for (int q = 0; q < slices; ++q) {
      const float* src = slices > 1 ? cg::this_cluster().map_shared_rank(part_s, q) : part_s;
      for (int w = 0; w < kk; ++w) sum += src[(i * kWarps + lt * kk + w) * kTileOut + o];
    }
    store_out(p, r, col, sum);
  }
  // No block leaves while another may still read its partial sums.
  if (slices > 1) cg::this_cluster().sync();
}

template <class Src>
void launch_src(const QGemvParams& p, cudaStream_t stream) {
  const Plan plan = plan_for(p);
  LaunchConfig config;
  config.grid = dim3(static_cast<unsigned>(plan.blocks_x), 1, static_cast<unsigned>(plan.slices));
  config.block = dim3(kThreads);
  config.smem_bytes = plan.smem;
  config.stream = stream;
  config.pdl = p.pdl;
  config.cluster_z = static_cast<unsigned>(plan.slices);
  launch(qgemv_mma_kernel<Src>, config, p, plan.kk, plan.pitch);
}

// The 16-byte source where the rows allow it (the first row and the stride
// on 16-byte boundaries), else the generic decoder of the same blocks.
template <class Wide>
void launch_wide_or_generic(const QGemvParams& p, cudaStream_t stream) {
  if (p.ldw_bytes % 16 == 0 && reinterpret_cast<std::uintptr_t>(p.w) % 16 == 0) {
    launch_src<Wide>(p, stream);
  } else {
    launch_src<GenericSrc<typename Wide::Dec>>(p, stream);
  }
}

}  // namespace

void launch_qgemv_mma(const QGemvParams& p, cudaStream_t stream) {
  switch (p.type) {
    case QuantType::kQ4_0: launch_src<GenericSrc<Q4_0>>(p, stream); break;
    case QuantType::kQ4_1: launch_src<GenericSrc<Q4_1>>(p, stream); break;
    case QuantType::kQ5_0: launch_src<GenericSrc<Q5_0>>(p, stream); break;
    case QuantType::kQ5_1: launch_src<GenericSrc<Q5_1>>(p, stream); break;
    case QuantType::kQ8_0: launch_src<GenericSrc<Q8_0>>(p, stream); break;
    case QuantType::kQ2_K: launch_src<GenericSrc<Q2_K>>(p, stream); break;
    case QuantType::kQ3_K: launch_src<GenericSrc<Q3_K>>(p, stream); break;
    case QuantType::kQ5_K: launch_src<GenericSrc<Q5_K>>(p, stream); break;
    case QuantType::kQ6_K: launch_src<GenericSrc<Q6_K>>(p, stream); break;
    case QuantType::kIQ4_XS: launch_src<GenericSrc<IQ4_XS>>(p, stream); break;
    case QuantType::kQ4_K: launch_wide_or_generic<Q4kWideSrc>(p, stream); break;
    case QuantType::kF8_E4M3: launch_wide_or_generic<Fp8WideSrc>(p, stream); break;
    case QuantType::kQ6_K_R8: launch_wide_or_generic<Q6r8WideSrc>(p, stream); break;
  }
}

}  // namespace cellm::cuda
