#include "backend/cuda/kernels/sample_logprobs.cuh"

#include "backend/cuda/kernels/validate_util.h"
#include "cellm/types.h"

namespace cellm::cuda {

static_assert(kLogprobsTop == kMaxTopLogprobs, "the device top list must hold a policy's count");
static_assert(kLogprobsMaxSuppressed == static_cast<int>(kMaxSuppressedTokens),
              "the device suppressed-id row must hold a SamplingParams list");

Status LogprobsParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(logits, "sample_logprobs", "logits"));
  CELLM_RETURN_IF_ERROR(require_ptr(params, "sample_logprobs", "params"));
  CELLM_RETURN_IF_ERROR(require_ptr(tokens, "sample_logprobs", "tokens"));
  CELLM_RETURN_IF_ERROR(require_ptr(values, "sample_logprobs", "values"));
  CELLM_RETURN_IF_ERROR(require_ptr(ids, "sample_logprobs", "ids"));
  if (rows < 0 || vocab <= 0 || logits_stride < vocab) {
    return invalid_argument(
        "cuda sample_logprobs: rows={} vocab={} logits_stride={} (stride >= vocab > 0)", rows,
        vocab, logits_stride);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
