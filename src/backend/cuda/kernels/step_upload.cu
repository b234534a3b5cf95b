#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/step_upload.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;

// One entry a thread, so every read crosses PCIe at the same time: a step of
// any width costs one round trip.
__global__ void step_upload_kernel(const __grid_constant__ StepUploadParams p) {
  // The forward's first kernel may take its SM now; it waits for this grid.
  griddep_launch_dependents();
  const int i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= p.width * p.arrays) return;
  const int array = i / p.width;
  const std::int64_t at = static_cast<std::int64_t>(array) * p.pitch + (i - array * p.width);
  // Volatile: the host rewrites the buffer between replays of the graph, so
  // no cached copy of an earlier step may answer.
  p.dst[at] = __ldcv(p.src + at);
}

}  // namespace

void launch_step_upload(const StepUploadParams& params, cudaStream_t stream) {
  const int entries = params.width * params.arrays;
  if (entries <= 0) return;
  launch(step_upload_kernel,
         LaunchConfig{dim3(static_cast<unsigned>((entries + kThreads - 1) / kThreads)),
                      dim3(kThreads), 0, stream},
         params);
}

}  // namespace cellm::cuda
