#include "backend/cuda/kernels/gated_mlp.cuh"

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;

template <GateActivation kAct>
__global__ void __launch_bounds__(kThreads)
    gated_mlp_kernel(const __grid_constant__ GatedMlpParams p) {
  griddep_enter();
  const std::int64_t row = blockIdx.y;
  const int c = (blockIdx.x * kThreads + threadIdx.x) * 8;
  if (c >= p.inter) return;
  float g[8];
  float u[8];
  load8(p.gate + row * p.gate_stride + c, g);
  load8(p.up + row * p.up_stride + c, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    g[i] = (kAct == GateActivation::kSilu ? silu(g[i]) : gelu_tanh(g[i])) * u[i];
  }
  store8(p.out + row * p.out_stride + c, g);
}

}  // namespace

void launch_gated_mlp(const GatedMlpParams& params, cudaStream_t stream) {
  const LaunchConfig config{dim3(ceil_div(params.inter, kThreads * 8), params.rows), dim3(kThreads),
                            0, stream, params.pdl};
  switch (params.activation) {
    case GateActivation::kSilu:
      launch(gated_mlp_kernel<GateActivation::kSilu>, config, params);
      return;
    case GateActivation::kGeluTanh:
      launch(gated_mlp_kernel<GateActivation::kGeluTanh>, config, params);
      return;
  }
}

}  // namespace cellm::cuda
