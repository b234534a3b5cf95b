// Dynamic per-token FP8 quantization of activation rows, the input side of
// the FP8 GEMMs (gemm_fp8.h): every row r of a[m, k] (bf16) becomes E4M3
// codes out[r, 0..k) and one float scale scales[r] with
//   amax      = max(max_c |a[r, c]|, kFp8MinAmax)
//   scales[r] = amax / 448                 (float division, rounded once)
//   out[r, c] = e4m3(a[r, c] * (448 / amax))
// e4m3 being the hardware's saturating conversion, round to nearest even
// (format/fp8.h's f32_to_e4m3 gives the same code for every float), so
// out[r, c] * scales[r] approximates a[r, c]. kFp8MinAmax keeps zero rows
// (codes 0, a tiny scale: their products stay 0) and rows too small for
// 448 / amax to be finite well defined; NaN inputs become NaN codes.
//
// One block per row reads the row twice (its maximum, then its codes); the
// second read comes from L2.
//
// Thread-safety: launch_quantize_fp8 is reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"

namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

// E4M3's largest finite value, and the smallest row maximum the scale takes
// (448 / 1e-30 is finite in float, and no activation this small matters).
inline constexpr float kFp8E4M3Max = 448.0f;
inline constexpr float kFp8MinAmax = 1e-30f;

struct QuantizeFp8Params {
  const bf16* a = nullptr;  // [m, lda], first k columns; 16-byte aligned
  std::int64_t lda = 0;     // a multiple of 8
  std::int32_t m = 0;
  std::int32_t k = 0;           // a multiple of 16 (cuBLASLt's FP8 operands)
  std::uint8_t* out = nullptr;  // [m, ldo] E4M3 codes; 16-byte aligned
  std::int64_t ldo = 0;         // a multiple of 16, >= k
  float* scales = nullptr;      // [m]
  // Programmatic dependent launch (launch.h): the kernel waits before it reads `a`.
  bool pdl = false;

  Status validate() const;
};

void launch_quantize_fp8(const QuantizeFp8Params& params, cudaStream_t stream);

}  // namespace cellm::cuda
