#include "backend/cuda/kernels/kv_scatter.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status KvScatterParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(k, "kv_scatter", "k"));
  CELLM_RETURN_IF_ERROR(require_ptr(v, "kv_scatter", "v"));
  CELLM_RETURN_IF_ERROR(require_ptr(k_pool, "kv_scatter", "k_pool"));
  CELLM_RETURN_IF_ERROR(require_ptr(v_pool, "kv_scatter", "v_pool"));
  CELLM_RETURN_IF_ERROR(require_ptr(cells, "kv_scatter", "cells"));
  if (cell_table != nullptr) {
    CELLM_RETURN_IF_ERROR(require_ptr(seq_slots, "kv_scatter", "seq_slots"));
    CELLM_RETURN_IF_ERROR(require_ptr(positions, "kv_scatter", "positions"));
    if (max_seqs <= 0 || table_stride <= 0) {
      return invalid_argument(
          "cuda kv_scatter: cell table needs max_seqs={} and table_stride={} > 0", max_seqs,
          table_stride);
    }
  }
  if (num_tokens < 0 || num_kv_heads <= 0 || head_dim <= 0 || head_dim % 8 != 0 || max_cells <= 0) {
    return invalid_argument(
        "cuda kv_scatter: tokens={} kv_heads={} head_dim={} max_cells={} (head_dim must be a "
        "positive multiple of 8)",
        num_tokens, num_kv_heads, head_dim, max_cells);
  }
  const std::int64_t row = static_cast<std::int64_t>(num_kv_heads) * head_dim;
  if (k_stride < row || v_stride < row || k_stride % 8 != 0 || v_stride % 8 != 0) {
    return invalid_argument(
        "cuda kv_scatter: k_stride={} v_stride={} (need >= {} and multiples of 8)", k_stride,
        v_stride, row);
  }
  for (const void* ptr : {static_cast<const void*>(k), static_cast<const void*>(v),
                          static_cast<const void*>(k_pool), static_cast<const void*>(v_pool)}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "kv_scatter", "k/v/pools"));
  }
  return Status::ok();
}

}  // namespace cellm::cuda
