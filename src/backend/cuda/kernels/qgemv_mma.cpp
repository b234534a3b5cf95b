// Host checks of the tensor-core quantized GEMV (qgemv_mma.cuh): its limits
// and the forward's choice of kernel (a .cpp: the Status text needs fmt).
#include "backend/cuda/kernels/qgemv_mma.cuh"

#include "cellm/status.h"

namespace cellm::cuda {

Status validate_qgemv_mma(const QGemvParams& params) {
  CELLM_RETURN_IF_ERROR(params.validate());
  if (params.k > kQGemvMmaMaxK) {
    return invalid_argument(
        "cuda qgemv_mma: k={} is longer than the {} the kernel stages (the CUDA-core kernel "
        "takes it)",
        params.k, kQGemvMmaMaxK);
  }
  return Status::ok();
}

bool qgemv_on_tensor_cores(const QGemvParams& params) {
  return params.m >= 2 && validate_qgemv_mma(params).is_ok();
}

}  // namespace cellm::cuda
