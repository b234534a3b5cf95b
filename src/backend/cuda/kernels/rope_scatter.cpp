#include "backend/cuda/kernels/rope_scatter.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

bool rope_scatter_supported(std::int32_t head_dim, std::int32_t rotary_dim) {
  return head_dim > 0 && head_dim % 8 == 0 && rotary_dim > 0 && rotary_dim % 16 == 0 &&
         rotary_dim <= head_dim;
}

Status RopeScatterParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(q, "rope_scatter", "q"));
  CELLM_RETURN_IF_ERROR(require_ptr(k, "rope_scatter", "k"));
  CELLM_RETURN_IF_ERROR(require_ptr(v, "rope_scatter", "v"));
  CELLM_RETURN_IF_ERROR(require_ptr(k_pool, "rope_scatter", "k_pool"));
  CELLM_RETURN_IF_ERROR(require_ptr(v_pool, "rope_scatter", "v_pool"));
  CELLM_RETURN_IF_ERROR(require_ptr(cells, "rope_scatter", "cells"));
  CELLM_RETURN_IF_ERROR(require_ptr(positions, "rope_scatter", "positions"));
  CELLM_RETURN_IF_ERROR(require_ptr(inv_freq, "rope_scatter", "inv_freq"));
  if (cell_table != nullptr) {
    CELLM_RETURN_IF_ERROR(require_ptr(seq_slots, "rope_scatter", "seq_slots"));
    if (max_seqs <= 0 || table_stride <= 0) {
      return invalid_argument(
          "cuda rope_scatter: a cell table needs max_seqs={} and table_stride={} > 0", max_seqs,
          table_stride);
    }
  }
  if (num_tokens < 0 || num_tokens > 2147483647 || num_heads <= 0 || num_kv_heads <= 0 ||
      max_cells <= 0) {
    return invalid_argument(
        "cuda rope_scatter: tokens={} heads={} kv_heads={} max_cells={} (need positive sizes)",
        num_tokens, num_heads, num_kv_heads, max_cells);
  }
  if (!rope_scatter_supported(head_dim, rotary_dim)) {
    return not_supported(
        "cuda rope_scatter: head_dim={} rotary_dim={} (need head_dim a multiple of 8 and "
        "rotary_dim a multiple of 16 up to head_dim; use rope + kv_scatter)",
        head_dim, rotary_dim);
  }
  const std::int64_t q_row = static_cast<std::int64_t>(num_heads) * head_dim;
  const std::int64_t kv_row = static_cast<std::int64_t>(num_kv_heads) * head_dim;
  if (q_stride < q_row || k_stride < kv_row || v_stride < kv_row || q_stride % 8 != 0 ||
      k_stride % 8 != 0 || v_stride % 8 != 0) {
    return invalid_argument(
        "cuda rope_scatter: q_stride={} k_stride={} v_stride={} (need >= {} / {} and multiples "
        "of 8)",
        q_stride, k_stride, v_stride, q_row, kv_row);
  }
  if ((q_row + 2 * kv_row) / 8 > 65535LL * 64) {
    return invalid_argument("cuda rope_scatter: {} heads of {} exceed the grid", num_heads,
                            head_dim);
  }
  for (const void* ptr :
       {static_cast<const void*>(q), static_cast<const void*>(k), static_cast<const void*>(v),
        static_cast<const void*>(k_pool), static_cast<const void*>(v_pool)}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "rope_scatter", "q/k/v/pools"));
  }
  return Status::ok();
}

}  // namespace cellm::cuda
