#include "backend/cuda/kernels/step_upload.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status StepUploadParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(src, "step_upload", "src"));
  CELLM_RETURN_IF_ERROR(require_ptr(dst, "step_upload", "dst"));
  if (width < 0 || arrays < 0 || width > pitch) {
    return invalid_argument(
        "cuda step_upload: width={} arrays={} pitch={} (need 0 <= width <= pitch, arrays >= 0)",
        width, arrays, pitch);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
