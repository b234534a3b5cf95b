#include "backend/cuda/kernels/rope.cuh"

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPairs = 256;

__global__ void __launch_bounds__(kThreads) rope_kernel(const __grid_constant__ RopeParams p) {
  __shared__ float cos_s[kMaxPairs];
  __shared__ float sin_s[kMaxPairs];
  const std::int64_t token = blockIdx.x;
  const int half = p.rotary_dim / 2;
  const float position = static_cast<float>(p.positions[token]);
  for (int i = threadIdx.x; i < half; i += kThreads) {
    // Full-precision sincosf: angles reach 1e5 radians at long contexts.
    sincosf(position * p.inv_freq[i], &sin_s[i], &cos_s[i]);
  }
  __syncthreads();
  const int heads = p.num_heads + p.num_kv_heads;
  for (int item = threadIdx.x; item < heads * half; item += kThreads) {
    const int head = item / half;
    const int i = item % half;
    bf16* vec =
        head < p.num_heads
            ? p.q + token * p.q_stride + static_cast<std::int64_t>(head) * p.head_dim
            : p.k + token * p.k_stride + static_cast<std::int64_t>(head - p.num_heads) * p.head_dim;
    const float x1 = __bfloat162float(vec[i]);
    const float x2 = __bfloat162float(vec[i + half]);
    vec[i] = __float2bfloat16_rn(x1 * cos_s[i] - x2 * sin_s[i]);
    vec[i + half] = __float2bfloat16_rn(x2 * cos_s[i] + x1 * sin_s[i]);
  }
}

}  // namespace

void launch_rope(const RopeParams& params, cudaStream_t stream) {
  launch(rope_kernel, LaunchConfig{dim3(params.num_tokens), dim3(kThreads), 0, stream}, params);
}

}  // namespace cellm::cuda
