#include "backend/cuda/kernels/decode_stream.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {
Status DecodeStreamParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(layers, "decode stream", "layers"));
  for (const void* ptr : {static_cast<const void*>(x), static_cast<const void*>(qkv),
                          static_cast<const void*>(attn), static_cast<const void*>(gu),
                          static_cast<const void*>(partials), static_cast<const void*>(sync),
                          static_cast<const void*>(position), static_cast<const void*>(slot),
                          static_cast<const void*>(cell), static_cast<const void*>(kv),
                          static_cast<const void*>(cell_table)}) {
    CELLM_RETURN_IF_ERROR(require_ptr(ptr, "decode stream", "buffer"));
  }
  const char* why = decode_stream_unsupported(hidden, num_heads * head_dim, inter, num_heads,
                                              num_kv_heads, head_dim);
  if (*why != '\0') return not_supported("cuda decode stream: {}", why);
  if (num_layers <= 0 || max_cells <= 0 || max_seqs <= 0 || table_stride <= 0) {
    return invalid_argument(
        "cuda decode stream: layers={} max_cells={} max_seqs={} table_stride={} must be positive",
        num_layers, max_cells, max_seqs, table_stride);
  }
  if (grid <= 0 || stages <= 0 || smem_bytes <= 0) {
    return invalid_argument(
        "cuda decode stream: grid={} stages={} smem={} (take them from decode_stream_layout)",
        grid, stages, smem_bytes);
  }
  if (!(scale > 0.0f) || !(norm_eps > 0.0f) ||
      (norm_weight_offset != 0.0f && norm_weight_offset != 1.0f)) {
    return invalid_argument("cuda decode stream: scale={} eps={} offset={}", scale, norm_eps,
                            norm_weight_offset);
  }
  for (const void* ptr : {static_cast<const void*>(x), static_cast<const void*>(attn),
                          static_cast<const void*>(gu), static_cast<const void*>(kv)}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "decode stream", "x/attn/gu/kv"));
  }
  return Status::ok();
}

}  // namespace cellm::cuda
