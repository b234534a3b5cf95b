#include <cuda_fp8.h>

#include "backend/cuda/device_weights_fill.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

__device__ __forceinline__ std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(bf16* data, std::size_t count, float bound,
                                    std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const std::uint64_t r = mix(seed ^ mix(i));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    data[i] = __float2bfloat16((2.0f * u - 1.0f) * bound);
  }
}

__global__ void fill_fp8_kernel(std::uint8_t* codes, std::size_t count, std::uint64_t seed) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const std::uint64_t r = mix(seed ^ mix(i));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    codes[i] = __nv_cvt_float_to_fp8((2.0f * u - 1.0f) * 448.0f, __NV_SATFINITE, __NV_E4M3);
  }
}

__global__ void fill_constant_kernel(bf16* data, std::size_t count, float value) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    data[i] = __float2bfloat16(value);
  }
}

unsigned grid_for(std::size_t count) {
  const std::size_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 65536 ? (blocks == 0 ? 1 : blocks) : 65536);
}

}  // namespace

void launch_fill_uniform(bf16* data, std::size_t count, float bound, std::uint64_t seed,
                         cudaStream_t stream) {
  if (count == 0) return;
  launch(fill_uniform_kernel, LaunchConfig{dim3(grid_for(count)), dim3(256), 0, stream}, data,
         count, bound, seed);
}

void launch_fill_fp8(std::uint8_t* codes, std::size_t count, std::uint64_t seed,
                     cudaStream_t stream) {
  if (count == 0) return;
  launch(fill_fp8_kernel, LaunchConfig{dim3(grid_for(count)), dim3(256), 0, stream}, codes, count,
         seed);
}

void launch_fill_constant(bf16* data, std::size_t count, float value, cudaStream_t stream) {
  if (count == 0) return;
  launch(fill_constant_kernel, LaunchConfig{dim3(grid_for(count)), dim3(256), 0, stream}, data,
         count, value);
}

}  // namespace cellm::cuda
