// Skinny GEMM for decode widths: out[m, n] = a[m, k] @ w[n, k]^T (+ bias),
// m <= kGemvMaxRows, bf16 operands, float accumulation, bf16 or float output.
// Weight-bandwidth bound: a block of four warps owns four output columns and
// splits k between its warps (16-byte loads, two steps in flight per lane,
// weights streamed past L1), so even narrow layers launch hundreds of blocks
// and no split-K reduction kernel is needed. The warps' partial sums are
// added in a fixed order: the same inputs give the same bits on every run.
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

inline constexpr int kGemvMaxRows = 8;

struct GemvParams {
  const bf16* a = nullptr;     // [m, lda], first k columns
  const bf16* w = nullptr;     // [n, ldw], first k columns (PyTorch Linear layout)
  const bf16* bias = nullptr;  // [n] or null
  void* out = nullptr;         // [m, ldc]: bf16, or float when out_f32
  bool out_f32 = false;
  std::int32_t m = 0;  // 1..kGemvMaxRows
  std::int32_t n = 0;
  std::int32_t k = 0;  // multiple of 8
  std::int64_t lda = 0;
  std::int64_t ldw = 0;
  std::int64_t ldc = 0;

  Status validate() const;
};

void launch_gemv(const GemvParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
