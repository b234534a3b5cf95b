#include <cmath>

#include "backend/cuda/kernels/sample_penalize.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// The block's largest value; NaN never wins (as `y > max` on the host).
__device__ float block_max(float v, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, offset);
    if (other > v) v = other;
  }
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) {
    if (scratch[w] > m) m = scratch[w];
  }
  return m;
}

__global__ void __launch_bounds__(kThreads)
    sample_penalize_kernel(const __grid_constant__ PenalizeParams p) {
  __shared__ float scratch[kWarps];
  const int r = static_cast<int>(blockIdx.x);
  float* row = p.logits + static_cast<std::int64_t>(r) * p.logits_stride;
  const float repetition = p.row_params[r * kPenalizeRowParams + 0];
  const float temperature = p.row_params[r * kPenalizeRowParams + 1];
  const float threshold = p.row_params[r * kPenalizeRowParams + 2];
  const int begin = p.offsets[r];
  const int end = p.offsets[r + 1];
  const int4* entries = reinterpret_cast<const int4*>(p.entries);
  for (int e = begin + static_cast<int>(threadIdx.x); e < end; e += kThreads) {
    const int4 w = entries[e];
    float x;
    if ((w.w & kPenalizeSuppressed) != 0) {
      x = -INFINITY;
    } else {
      x = __fadd_rn(row[w.x], __int_as_float(w.y));
      if ((w.w & kPenalizeRepeated) != 0) {
        x = x > 0.0f ? __fdiv_rn(x, repetition) : __fmul_rn(x, repetition);
      }
      x = __fsub_rn(x, __int_as_float(w.z));
    }
    row[w.x] = x;
  }
  // min_p: uniform across the block, so every thread returns alike.
  if (!(temperature > 0.0f) || !(threshold > -INFINITY)) return;
  __syncthreads();  // the entries' writes are visible to the whole block
  float max_y = -INFINITY;
  for (int i = static_cast<int>(threadIdx.x); i < p.vocab; i += kThreads) {
    const float y = __fdiv_rn(row[i], temperature);
    if (y > max_y) max_y = y;
  }
  max_y = block_max(max_y, scratch);
  if (!isfinite(max_y)) return;
  for (int i = static_cast<int>(threadIdx.x); i < p.vocab; i += kThreads) {
    const float below = __fsub_rn(__fdiv_rn(row[i], temperature), max_y);
    if (!(below >= threshold)) row[i] = -INFINITY;
  }
}

}  // namespace

void launch_sample_penalize(const PenalizeParams& params, cudaStream_t stream) {
  launch(sample_penalize_kernel,
         LaunchConfig{dim3(static_cast<unsigned>(params.rows)), dim3(kThreads), 0, stream}, params);
}

}  // namespace cellm::cuda
