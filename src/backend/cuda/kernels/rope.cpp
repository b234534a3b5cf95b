#include "backend/cuda/kernels/rope.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status RopeParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(q, "rope", "q"));
  CELLM_RETURN_IF_ERROR(require_ptr(k, "rope", "k"));
  CELLM_RETURN_IF_ERROR(require_ptr(positions, "rope", "positions"));
  CELLM_RETURN_IF_ERROR(require_ptr(inv_freq, "rope", "inv_freq"));
  if (num_tokens < 0 || num_heads <= 0 || num_kv_heads <= 0 || head_dim <= 0 || rotary_dim <= 0 ||
      rotary_dim % 2 != 0 || rotary_dim > head_dim || rotary_dim > 512) {
    return invalid_argument(
        "cuda rope: tokens={} heads={} kv_heads={} head_dim={} rotary_dim={} (rotary_dim must be "
        "even, positive and at most head_dim and 512)",
        num_tokens, num_heads, num_kv_heads, head_dim, rotary_dim);
  }
  if (q_stride < static_cast<std::int64_t>(num_heads) * head_dim ||
      k_stride < static_cast<std::int64_t>(num_kv_heads) * head_dim) {
    return invalid_argument("cuda rope: q_stride={} k_stride={} do not hold the heads", q_stride,
                            k_stride);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
