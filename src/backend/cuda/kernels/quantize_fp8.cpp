#include "backend/cuda/kernels/quantize_fp8.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status QuantizeFp8Params::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(a, "quantize_fp8", "a"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "quantize_fp8", "out"));
  CELLM_RETURN_IF_ERROR(require_ptr(scales, "quantize_fp8", "scales"));
  if (m <= 0 || k <= 0 || k % 16 != 0 || lda < k || lda % 8 != 0 || ldo < k || ldo % 16 != 0) {
    return invalid_argument(
        "cuda quantize_fp8: m={} k={} lda={} ldo={} (need positive m, k a multiple of 16, "
        "lda >= k a multiple of 8, ldo >= k a multiple of 16)",
        m, k, lda, ldo);
  }
  CELLM_RETURN_IF_ERROR(require_aligned16(a, "quantize_fp8", "a"));
  CELLM_RETURN_IF_ERROR(require_aligned16(out, "quantize_fp8", "out"));
  return Status::ok();
}

}  // namespace cellm::cuda
