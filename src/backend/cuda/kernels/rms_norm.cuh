// RMSNorm over rows of bf16, optionally fused with the residual add that
// precedes it: h = x + residual (rounded to bf16 and written back to
// `residual`, as the residual stream is bf16), out = h / rms(h) * (w + offset).
// offset is 0 (Llama) or 1 (Gemma's (1 + w)). Arithmetic is float32 with one
// rounding at the output (Hugging Face rounds once more before the weight
// multiply; the difference is within bf16 tolerance).
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"
// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

struct RmsNormParams {
  const bf16* x = nullptr;       // [rows, dim]
  bf16* residual = nullptr;      // [rows, dim] in/out, or null for a plain norm
  const bf16* weight = nullptr;  // [dim]
  bf16* out = nullptr;           // [rows, dim]; may alias x, never residual
  std::int32_t rows = 0;
  std::int32_t dim = 0;  // multiple of 8
  float eps = 1e-6f;
  float weight_offset = 0.0f;  // 0 or 1

  // Programmatic dependent launch (launch.h): the kernel waits on the previous one itself.
  bool pdl = false;

  Status validate() const;
};

void launch_rms_norm(const RmsNormParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
