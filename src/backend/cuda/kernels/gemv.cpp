#include "backend/cuda/kernels/gemv.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status GemvParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(a, "gemv", "a"));
  CELLM_RETURN_IF_ERROR(require_ptr(w, "gemv", "w"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "gemv", "out"));
  if (m < 1 || m > kGemvMaxRows || n <= 0 || k <= 0 || k % 8 != 0) {
    return invalid_argument(
        "cuda gemv: m={} n={} k={} (need 1 <= m <= {}, n > 0, k a positive multiple of 8; use "
        "the cuBLASLt GEMM otherwise)",
        m, n, k, kGemvMaxRows);
  }
  if (n > 65535LL * 65535LL || lda < k || ldw < k || ldc < n || lda % 8 != 0 || ldw % 8 != 0) {
    return invalid_argument(
        "cuda gemv: lda={} ldw={} ldc={} for k={} n={} (need lda, ldw >= k and multiples of 8, "
        "ldc >= n)",
        lda, ldw, ldc, k, n);
  }
  CELLM_RETURN_IF_ERROR(require_aligned16(a, "gemv", "a"));
  CELLM_RETURN_IF_ERROR(require_aligned16(w, "gemv", "w"));
  return Status::ok();
}

}  // namespace cellm::cuda
