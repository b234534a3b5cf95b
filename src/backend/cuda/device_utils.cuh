// Device-side helpers shared by the kernels: bf16 vector loads and stores,
// warp reductions and deterministic block reductions (a fixed tree, so the
// same inputs give the same bits on every run and every launch shape of the
// same block size).
//
// Thread-safety: device code; block helpers need every thread of the block.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"

namespace cellm::cuda {

// Eight bf16 values moved as one 16-byte access.
struct alignas(16) Bf16x8 {
  bf16 v[8];
};

// Eight bf16 values already loaded as 16 bytes, widened exactly to float
// (a bf16 is the high half of its float: a shift or a mask per value).
__device__ __forceinline__ void unpack8(const uint4& raw, float (&out)[8]) {
  const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void load8(const bf16* src, float (&out)[8]) {
  unpack8(*reinterpret_cast<const uint4*>(src), out);
}

__device__ __forceinline__ void store8(bf16* dst, const float (&in)[8]) {
  uint4 raw;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    pairs[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  }
  *reinterpret_cast<uint4*>(dst) = raw;
}

// Programmatic dependent launch (launch.h's LaunchConfig::pdl). A kernel
// launched with pdl may start while the kernel before it is still running:
// it must call griddep_wait() in every block before it reads or writes
// anything an earlier kernel touches (weights are fine to read before).
// The wait returns once every earlier kernel has finished and its writes are
// visible; because every pdl kernel waits, that holds transitively down the
// stream. griddep_launch_dependents() lets the next pdl kernel start its own
// prologue; it does not make this kernel's writes visible early. Both are
// no-ops when the kernel was launched without pdl.
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Both, at the top of a kernel that reads nothing before its wait.
__device__ __forceinline__ void griddep_enter() {
  griddep_wait();
  griddep_launch_dependents();
}

__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}

__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16_rn(x));
}

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// Sum over the block; every thread gets the result. `scratch` holds 32 floats.
// Deterministic: lanes reduce by xor-butterfly, then every warp reduces the
// per-warp partials with the same butterfly (no serial loop over warps).
__device__ __forceinline__ float block_sum(float value, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warps = (blockDim.x + 31) >> 5;
  value = warp_sum(value);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[threadIdx.x >> 5] = value;
  __syncthreads();
  const float total = warp_sum(lane < warps ? scratch[lane] : 0.0f);
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_max(float value, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warps = (blockDim.x + 31) >> 5;
  value = warp_max(value);
  __syncthreads();
  if (lane == 0) scratch[threadIdx.x >> 5] = value;
  __syncthreads();
  const float result = warp_max(lane < warps ? scratch[lane] : -INFINITY);
  __syncthreads();
  return result;
}

}  // namespace cellm::cuda
