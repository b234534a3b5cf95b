#include "backend/cuda/kernels/sample_penalize.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status PenalizeParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(logits, "sample_penalize", "logits"));
  CELLM_RETURN_IF_ERROR(require_ptr(row_params, "sample_penalize", "row_params"));
  CELLM_RETURN_IF_ERROR(require_ptr(offsets, "sample_penalize", "offsets"));
  if (rows < 0 || vocab <= 0 || logits_stride < vocab) {
    return invalid_argument(
        "cuda sample_penalize: rows={} vocab={} logits_stride={} (stride >= vocab > 0)", rows,
        vocab, logits_stride);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
