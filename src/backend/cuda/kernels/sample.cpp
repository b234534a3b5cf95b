#include "backend/cuda/kernels/sample.cuh"

#include "backend/cuda/kernels/validate_util.h"
#include "cellm/types.h"

namespace cellm::cuda {

static_assert(kSampleMaxSuppressed == static_cast<int>(kMaxSuppressedTokens),
              "the device suppressed-id row must hold a SamplingParams list");

Status SampleParams::validate_argmax() const {
  CELLM_RETURN_IF_ERROR(require_ptr(logits, "sample", "logits"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "sample", "out"));
  if (rows < 0 || vocab <= 0 || logits_stride < vocab) {
    return invalid_argument("cuda sample: rows={} vocab={} logits_stride={} (stride >= vocab > 0)",
                            rows, vocab, logits_stride);
  }
  // Half a workspace would silently fall back to one block a row.
  if ((argmax_partials == nullptr) != (argmax_counters == nullptr)) {
    return invalid_argument(
        "cuda sample: the split argmax needs both argmax_partials and argmax_counters (or "
        "neither, for one block a row)");
  }
  return Status::ok();
}

Status SampleParams::validate() const {
  CELLM_RETURN_IF_ERROR(validate_argmax());
  return require_ptr(params, "sample", "params");
}

}  // namespace cellm::cuda
