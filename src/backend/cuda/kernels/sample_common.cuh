// What the device sampler's kernels share (sample.cu: argmax, sample_draw.cu:
// the draw): a row's suppressed ids and block reductions over 1024 threads
// (the argmax's order is argmax_order.cuh's). Included by those
// two files and the draw's own headers (sample_team.cuh, sample_select.cuh)
// only.
//
// Thread-safety: device helpers; the block_* ones must be called by every
// thread of the block (they hold barriers).
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/argmax_order.cuh"
#include "backend/cuda/kernels/sample.cuh"

namespace cellm::cuda {
// Internal linkage: each including file gets its own copy.
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;

using u64 = unsigned long long;

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

// The cross-warp step of every block reduction below: each warp loads the 32
// per-warp partials lane by lane and reduces them with the same butterfly,
// so every thread gets the same, deterministic result without a serial loop.
static_assert(kWarps == 32, "block reductions assume 32 warps of partials");

// Max and first arg-max of the candidates among ids [begin, end) of a row
// (suppressed ids excluded); index `sentinel` when there is none (all NaN or
// suppressed). Every thread gets the result.
__device__ __forceinline__ ArgMax block_argmax(const float* row, int begin, int end, int sentinel,
                                               const Banned& banned, ArgMax* scratch) {
  float best = -INFINITY;
  int best_i = sentinel;  // loses every tie
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += kThreads) {
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
  return ArgMax{best, best_i};
}

// A row whose argmax found no candidate (all NaN): the first id that is not
// suppressed, as the host takes (0 if none is left).
__device__ __forceinline__ int first_candidate(int vocab, const Banned& banned) {
  int i = 0;
  while (i < vocab && banned.has(i)) ++i;
  return i < vocab ? i : 0;
}

// Sums over a warp and over the block (u64 or float), in a fixed tree:
// every thread gets the same total on every run.
template <class T>
__device__ __forceinline__ T warp_sum(T value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

template <class T>
__device__ __forceinline__ T block_sum(T value, T* scratch) {
  value = warp_sum(value);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = value;
  __syncthreads();
  const T total = warp_sum(scratch[threadIdx.x & 31]);
  __syncthreads();
  return total;
}

}  // namespace
}  // namespace cellm::cuda
