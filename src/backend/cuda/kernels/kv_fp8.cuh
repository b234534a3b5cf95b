// Device conversions of the FP8 K/V pools (KvDtype::kFp8, cuda_types.h):
// what the writers (kv_scatter, rope_scatter, the q/k/v GEMV's rope
// epilogue) store and what the attention kernels read back.
//
// Encoding takes values already rounded to bf16 (what a bf16 pool would
// hold) and converts them with the hardware's cvt.rn.satfinite to E4M3:
// nearest even, +-448 beyond the range (infinities included), NaN kept.
// format/fp8.h's f32_to_e4m3 gives the same code for every finite float, so
// a host test can check a writer bit for bit. Decoding is exact (every E4M3
// value is a bf16 value): E4M3 pairs to f16 pairs (exact), then through
// float to bf16 (exact).
//
// Also where the attention kernels' cp.async stages of K and V lie
// (KvStages): bf16 tiles, or with FP8 pools their codes.
//
// Thread-safety: device code; each call touches only what it names.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"

namespace cellm::cuda {

// Two bf16-exact floats as two E4M3 codes (a in the low byte).
__device__ __forceinline__ std::uint16_t encode_e4m3x2(float a, float b) {
  return static_cast<std::uint16_t>(
      __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ fp8_e4m3 encode_e4m3(float x) {
  return static_cast<fp8_e4m3>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// Eight bf16 (16 bytes) as eight E4M3 codes (8 bytes), element i in byte i.
__device__ __forceinline__ uint2 encode_e4m3x8(const uint4& bf16x8) {
  const unsigned words[4] = {bf16x8.x, bf16x8.y, bf16x8.z, bf16x8.w};
  std::uint32_t pairs[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // A bf16 is the high half of its float: exact widening.
    pairs[i] =
        encode_e4m3x2(__uint_as_float(words[i] << 16), __uint_as_float(words[i] & 0xffff0000u));
  }
  return make_uint2(pairs[0] | (pairs[1] << 16), pairs[2] | (pairs[3] << 16));
}

// Eight floats rounded to bf16 (as store8 rounds them) and then to E4M3.
__device__ __forceinline__ void store8_e4m3(fp8_e4m3* dst, const float (&in)[8]) {
  uint4 rounded;
  auto* pairs = reinterpret_cast<__nv_bfloat162*>(&rounded);
#pragma unroll
  for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  *reinterpret_cast<uint2*>(dst) = encode_e4m3x8(rounded);
}

// Two E4M3 codes (the low 16 bits, element 0 low) as a bf16 pair (element 0
// in the low half), exactly.
__device__ __forceinline__ std::uint32_t decode_e4m3x2(std::uint32_t codes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  const __nv_bfloat162 b = __float22bfloat162_rn(f);
  return *reinterpret_cast<const std::uint32_t*>(&b);
}

// Eight E4M3 codes (8 bytes) as eight bf16 (16 bytes), element i to element i.
__device__ __forceinline__ uint4 decode_e4m3x8(const uint2& codes) {
  return make_uint4(decode_e4m3x2(codes.x), decode_e4m3x2(codes.x >> 16), decode_e4m3x2(codes.y),
                    decode_e4m3x2(codes.y >> 16));
}

// Rows of E4M3 codes in shared memory ([rows, kWidth] bytes, unpadded) into
// bf16 rows ([rows, ld] elements, the first kWidth of each), 8 elements a
// step by the `threads` threads numbered `index` (a warp or a block).
// Neighbouring threads read neighbouring 8 bytes and write neighbouring 16.
template <int kWidth, int kRows, int kThreads>
__device__ __forceinline__ void decode_e4m3_rows(const fp8_e4m3* src, bf16* dst, int ld,
                                                 int index) {
  static_assert(kWidth % 8 == 0 && (kRows * kWidth / 8) % kThreads == 0);
  constexpr int kPieces = kWidth / 8;  // 8-byte pieces a row
  // Two pieces in flight: fully unrolled, 256-wide heads' prefill kernel
  // (already at 250 registers) spilled, and four spilled 64-wide heads' held
  // to 128 registers.
#pragma unroll 2
  for (int j = 0; j < kRows * kPieces / kThreads; ++j) {
    const int piece = index + j * kThreads;
    const int row = piece / kPieces;
    const int col = (piece % kPieces) * 8;
    const uint2 codes = *reinterpret_cast<const uint2*>(src + row * kWidth + col);
    *reinterpret_cast<uint4*>(dst + row * ld + col) = decode_e4m3x8(codes);
  }
}

// The cp.async stages of an attention kernel's K and V tiles in its dynamic
// shared memory `smem`, as its Layout places them: with bf16 pools stage s
// is the s-th bf16 tile of kTileKeys rows of kLd elements from Layout::kK
// (kV); with FP8 pools (kFp8) it is the s-th Layout::kStageBytes of E4M3
// codes from Layout::kK8 (kV8), which the kernel widens into the bf16 tile
// at kK (kV) for its mma. Decode and prefill attention differ only in
// Layout, tile keys and row. In this form both kernels' bf16 code and the
// FP8 prefill's are what their inline lambdas compiled to (sm_90 cubins
// compared); the FP8 decode kernels differ (address arithmetic hoisted out
// of the widening loop; equal or fewer registers). Passing `smem` to static
// functions instead cost the bf16 prefill kernels two registers.
template <class Layout, bool kFp8, int kTileKeys, int kLd>
struct KvStages {
  unsigned char* smem;

  __device__ __forceinline__ auto k(int stage) const { return at(Layout::kK, Layout::kK8, stage); }
  __device__ __forceinline__ auto v(int stage) const { return at(Layout::kV, Layout::kV8, stage); }

 private:
  __device__ __forceinline__ auto at(std::size_t tiles, std::size_t codes, int stage) const {
    if constexpr (kFp8) {
      return reinterpret_cast<fp8_e4m3*>(smem + codes) + stage * Layout::kStageBytes;
    } else {
      return reinterpret_cast<bf16*>(smem + tiles) + stage * kTileKeys * kLd;
    }
  }
};

}  // namespace cellm::cuda
