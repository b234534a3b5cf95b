// The argmax's order, shared by the device sampler (sample_common.cuh) and
// the lm_head GEMV that takes the argmax of the logits it stores (gemv.cu,
// GemvArgmax): both must pick the same id for the same row.
//
// Thread-safety: device helpers; publish_part must be called by every
// thread of the block (it holds a barrier).
#pragma once

#include <cmath>

#include <climits>

namespace cellm::cuda {

struct ArgMax {
  float value;
  int index;
};

// "Larger value, then lower id": a total order on the candidates (a NaN
// value never wins), so their maximum does not depend on how they are cut.
__device__ __forceinline__ bool better(float v, int i, float best, int best_i) {
  return v > best || (v == best && i < best_i);
}

// Every lane gets the warp's preferred candidate.
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

// A row's argmax split over blocks, merged by the last block to finish
// (sample.cu's split argmax, gemv.cu's GemvArgmax). Thread 0 stores its
// block's candidate as part `part` of `parts` and counts it in; the block
// whose count came last (`*last`, shared, read by every thread after this
// returns) resets the counter for the next launch. Every thread calls it.
__device__ __forceinline__ void publish_part(ArgMax mine, ArgMax* partials, int part, int parts,
                                             int* counter, bool* last) {
  if (threadIdx.x == 0) {
    partials[part] = mine;
    __threadfence();  // the partial is visible device-wide before the count
    const int arrived = atomicAdd(counter, 1);
    *last = arrived == parts - 1;
    if (*last) atomicExch(counter, 0);  // ready for the next launch
  }
  __syncthreads();
}

// In the last block (publish_part): this thread's pick among parts
// threadIdx.x, threadIdx.x + threads, ... of the published partials.
__device__ __forceinline__ ArgMax scan_parts(const ArgMax* partials, int parts, int threads) {
  __threadfence();  // the other blocks' partials, released before their counts
  float best = -INFINITY;
  int best_i = INT_MAX;
  for (int q = static_cast<int>(threadIdx.x); q < parts; q += threads) {
    // Through L2: other blocks wrote them.
    const float value = __ldcg(&partials[q].value);
    const int index = __ldcg(&partials[q].index);
    if (better(value, index, best, best_i)) {
      best = value;
      best_i = index;
    }
  }
  return ArgMax{best, best_i};
}

}  // namespace cellm::cuda
