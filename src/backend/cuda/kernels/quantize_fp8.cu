#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/quantize_fp8.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Eight bf16 in 16 bytes, widened exactly to float.
__device__ __forceinline__ void load8(const bf16* at, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(at);
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ float block_max(float v, float* shared) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  const int warp = static_cast<int>(threadIdx.x) / 32;
  if (threadIdx.x % 32 == 0) shared[warp] = v;
  __syncthreads();
  float m = shared[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, shared[w]);
  return m;
}

__global__ void __launch_bounds__(kThreads)
    quantize_fp8_kernel(const __grid_constant__ QuantizeFp8Params p) {
  __shared__ float partial[kWarps];
  griddep_enter();
  const std::int64_t row = blockIdx.x;
  const bf16* a = p.a + row * p.lda;
  const int groups = p.k / 8;
  float amax = 0.0f;
  for (int g = static_cast<int>(threadIdx.x); g < groups; g += kThreads) {
    float v[8];
    load8(a + g * 8, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  }
  amax = fmaxf(block_max(amax, partial), kFp8MinAmax);
  // Both divisions rounded once (IEEE division: the build keeps -prec-div),
  // as the host reference computes them.
  const float inv = __fdiv_rn(kFp8E4M3Max, amax);
  if (threadIdx.x == 0) p.scales[row] = __fdiv_rn(amax, kFp8E4M3Max);
  std::uint8_t* out = p.out + row * p.ldo;
  for (int g = static_cast<int>(threadIdx.x); g < groups; g += kThreads) {
    float v[8];
    load8(a + g * 8, v);
    uint2 packed;
    auto* pairs = reinterpret_cast<__nv_fp8x2_storage_t*>(&packed);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      pairs[i] = __nv_cvt_float2_to_fp8x2(
          make_float2(__fmul_rn(v[2 * i], inv), __fmul_rn(v[2 * i + 1], inv)), __NV_SATFINITE,
          __NV_E4M3);
    }
    *reinterpret_cast<uint2*>(out + g * 8) = packed;
  }
}

}  // namespace

void launch_quantize_fp8(const QuantizeFp8Params& params, cudaStream_t stream) {
  launch(quantize_fp8_kernel,
         LaunchConfig{dim3(static_cast<unsigned>(params.m)), dim3(kThreads), 0, stream, params.pdl},
         params);
}

}  // namespace cellm::cuda
