#include <cmath>

#include "backend/cuda/kernels/sample_mask.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kIdsPerThread = 4;  // consecutive ids: one word serves eight threads

__global__ void __launch_bounds__(kThreads)
    sample_mask_kernel(const __grid_constant__ MaskParams p) {
  const int r = static_cast<int>(blockIdx.y);
  if (p.active[r] == 0) return;
  const std::int64_t first =
      (static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kIdsPerThread;
  if (first >= p.vocab) return;
  float* row = p.logits + static_cast<std::int64_t>(r) * p.logits_stride;
  const std::uint32_t* words = p.words + static_cast<std::int64_t>(r) * p.words_per_row;
  // kIdsPerThread divides 32, so a thread's ids share one word.
  const std::uint32_t word = words[first / 32];
  const int shift = static_cast<int>(first % 32);
#pragma unroll
  for (int k = 0; k < kIdsPerThread; ++k) {
    const std::int64_t id = first + k;
    if (id < p.vocab && ((word >> (shift + k)) & 1u) == 0) row[id] = -INFINITY;
  }
}

}  // namespace

void launch_sample_mask(const MaskParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return;
  const std::int64_t per_block = static_cast<std::int64_t>(kThreads) * kIdsPerThread;
  const dim3 grid(static_cast<unsigned>((p.vocab + per_block - 1) / per_block),
                  static_cast<unsigned>(p.rows));
  launch(sample_mask_kernel, LaunchConfig{grid, dim3(kThreads), 0, stream}, p);
}

}  // namespace cellm::cuda
