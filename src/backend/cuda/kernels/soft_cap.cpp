#include "backend/cuda/kernels/soft_cap.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status SoftCapParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(logits, "soft_cap", "logits"));
  if (count < 0 || !(cap > 0.0f)) {
    return invalid_argument("cuda soft_cap: count={} cap={} (cap must be positive)", count, cap);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
