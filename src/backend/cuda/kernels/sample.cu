#include <algorithm>
#include <string>

#include <climits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

CELLM_TRACE_TABLE(sample_trace);

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr double kFixedOne = 4503599627370496.0;  // 2^52

using u64 = unsigned long long;

struct ArgMax {
  float value;
  int index;
};

// A row's suppressed ids, staged in shared memory (slots past `count` unused).
struct Banned {
  int ids[kSampleMaxSuppressed];
  int count;

  __device__ __forceinline__ bool has(int i) const {
    for (int j = 0; j < count; ++j) {
      if (ids[j] == i) return true;
    }
    return false;
  }
};

// Every thread of the block must call it; ids outside the vocabulary are
// dropped since they could never be drawn.
__device__ void load_banned(const SampleParams& p, int r, Banned& banned) {
  if (threadIdx.x == 0) {
    banned.count = 0;
    if (p.suppressed != nullptr) {
      for (int j = 0; j < kSampleMaxSuppressed; ++j) {
        const int id = p.suppressed[static_cast<std::int64_t>(r) * kSampleMaxSuppressed + j];
        if (id >= 0 && id < p.vocab) banned.ids[banned.count++] = id;
      }
    }
  }
  __syncthreads();
}

__device__ __forceinline__ bool better(float v, int i, float best, int best_i) {
  return v > best || (v == best && i < best_i);
}

__device__ __forceinline__ void warp_argmax(float& best, int& best_i) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best, offset);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
    if (better(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
}

// The cross-warp step of every block reduction below: each warp loads the 32
// per-warp partials lane by lane and reduces them with the same butterfly,
// so every thread gets the same, deterministic result without a serial loop.
static_assert(kWarps == 32, "block reductions assume 32 warps of partials");

// Max and first arg-max of a row's candidates (suppressed ids excluded);
// every thread gets the result.
__device__ __forceinline__ ArgMax block_argmax(const float* row, int vocab, const Banned& banned,
                                               ArgMax* scratch) {
  float best = -INFINITY;
  int best_i = vocab;  // sentinel: loses every tie
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    if (banned.has(i)) continue;
    const float v = row[i];
    if (better(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
  warp_argmax(best, best_i);
  const int lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) scratch[threadIdx.x >> 5] = ArgMax{best, best_i};
  __syncthreads();
  best = scratch[lane].value;
  best_i = scratch[lane].index;
  warp_argmax(best, best_i);
  __syncthreads();  // scratch may be reused
  if (best_i >= vocab) {
    // All NaN: the first candidate, as the host takes (0 if none is left).
    best_i = 0;
    while (best_i < vocab && banned.has(best_i)) ++best_i;
    if (best_i >= vocab) best_i = 0;
  }
  return ArgMax{best, best_i};
}

__device__ __forceinline__ u64 warp_sum_u64(u64 value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ u64 block_sum_u64(u64 value, u64* scratch) {
  value = warp_sum_u64(value);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = value;
  __syncthreads();
  const u64 total = warp_sum_u64(scratch[threadIdx.x & 31]);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float warp_sum_f32(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ __forceinline__ float block_sum_f32(float value, float* scratch) {
  value = warp_sum_f32(value);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = value;
  __syncthreads();
  const float total = warp_sum_f32(scratch[threadIdx.x & 31]);
  __syncthreads();
  return total;
}

// Exclusive prefix of `value` over threads in index order (exact integers).
__device__ u64 block_exclusive_scan_u64(u64 value, u64* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  u64 inclusive = value;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const u64 n = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += n;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    u64 w = scratch[lane];
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
      const u64 n = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += n;
    }
    scratch[lane] = w;
  }
  __syncthreads();
  const u64 before = (warp > 0 ? scratch[warp - 1] : 0ull) + inclusive - value;
  __syncthreads();  // scratch may be reused
  return before;
}

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

// The largest id whose probability is nonzero (-1 when none); every thread
// gets the result.
__device__ int block_last_live(const Softmax& sm, int* slot) {
  if (threadIdx.x == 0) *slot = -1;
  __syncthreads();
  int last = -1;
  for (int i = threadIdx.x; i < sm.vocab; i += kThreads) {
    if (sm.prob(i) > 0.0f) last = i;
  }
  if (last >= 0) atomicMax(slot, last);
  __syncthreads();
  const int result = *slot;
  __syncthreads();
  return result;
}

__device__ __forceinline__ u64 fixed(float p) {
  return __double2ull_rz(static_cast<double>(p) * kFixedOne);
}

struct SelectShared {
  unsigned count[256];
  u64 mass[256];
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

// Radix select over the bits of p (non-negative floats order like their
// bits): the largest v such that the weight (count or fixed mass) of the
// eligible tokens with p >= v exceeds `target`. Eligible: bits > floor_bits,
// or every token when has_floor is false.
__device__ Selection radix_select(const Softmax& sm, bool by_mass, u64 target, bool has_floor,
                                  unsigned floor_bits, SelectShared& sh) {
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
    for (int i = threadIdx.x; i < sm.vocab; i += kThreads) {
      const float p = sm.prob(i);
      const unsigned bits = __float_as_uint(p);
      if ((has_floor && bits <= floor_bits) || (bits & mask) != prefix) continue;
      const int d = (bits >> shift) & 255;
      atomicAdd(&sh.count[d], 1u);
      atomicAdd(&sh.mass[d], fixed(p));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Warp 0 finds the bin where the weight from the top crosses `target`:
      // lane l owns bins 255 - 8l .. 248 - 8l, lanes scan their chunk totals.
      const int lane = threadIdx.x;
      u64 chunk_count = 0;
      u64 chunk_mass = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        chunk_count += sh.count[255 - lane * 8 - j];
        chunk_mass += sh.mass[255 - lane * 8 - j];
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
          const int d = 255 - lane * 8 - j;
          const u64 weight = by_mass ? sh.mass[d] : static_cast<u64>(sh.count[d]);
          if ((by_mass ? acc_mass : acc_count) + weight > target) {
            chosen = d;
            break;
          }
          acc_count += sh.count[d];
          acc_mass += sh.mass[d];
        }
        sh.above_count = acc_count;
        sh.above_mass = acc_mass;
        sh.digit = chosen;
      }
    }
    __syncthreads();
    prefix |= static_cast<unsigned>(sh.digit) << shift;
    mask |= 255u << shift;
  }
  Selection result;
  result.found = sh.found;
  result.bits = prefix;
  result.above_count = sh.above_count;
  result.above_mass = sh.above_mass;
  result.tie_count = sh.count[sh.digit];
  __syncthreads();
  return result;
}

// The index of the j-th token (0-based, id order) whose p has exactly `bits`.
__device__ int nth_with_bits(const Softmax& sm, unsigned bits, u64 j, u64* scan_scratch,
                             int* result) {
  const int per = (sm.vocab + kThreads - 1) / kThreads;
  const int begin = threadIdx.x * per;
  const int end = min(sm.vocab, begin + per);
  u64 count = 0;
  for (int i = begin; i < end; ++i) count += __float_as_uint(sm.prob(i)) == bits ? 1 : 0;
  if (threadIdx.x == 0) *result = -1;
  const u64 before = block_exclusive_scan_u64(count, scan_scratch);
  if (j >= before && j < before + count) {
    u64 seen = before;
    for (int i = begin; i < end; ++i) {
      if (__float_as_uint(sm.prob(i)) == bits) {
        if (seen == j) {
          *result = i;
          break;
        }
        ++seen;
      }
    }
  }
  __syncthreads();
  return *result;
}

__global__ void __launch_bounds__(kThreads)
    sample_argmax_kernel(const __grid_constant__ SampleParams p) {
  const trace::BlockScope traced(sample_trace, trace::slot_of(p));
  // No programmatic wait: the launch itself waits for the logits.
  trace::mark(sample_trace, trace::slot_of(p), trace::kWaitMark);
  __shared__ ArgMax scratch[kWarps];
  __shared__ Banned banned;
  load_banned(p, static_cast<int>(blockIdx.x), banned);
  const float* row = p.logits + static_cast<std::int64_t>(blockIdx.x) * p.logits_stride;
  const ArgMax best = block_argmax(row, p.vocab, banned, scratch);
  if (threadIdx.x == 0) p.out[blockIdx.x] = best.index;
}

// The split argmax (sample.cuh): block (row, part) scans logits [part *
// chunk, (part + 1) * chunk) of its row with kSplitUnroll loads in flight per
// thread, and the last block of the row to arrive reduces the parts.
constexpr int kSplitThreads = 256;
constexpr int kSplitWarps = kSplitThreads / 32;
constexpr int kSplitUnroll = 4;
constexpr int kSplitMinChunk = 4096;  // logits per block, at least

int argmax_parts(int vocab) {
  return std::clamp((vocab + kSplitMinChunk - 1) / kSplitMinChunk, 1, kArgmaxMaxParts);
}

// The preferred of the block's candidates; every thread gets it.
__device__ __forceinline__ ArgMax split_block_argmax(float best, int best_i, ArgMax* scratch) {
  warp_argmax(best, best_i);
  const int lane = threadIdx.x & 31;
  if (lane == 0) scratch[threadIdx.x >> 5] = ArgMax{best, best_i};
  __syncthreads();
  best = lane < kSplitWarps ? scratch[lane].value : -INFINITY;
  best_i = lane < kSplitWarps ? scratch[lane].index : INT_MAX;
  warp_argmax(best, best_i);
  return ArgMax{best, best_i};
}

__global__ void __launch_bounds__(kSplitThreads)
    sample_argmax_split_kernel(const __grid_constant__ SampleParams p) {
  const trace::BlockScope traced(sample_trace, trace::slot_of(p));
  // No programmatic wait: the launch itself waits for the logits.
  trace::mark(sample_trace, trace::slot_of(p), trace::kWaitMark);
  __shared__ ArgMax scratch[kSplitWarps];
  __shared__ Banned banned;
  __shared__ bool last;
  const int r = static_cast<int>(blockIdx.x);
  const int part = static_cast<int>(blockIdx.y);
  const int parts = static_cast<int>(gridDim.y);
  load_banned(p, r, banned);
  const float* row = p.logits + static_cast<std::int64_t>(r) * p.logits_stride;
  const int chunk = (p.vocab + parts - 1) / parts;
  const int begin = part * chunk;
  const int end = min(p.vocab, begin + chunk);
  float best = -INFINITY;
  int best_i = p.vocab;  // sentinel: loses every tie
  // Indices rise within a thread, so taking only strictly better values keeps
  // the lower id of a tie; across threads warp_argmax breaks ties by id.
  for (int base = begin + static_cast<int>(threadIdx.x); base < end;
       base += kSplitThreads * kSplitUnroll) {
    float v[kSplitUnroll];
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const int i = base + u * kSplitThreads;
      v[u] = i < end ? row[i] : -INFINITY;
    }
#pragma unroll
    for (int u = 0; u < kSplitUnroll; ++u) {
      const int i = base + u * kSplitThreads;
      if (i < end && !banned.has(i) && better(v[u], i, best, best_i)) {
        best = v[u];
        best_i = i;
      }
    }
  }
  const ArgMax mine = split_block_argmax(best, best_i, scratch);
  ArgMax* partials =
      static_cast<ArgMax*>(p.argmax_partials) + static_cast<std::int64_t>(r) * kArgmaxMaxParts;
  if (threadIdx.x == 0) {
    partials[part] = mine;
    __threadfence();  // the partial is visible device-wide before the count
    const int arrived = atomicAdd(p.argmax_counters + r, 1);
    last = arrived == parts - 1;
    if (last) atomicExch(p.argmax_counters + r, 0);  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other blocks' partials, released before their counts
  best = -INFINITY;
  best_i = INT_MAX;
  for (int q = static_cast<int>(threadIdx.x); q < parts; q += kSplitThreads) {
    // Through L2: other blocks wrote them.
    const float value = __ldcg(&partials[q].value);
    const int index = __ldcg(&partials[q].index);
    if (better(value, index, best, best_i)) {
      best = value;
      best_i = index;
    }
  }
  __syncthreads();  // scratch is reused
  const ArgMax row_best = split_block_argmax(best, best_i, scratch);
  if (threadIdx.x == 0) {
    int index = row_best.index;
    if (index >= p.vocab) {
      // All NaN: the first candidate, as the host takes (0 if none is left).
      index = 0;
      while (index < p.vocab && banned.has(index)) ++index;
      if (index >= p.vocab) index = 0;
    }
    p.out[r] = index;
  }
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const __grid_constant__ SampleParams p) {
  // Every return below is taken by the whole block (the exit mark's barrier).
  const trace::BlockScope traced(sample_trace, trace::slot_of(p));
  // No programmatic wait: the launch itself waits for the logits.
  trace::mark(sample_trace, trace::slot_of(p), trace::kWaitMark);
  __shared__ ArgMax argmax_scratch[kWarps];
  __shared__ float f32_scratch[kWarps];
  __shared__ u64 u64_scratch[kWarps];
  __shared__ SelectShared select_shared;
  __shared__ int found_index;
  __shared__ Banned banned;

  const int r = blockIdx.x;
  load_banned(p, r, banned);
  const float* row = p.logits + static_cast<std::int64_t>(r) * p.logits_stride;
  const float temperature = p.params[r * kSampleParamsPerRow + 0];
  const float top_p = p.params[r * kSampleParamsPerRow + 1];
  const float top_k = p.params[r * kSampleParamsPerRow + 2];
  const float coin = p.params[r * kSampleParamsPerRow + 3];
  const int vocab = p.vocab;

  const ArgMax greedy = block_argmax(row, vocab, banned, argmax_scratch);
  if (!(temperature > 0.0f) || greedy.value == -INFINITY || isnan(greedy.value)) {
    if (threadIdx.x == 0) p.out[r] = greedy.index;
    return;
  }
  Softmax sm{row, &banned, vocab, temperature, __fdiv_rn(greedy.value, temperature), 0.0f};
  float partial = 0.0f;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    partial += expf(__fsub_rn(__fdiv_rn(sm.logit(i), temperature), sm.max_scaled));
  }
  sm.sum = block_sum_f32(partial, f32_scratch);

  const bool use_top_k = top_k > 0.0f && top_k < static_cast<float>(vocab);
  const bool use_top_p = !use_top_k && top_p > 0.0f && top_p < 1.0f;

  if (!use_top_k && !use_top_p) {
    // Token order: count the tokens whose cumulative mass is <= coin.
    const u64 coin_fixed = __double2ull_rz(static_cast<double>(coin) * kFixedOne);
    const int per = (vocab + kThreads - 1) / kThreads;
    const int begin = threadIdx.x * per;
    const int end = min(vocab, begin + per);
    u64 chunk = 0;
    for (int i = begin; i < end; ++i) chunk += fixed(sm.prob(i));
    u64 running = block_exclusive_scan_u64(chunk, u64_scratch);
    u64 count = 0;
    for (int i = begin; i < end; ++i) {
      running += fixed(sm.prob(i));
      count += running <= coin_fixed ? 1 : 0;
    }
    const u64 total = block_sum_u64(count, u64_scratch);
    if (total < static_cast<u64>(vocab)) {
      if (threadIdx.x == 0) p.out[r] = static_cast<int>(total);
      return;
    }
    // Rounding left no id past the coin: the last one that can be drawn.
    const int last = block_last_live(sm, &found_index);
    if (threadIdx.x == 0) p.out[r] = last >= 0 ? last : vocab - 1;
    return;
  }

  // The kept set: every token with p above `kept.bits` plus the first
  // `kept_ties` tokens (id order) with p equal to it.
  Selection kept;
  u64 kept_ties = 0;
  if (use_top_k) {
    const u64 k = static_cast<u64>(ceilf(top_k));
    kept = radix_select(sm, /*by_mass=*/false, k - 1, false, 0, select_shared);
    kept_ties = k - kept.above_count;
  } else {
    const u64 target = __double2ull_rz(static_cast<double>(top_p) * kFixedOne);
    kept = radix_select(sm, /*by_mass=*/true, target, false, 0, select_shared);
    if (kept.found) {
      // Tied token n precedes with mass above + n * w; kept while <= top_p.
      const u64 w = fixed(__uint_as_float(kept.bits));
      kept_ties = w == 0 ? kept.tie_count : min(kept.tie_count, (target - kept.above_mass) / w + 1);
    } else {
      // Rounding left the whole row within top_p: keep everything.
      kept =
          radix_select(sm, /*by_mass=*/false, static_cast<u64>(vocab) - 1, false, 0, select_shared);
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
    const Selection above = radix_select(sm, /*by_mass=*/true, u, true, kept.bits, select_shared);
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
  const int index = nth_with_bits(sm, chosen_bits, nth, u64_scratch, &found_index);
  if (threadIdx.x == 0) p.out[r] = index >= 0 ? index : greedy.index;
}

}  // namespace

void launch_sample_argmax(const SampleParams& requested, cudaStream_t stream) {
  SampleParams params = requested;
  const bool split = params.argmax_partials != nullptr && params.argmax_counters != nullptr;
  const int parts = split ? argmax_parts(params.vocab) : 1;
  trace::assign_slot(params, sample_trace, [&] {
    return "sample/argmax rows=" + std::to_string(params.rows) + " parts=" + std::to_string(parts);
  });
  if (split) {
    launch(sample_argmax_split_kernel,
           LaunchConfig{dim3(params.rows, parts), dim3(kSplitThreads), 0, stream}, params);
  } else {
    launch(sample_argmax_kernel, LaunchConfig{dim3(params.rows), dim3(kThreads), 0, stream},
           params);
  }
}

void launch_sample(const SampleParams& requested, cudaStream_t stream) {
  SampleParams params = requested;
  trace::assign_slot(params, sample_trace,
                     [&] { return "sample/draw rows=" + std::to_string(params.rows); });
  launch(sample_kernel, LaunchConfig{dim3(params.rows), dim3(kThreads), 0, stream}, params);
}

}  // namespace cellm::cuda
