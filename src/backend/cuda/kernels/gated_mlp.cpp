#include "backend/cuda/kernels/gated_mlp.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status GatedMlpParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(gate, "gated_mlp", "gate"));
  CELLM_RETURN_IF_ERROR(require_ptr(up, "gated_mlp", "up"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "gated_mlp", "out"));
  if (rows < 0 || rows > 65535 || inter <= 0 || inter % 8 != 0) {
    return invalid_argument(
        "cuda gated_mlp: rows={} inter={} (rows at most 65535, inter a positive multiple of 8)",
        rows, inter);
  }
  if (gate_stride < inter || up_stride < inter || out_stride < inter || gate_stride % 8 != 0 ||
      up_stride % 8 != 0 || out_stride % 8 != 0) {
    return invalid_argument(
        "cuda gated_mlp: strides gate={} up={} out={} must be >= inter={} and multiples of 8",
        gate_stride, up_stride, out_stride, inter);
  }
  for (const void* ptr : {static_cast<const void*>(gate), static_cast<const void*>(up),
                          static_cast<const void*>(out)}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "gated_mlp", "gate/up/out"));
  }
  return Status::ok();
}

}  // namespace cellm::cuda
