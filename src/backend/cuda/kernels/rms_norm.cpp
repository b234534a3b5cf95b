#include "backend/cuda/kernels/rms_norm.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status RmsNormParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(x, "rms_norm", "x"));
  CELLM_RETURN_IF_ERROR(require_ptr(weight, "rms_norm", "weight"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "rms_norm", "out"));
  if (rows < 0 || dim <= 0 || dim % 8 != 0) {
    return invalid_argument("cuda rms_norm: rows={} dim={} (dim must be a positive multiple of 8)",
                            rows, dim);
  }
  if (residual != nullptr && static_cast<const void*>(residual) == static_cast<const void*>(out)) {
    return invalid_argument("cuda rms_norm: `out` must not alias `residual`");
  }
  if (!(eps > 0.0f) || (weight_offset != 0.0f && weight_offset != 1.0f)) {
    return invalid_argument("cuda rms_norm: eps={} weight_offset={} (need eps > 0, offset 0 or 1)",
                            eps, weight_offset);
  }
  for (const void* ptr : {static_cast<const void*>(x), static_cast<const void*>(residual),
                          static_cast<const void*>(weight), static_cast<const void*>(out)}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "rms_norm", "x/residual/weight/out"));
  }
  return Status::ok();
}

}  // namespace cellm::cuda
