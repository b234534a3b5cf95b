// The argmax's order, shared by the device sampler (sample_common.cuh) and
// the lm_head GEMV that takes the argmax of the logits it stores (gemv.cu,
// GemvArgmax): both must pick the same id for the same row.
//
// Thread-safety: device helpers over values.
#pragma once

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

}  // namespace cellm::cuda
