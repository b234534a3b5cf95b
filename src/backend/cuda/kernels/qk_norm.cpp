#include "backend/cuda/kernels/qk_norm.cuh"

#include "backend/cuda/dispatch.h"
#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status QkNormParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(q, "qk_norm", "q"));
  CELLM_RETURN_IF_ERROR(require_ptr(k, "qk_norm", "k"));
  CELLM_RETURN_IF_ERROR(require_ptr(q_weight, "qk_norm", "q_weight"));
  CELLM_RETURN_IF_ERROR(require_ptr(k_weight, "qk_norm", "k_weight"));
  CELLM_RETURN_IF_ERROR(check_head_dim(head_dim, "qk_norm"));
  if (num_tokens < 0 || num_heads <= 0 || num_kv_heads <= 0 ||
      q_stride < static_cast<std::int64_t>(num_heads) * head_dim ||
      k_stride < static_cast<std::int64_t>(num_kv_heads) * head_dim || q_stride % 8 != 0 ||
      k_stride % 8 != 0) {
    return invalid_argument(
        "cuda qk_norm: tokens={} heads={} kv_heads={} head_dim={} q_stride={} k_stride={} "
        "(strides must hold the heads and be multiples of 8)",
        num_tokens, num_heads, num_kv_heads, head_dim, q_stride, k_stride);
  }
  if (!(eps > 0.0f) || (weight_offset != 0.0f && weight_offset != 1.0f)) {
    return invalid_argument("cuda qk_norm: eps={} weight_offset={}", eps, weight_offset);
  }
  for (const void* ptr : {static_cast<const void*>(q), static_cast<const void*>(k),
                          static_cast<const void*>(q_weight), static_cast<const void*>(k_weight)}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "qk_norm", "q/k/weights"));
  }
  return Status::ok();
}

}  // namespace cellm::cuda
