// The device draw (sample.cuh's `sample`): the row's softmax, its top-k or
// top-p set by radix select on the bits of p, and the token the coin lands
// on. Every pass over the row recomputes p (expf and two IEEE divisions a
// logit), so a pass is bound by one SM's arithmetic when one block draws a
// row: on the H200 a 128K-id top-p draw took 0.88 ms that way, longer than
// the 1B model's whole decode step. A row is therefore drawn by a team of
// blocks, a cluster of kClusterBlocks where the device has clusters (one
// block elsewhere): each block owns a contiguous slice of the ids, and the
// team combines its blocks' partials (maximum, softmax sum, histogram bins,
// masses and counts) through distributed shared memory, always in rank
// order, so a draw is deterministic. The integer sums are exact, so only Z,
// a float summed block by block, can differ from the one-block draw (in its
// last bits; see sample.cuh).
#include <cooperative_groups.h>
#include <string>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/kernels/sample_common.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

CELLM_TRACE_TABLE(draw_trace);

constexpr int kClusterBlocks = kSampleClusterBlocks;  // the portable cluster size
constexpr double kFixedOne = 4503599627370496.0;      // 2^52: the masses' fixed point

// The kC blocks drawing one row. Each member function is called by every
// thread of every block of the team, with values that are the same across
// each block's threads; every remote read is followed by a cluster barrier,
// so no block leaves while another still reads its shared memory.
template <int kC>
struct Team {
  int rank;   // 0 .. kC - 1
  int begin;  // this block's ids: [begin, end)
  int end;
  u64* box;  // a shared word, exchanged by each()

  // Calls fold(j, value of block j) for every block of the team, in rank
  // order.
  template <class Fold>
  __device__ void each(u64 value, Fold&& fold) const {
    if constexpr (kC == 1) {
      fold(0, value);
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      if (threadIdx.x == 0) *box = value;
      cluster.sync();
#pragma unroll
      for (int j = 0; j < kC; ++j) fold(j, *cluster.map_shared_rank(box, j));
      cluster.sync();  // the box may be written again
#else
      // Clusters need sm_90; the launch never asks for them below it.
      __trap();
#endif
    }
  }

  __device__ u64 sum(u64 value) const {
    u64 total = 0;
    each(value, [&](int, u64 v) { total += v; });
    return total;
  }

  // The sum of `value` over the blocks before this one.
  __device__ u64 before(u64 value) const {
    u64 total = 0;
    each(value, [&](int j, u64 v) { total += j < rank ? v : 0; });
    return total;
  }

  // In rank order; with one block, exactly `value`.
  __device__ float sum_f32(float value) const {
    float total = 0.0f;
    each(__float_as_uint(value),
         [&](int, u64 v) { total = __fadd_rn(total, __uint_as_float(static_cast<unsigned>(v))); });
    return total;
  }

  __device__ int max_index(int value) const {  // value >= -1
    u64 best = 0;
    each(static_cast<u64>(value + 1), [&](int, u64 v) { best = v > best ? v : best; });
    return static_cast<int>(best) - 1;
  }

  __device__ ArgMax argmax(ArgMax mine) const {
    ArgMax best = mine;
    each((static_cast<u64>(__float_as_uint(mine.value)) << 32) | static_cast<unsigned>(mine.index),
         [&](int, u64 v) {
           const float value = __uint_as_float(static_cast<unsigned>(v >> 32));
           const int index = static_cast<int>(static_cast<unsigned>(v));
           if (better(value, index, best.value, best.index)) best = ArgMax{value, index};
         });
    return best;
  }
};

// The row's probabilities, recomputed bit-identically wherever needed.
// Suppressed ids read as -inf, so their probability is exactly 0.
struct Softmax {
  const float* row;
  const Banned* banned;
  int vocab;
  float temperature;
  float max_scaled;  // max of x / T
  float sum;         // Z

  __device__ __forceinline__ float logit(int i) const {
    return banned->has(i) ? -INFINITY : row[i];
  }
  __device__ __forceinline__ float prob(int i) const {
    const float y = __fdiv_rn(logit(i), temperature);
    return __fdiv_rn(expf(__fsub_rn(y, max_scaled)), sum);
  }
};

__device__ __forceinline__ u64 fixed(float p) {
  return __double2ull_rz(static_cast<double>(p) * kFixedOne);
}

// The largest id whose probability is nonzero (-1 when none).
template <int kC>
__device__ int last_live(const Team<kC>& team, const Softmax& sm, int* slot) {
  if (threadIdx.x == 0) *slot = -1;
  __syncthreads();
  int last = -1;
  for (int i = team.begin + static_cast<int>(threadIdx.x); i < team.end; i += kThreads) {
    if (sm.prob(i) > 0.0f) last = i;
  }
  if (last >= 0) atomicMax(slot, last);
  __syncthreads();
  const int block_last = *slot;
  __syncthreads();
  return team.max_index(block_last);
}

struct SelectShared {
  unsigned count[256];  // this block's bins
  u64 mass[256];
  unsigned team_count[256];  // the team's, summed by warp 0
  int digit;
  u64 above_count;
  u64 above_mass;
  bool found;
};

struct Selection {
  bool found;
  unsigned bits;    // the selected value of p, as bits
  u64 above_count;  // eligible tokens with p above it
  u64 above_mass;   // and their fixed-point mass
  u64 tie_count;    // eligible tokens with exactly this p
};

// Warp 0 of every block sums the team's bins (lane l: bins 255 - 8l - j for
// j < 8, into `count` and `mass`) and leaves the sums of counts in
// sh.team_count.
template <int kC>
__device__ __forceinline__ void team_bins(SelectShared& sh, int lane, unsigned (&count)[8],
                                          u64 (&mass)[8]) {
  const int top = 255 - lane * 8;  // bins top - j, j < 8
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    count[j] = 0;
    mass[j] = 0;
  }
  if constexpr (kC == 1) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      count[j] = sh.count[top - j];
      mass[j] = sh.mass[top - j];
    }
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    // One rank at a time: its eight bins are requested together, and the
    // addresses stay few enough for the 64 registers of a 1024-thread block.
#pragma unroll 1
    for (int r = 0; r < kC; ++r) {
      const unsigned* counts = cluster.map_shared_rank(sh.count, r);
      const u64* masses = cluster.map_shared_rank(sh.mass, r);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        count[j] += counts[top - j];
        mass[j] += masses[top - j];
      }
    }
#endif
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) sh.team_count[top - j] = count[j];
}

template <int kC>
__device__ __forceinline__ void team_barrier() {
  if constexpr (kC > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#endif
  }
}

// Radix select over the bits of p (non-negative floats order like their
// bits): the largest v such that the weight (count or fixed mass) of the
// eligible tokens with p >= v exceeds `target`. Eligible: bits > floor_bits,
// or every token when has_floor is false.
template <int kC>
__device__ Selection radix_select(const Team<kC>& team, const Softmax& sm, bool by_mass, u64 target,
                                  bool has_floor, unsigned floor_bits, SelectShared& sh) {
  unsigned prefix = 0;
  unsigned mask = 0;
  if (threadIdx.x == 0) {
    sh.above_count = 0;
    sh.above_mass = 0;
    sh.found = true;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();
    for (int d = threadIdx.x; d < 256; d += kThreads) {
      sh.count[d] = 0;
      sh.mass[d] = 0;
    }
    __syncthreads();
    // Most probabilities share a few digits (the top byte is the exponent),
    // so the lanes of a warp that fall in one bin add up their count and
    // mass first and one of them updates the bin: one shared atomic per bin
    // and warp instead of up to 32 on one address (H200, 128K ids: a top-p
    // draw 1.06 -> 0.88 ms on one block). Every lane runs the same number of
    // rounds so the warp's collectives see all its lanes.
    for (int base = team.begin; base < team.end; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      int d = -1;
      u64 m = 0;
      if (i < team.end) {
        const float p = sm.prob(i);
        const unsigned bits = __float_as_uint(p);
        if (!((has_floor && bits <= floor_bits) || (bits & mask) != prefix)) {
          d = static_cast<int>((bits >> shift) & 255);
          m = fixed(p);
        }
      }
      const unsigned peers = __match_any_sync(0xffffffffu, d);
      if (d >= 0) {
        // m <= 2^52: three 20-bit pieces, each summed exactly over <= 32 lanes.
        const unsigned lo = __reduce_add_sync(peers, static_cast<unsigned>(m & 0xfffffu));
        const unsigned mid = __reduce_add_sync(peers, static_cast<unsigned>((m >> 20) & 0xfffffu));
        const unsigned hi = __reduce_add_sync(peers, static_cast<unsigned>(m >> 40));
        if ((threadIdx.x & 31) == static_cast<unsigned>(__ffs(peers) - 1)) {
          atomicAdd(&sh.count[d], static_cast<unsigned>(__popc(peers)));
          atomicAdd(&sh.mass[d], static_cast<u64>(lo) + (static_cast<u64>(mid) << 20) +
                                     (static_cast<u64>(hi) << 40));
        }
      }
    }
    __syncthreads();
    team_barrier<kC>();  // every block's bins are complete
    if (threadIdx.x < 32) {
      // Warp 0 finds the bin where the weight from the top crosses `target`:
      // lane l owns bins 255 - 8l .. 248 - 8l, lanes scan their chunk totals.
      // Every block does the same with the same sums.
      const int lane = threadIdx.x;
      unsigned count[8];  // a bin counts at most the vocabulary
      u64 mass[8];
      team_bins<kC>(sh, lane, count, mass);
      u64 chunk_count = 0;
      u64 chunk_mass = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        chunk_count += count[j];
        chunk_mass += mass[j];
      }
      u64 incl_count = chunk_count;
      u64 incl_mass = chunk_mass;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const u64 c = __shfl_up_sync(0xffffffffu, incl_count, offset);
        const u64 m = __shfl_up_sync(0xffffffffu, incl_mass, offset);
        if (lane >= offset) {
          incl_count += c;
          incl_mass += m;
        }
      }
      const bool found_so_far = sh.found;
      const u64 above_count = sh.above_count;
      const u64 above_mass = sh.above_mass;
      // Every lane has read them before one lane rewrites them below
      // (racecheck flagged the read/write pair without this).
      __syncwarp();
      const u64 reach = (by_mass ? above_mass + incl_mass : above_count + incl_count);
      const unsigned crossing = __ballot_sync(0xffffffffu, found_so_far && reach > target);
      if (crossing == 0) {
        if (lane == 0) {
          sh.found = false;
          sh.digit = 0;
        }
      } else if (lane == __ffs(crossing) - 1) {
        u64 acc_count = above_count + incl_count - chunk_count;
        u64 acc_mass = above_mass + incl_mass - chunk_mass;
        int chosen = 255 - lane * 8 - 7;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const u64 weight = by_mass ? mass[j] : static_cast<u64>(count[j]);
          if ((by_mass ? acc_mass : acc_count) + weight > target) {
            chosen = 255 - lane * 8 - j;
            break;
          }
          acc_count += count[j];
          acc_mass += mass[j];
        }
        sh.above_count = acc_count;
        sh.above_mass = acc_mass;
        sh.digit = chosen;
      }
    }
    team_barrier<kC>();  // every block has read the others' bins
    __syncthreads();
    prefix |= static_cast<unsigned>(sh.digit) << shift;
    mask |= 255u << shift;
  }
  Selection result;
  result.found = sh.found;
  result.bits = prefix;
  result.above_count = sh.above_count;
  result.above_mass = sh.above_mass;
  result.tie_count = sh.team_count[sh.digit];
  __syncthreads();
  return result;
}

// Warp w's share of a block's ids for the id-order walks below: a
// contiguous span, read 32 ids at a time so every load is coalesced (a span
// per thread made each warp load touch 32 lines).
struct WarpSpan {
  int begin;
  int end;
};
__device__ __forceinline__ WarpSpan warp_span(int begin, int end) {
  const int span = (end - begin + kWarps - 1) / kWarps;
  const int first = min(end, begin + static_cast<int>(threadIdx.x >> 5) * span);
  return {first, min(end, first + span)};
}

// Sum of `value` over the warps before this one, and over all of them in
// `total`; `value` must be the same on all lanes of a warp.
__device__ u64 warps_before_u64(u64 value, u64* scratch, u64* total) {
  const int warp = static_cast<int>(threadIdx.x >> 5);
  __syncthreads();  // scratch may still be read
  if ((threadIdx.x & 31) == 0) scratch[warp] = value;
  __syncthreads();
  u64 before = 0;
  u64 all = 0;
  for (int w = 0; w < kWarps; ++w) {
    before += w < warp ? scratch[w] : 0;
    all += scratch[w];
  }
  __syncthreads();  // scratch may be reused
  *total = all;
  return before;
}

// The index of the j-th token (0-based, id order) whose p has exactly `bits`.
template <int kC>
__device__ int nth_with_bits(const Team<kC>& team, const Softmax& sm, unsigned bits, u64 j,
                             u64* scratch, int* result) {
  const WarpSpan span = warp_span(team.begin, team.end);
  const int lane = static_cast<int>(threadIdx.x & 31);
  u64 count = 0;
  for (int base = span.begin; base < span.end; base += 32) {
    const int i = base + lane;
    const bool hit = i < span.end && __float_as_uint(sm.prob(i)) == bits;
    count += static_cast<u64>(__popc(__ballot_sync(0xffffffffu, hit)));
  }
  if (threadIdx.x == 0) *result = -1;
  u64 block_count = 0;
  u64 seen = warps_before_u64(count, scratch, &block_count);
  seen += team.before(block_count);
  if (j >= seen && j < seen + count) {
    // This warp holds it: walk its span again until the j-th match.
    for (int base = span.begin; base < span.end; base += 32) {
      const int i = base + lane;
      const bool hit = i < span.end && __float_as_uint(sm.prob(i)) == bits;
      const unsigned hits = __ballot_sync(0xffffffffu, hit);
      const auto n = static_cast<u64>(__popc(hits));
      if (j < seen + n) {
        // The (j - seen)-th set lane of `hits`.
        unsigned rest = hits;
        for (u64 k = seen; k < j; ++k) rest &= rest - 1;
        if (lane == 0) *result = base + __ffs(rest) - 1;
        break;
      }
      seen += n;
    }
  }
  __syncthreads();
  const int found = *result;
  __syncthreads();
  return team.max_index(found);
}

// Tokens, in id order, whose cumulative fixed-point mass is <= `coin`: the
// id of the first token past the coin (vocab when none is).
template <int kC>
__device__ u64 count_within_coin(const Team<kC>& team, const Softmax& sm, u64 coin, u64* scratch) {
  const WarpSpan span = warp_span(team.begin, team.end);
  const int lane = static_cast<int>(threadIdx.x & 31);
  u64 mass = 0;
  for (int i = span.begin + lane; i < span.end; i += 32) mass += fixed(sm.prob(i));
  mass = warp_sum(mass);
  u64 block_mass = 0;
  u64 running = warps_before_u64(mass, scratch, &block_mass);
  running += team.before(block_mass);
  // Cumulative mass never falls: warps wholly within the coin count every
  // id, those past it none, and the one warp where it crosses walks its ids.
  u64 count = 0;
  if (running + mass <= coin) {
    count = static_cast<u64>(span.end - span.begin);
  } else if (running <= coin) {
    for (int base = span.begin; base < span.end; base += 32) {
      const int i = base + lane;
      u64 inclusive = i < span.end ? fixed(sm.prob(i)) : 0;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const u64 n = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += n;
      }
      const unsigned within =
          __ballot_sync(0xffffffffu, i < span.end && running + inclusive <= coin);
      count += static_cast<u64>(__popc(within));
      if (within != __ballot_sync(0xffffffffu, i < span.end)) break;  // crossed here
      running += __shfl_sync(0xffffffffu, inclusive, 31);
    }
  }
  return team.sum(block_sum(lane == 0 ? count : 0, scratch));
}

// A team of kC blocks per row: blockIdx.x is the row, blockIdx.z the rank.
// Every return below is taken by every thread of the team.
template <int kC>
__global__ void __launch_bounds__(kThreads, 1)
    sample_kernel(const __grid_constant__ SampleParams p) {
  const trace::BlockScope traced(draw_trace, trace::slot_of(p));
  // No programmatic wait: the launch itself waits for the logits.
  trace::mark(draw_trace, trace::slot_of(p), trace::kWaitMark);
  __shared__ ArgMax argmax_scratch[kWarps];
  __shared__ float f32_scratch[kWarps];
  __shared__ u64 u64_scratch[kWarps];
  __shared__ SelectShared select_shared;
  __shared__ int found_index;
  __shared__ Banned banned;
  __shared__ u64 box;

  const int r = static_cast<int>(blockIdx.x);
  const int vocab = p.vocab;
  const int rank = kC == 1 ? 0 : static_cast<int>(blockIdx.z);
  const int chunk = (vocab + kC - 1) / kC;
  const int begin = min(vocab, rank * chunk);
  const Team<kC> team{rank, begin, min(vocab, begin + chunk), &box};
  const bool lead = rank == 0 && threadIdx.x == 0;  // writes the row's token
  load_banned(p, r, banned);
  const float* row = p.logits + static_cast<std::int64_t>(r) * p.logits_stride;
  const float temperature = p.params[r * kSampleParamsPerRow + 0];
  const float top_p = p.params[r * kSampleParamsPerRow + 1];
  const float top_k = p.params[r * kSampleParamsPerRow + 2];
  const float coin = p.params[r * kSampleParamsPerRow + 3];

  ArgMax greedy =
      team.argmax(block_argmax(row, team.begin, team.end, vocab, banned, argmax_scratch));
  if (greedy.index >= vocab) greedy.index = first_candidate(vocab, banned);
  if (!(temperature > 0.0f) || greedy.value == -INFINITY || isnan(greedy.value)) {
    if (lead) p.out[r] = greedy.index;
    return;
  }
  Softmax sm{row, &banned, vocab, temperature, __fdiv_rn(greedy.value, temperature), 0.0f};
  float partial = 0.0f;
  for (int i = team.begin + static_cast<int>(threadIdx.x); i < team.end; i += kThreads) {
    partial += expf(__fsub_rn(__fdiv_rn(sm.logit(i), temperature), sm.max_scaled));
  }
  sm.sum = team.sum_f32(block_sum(partial, f32_scratch));

  const bool use_top_k = top_k > 0.0f && top_k < static_cast<float>(vocab);
  const bool use_top_p = !use_top_k && top_p > 0.0f && top_p < 1.0f;

  if (!use_top_k && !use_top_p) {
    // Token order: count the tokens whose cumulative mass is <= coin.
    const u64 coin_fixed = __double2ull_rz(static_cast<double>(coin) * kFixedOne);
    const u64 total = count_within_coin(team, sm, coin_fixed, u64_scratch);
    if (total < static_cast<u64>(vocab)) {
      if (lead) p.out[r] = static_cast<int>(total);
      return;
    }
    // Rounding left no id past the coin: the last one that can be drawn.
    const int last = last_live(team, sm, &found_index);
    if (lead) p.out[r] = last >= 0 ? last : vocab - 1;
    return;
  }

  // The kept set: every token with p above `kept.bits` plus the first
  // `kept_ties` tokens (id order) with p equal to it.
  SelectShared& sel = select_shared;
  Selection kept;
  u64 kept_ties = 0;
  if (use_top_k) {
    const u64 k = static_cast<u64>(ceilf(top_k));
    kept = radix_select(team, sm, /*by_mass=*/false, k - 1, false, 0, sel);
    kept_ties = k - kept.above_count;
  } else {
    const u64 target = __double2ull_rz(static_cast<double>(top_p) * kFixedOne);
    kept = radix_select(team, sm, /*by_mass=*/true, target, false, 0, sel);
    if (kept.found) {
      // Tied token n precedes with mass above + n * w; kept while <= top_p.
      const u64 w = fixed(__uint_as_float(kept.bits));
      kept_ties = w == 0 ? kept.tie_count : min(kept.tie_count, (target - kept.above_mass) / w + 1);
    } else {
      // Rounding left the whole row within top_p: keep everything.
      kept = radix_select(team, sm, /*by_mass=*/false, static_cast<u64>(vocab) - 1, false, 0, sel);
      kept_ties = kept.tie_count;
    }
  }
  const u64 tie_weight = fixed(__uint_as_float(kept.bits));
  const u64 kept_mass = kept.above_mass + kept_ties * tie_weight;
  const u64 u = __double2ull_rz(static_cast<double>(coin) * static_cast<double>(kept_mass));

  // The first kept rank whose cumulative mass exceeds u.
  unsigned chosen_bits = kept.bits;
  u64 nth = 0;
  bool in_kept_ties = true;
  if (kept.above_mass > u) {
    const Selection above = radix_select(team, sm, /*by_mass=*/true, u, true, kept.bits, sel);
    if (above.found) {
      const u64 w = fixed(__uint_as_float(above.bits));
      chosen_bits = above.bits;
      nth = w == 0 ? 0 : min(above.tie_count - 1, (u - above.above_mass) / w);
      in_kept_ties = false;
    }
  }
  if (in_kept_ties) {
    const u64 last = kept_ties > 0 ? kept_ties - 1 : 0;
    nth = (tie_weight == 0 || u < kept.above_mass) ? last
                                                   : min(last, (u - kept.above_mass) / tie_weight);
  }
  const int index = nth_with_bits(team, sm, chosen_bits, nth, u64_scratch, &found_index);
  if (lead) p.out[r] = index >= 0 ? index : greedy.index;
}

}  // namespace

void launch_sample(const SampleParams& requested, cudaStream_t stream) {
  SampleParams params = requested;
  const bool cluster = params.cluster && cluster_launch_supported();
  trace::assign_slot(params, draw_trace, [&] {
    return "sample/draw rows=" + std::to_string(params.rows) +
           " blocks=" + std::to_string(cluster ? kClusterBlocks : 1);
  });
  if (cluster) {
    launch(sample_kernel<kClusterBlocks>,
           LaunchConfig{dim3(params.rows, 1, kClusterBlocks), dim3(kThreads), 0, stream, false,
                        kClusterBlocks},
           params);
  } else {
    launch(sample_kernel<1>, LaunchConfig{dim3(params.rows), dim3(kThreads), 0, stream}, params);
  }
}

}  // namespace cellm::cuda
