#include "backend/cuda/kernels/rms_norm.cuh"

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const __grid_constant__ RmsNormParams p) {
  griddep_enter();
  __shared__ float scratch[32];
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * p.dim;
  const bf16* x = p.x + row;
  bf16* residual = p.residual != nullptr ? p.residual + row : nullptr;
  float sum_sq = 0.0f;
  for (int c = threadIdx.x * 8; c < p.dim; c += kThreads * 8) {
    float h[8];
    load8(x + c, h);
    if (residual != nullptr) {
      float r[8];
      load8(residual + c, r);
#pragma unroll
      for (int i = 0; i < 8; ++i) h[i] = __bfloat162float(__float2bfloat16_rn(h[i] + r[i]));
      store8(residual + c, h);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) sum_sq += h[i] * h[i];
  }
  const float total = block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(p.dim) + p.eps);
  // Each thread re-reads exactly the elements it wrote above, so no barrier is
  // needed between the residual write-back and this pass.
  const bf16* h_src = residual != nullptr ? residual : x;
  bf16* out = p.out + row;
  for (int c = threadIdx.x * 8; c < p.dim; c += kThreads * 8) {
    float h[8];
    float w[8];
    load8(h_src + c, h);
    load8(p.weight + c, w);
#pragma unroll
    for (int i = 0; i < 8; ++i) h[i] = h[i] * inv_rms * (w[i] + p.weight_offset);
    store8(out + c, h);
  }
}

}  // namespace

void launch_rms_norm(const RmsNormParams& params, cudaStream_t stream) {
  launch(rms_norm_kernel, LaunchConfig{dim3(params.rows), dim3(kThreads), 0, stream, params.pdl}, params);
}

}  // namespace cellm::cuda
