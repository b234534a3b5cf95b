#include "backend/cuda/kernels/soft_cap.cuh"

#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    soft_cap_kernel(const __grid_constant__ SoftCapParams p) {
  griddep_enter();
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.count;
       i += stride) {
    p.logits[i] = p.cap * tanhf(p.logits[i] / p.cap);
  }
}

}  // namespace

void launch_soft_cap(const SoftCapParams& params, cudaStream_t stream) {
  const long long blocks = std::min<long long>(ceil_div(params.count, kThreads), 4096);
  launch(soft_cap_kernel,
         LaunchConfig{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, params.pdl},
         params);
}

}  // namespace cellm::cuda
