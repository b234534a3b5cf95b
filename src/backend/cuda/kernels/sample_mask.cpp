#include "backend/cuda/kernels/sample_mask.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status MaskParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(logits, "sample_mask", "logits"));
  CELLM_RETURN_IF_ERROR(require_ptr(words, "sample_mask", "words"));
  CELLM_RETURN_IF_ERROR(require_ptr(active, "sample_mask", "active"));
  if (rows < 0 || vocab <= 0 || logits_stride < vocab ||
      static_cast<std::int64_t>(words_per_row) * 32 < vocab) {
    return invalid_argument(
        "cuda sample_mask: rows={} vocab={} logits_stride={} words_per_row={} (stride >= vocab "
        "> 0, 32 * words_per_row >= vocab)",
        rows, vocab, logits_stride, words_per_row);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
