#include "backend/cuda/kernels/attention.cuh"

#include <algorithm>

#include "backend/cuda/dispatch.h"
#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status AttentionParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(q, "attention", "q"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "attention", "out"));
  CELLM_RETURN_IF_ERROR(require_ptr(k_pool, "attention", "k_pool"));
  CELLM_RETURN_IF_ERROR(require_ptr(v_pool, "attention", "v_pool"));
  CELLM_RETURN_IF_ERROR(require_ptr(cell_table, "attention", "cell_table"));
  CELLM_RETURN_IF_ERROR(require_ptr(seq_slots, "attention", "seq_slots"));
  CELLM_RETURN_IF_ERROR(require_ptr(positions, "attention", "positions"));
  CELLM_RETURN_IF_ERROR(check_head_dim(head_dim, "attention"));
  if (num_tokens < 0 || num_tokens > 65535 * 64 || num_heads <= 0 || num_kv_heads <= 0 ||
      num_heads % num_kv_heads != 0 || num_heads > 65535) {
    return invalid_argument(
        "cuda attention: tokens={} heads={} kv_heads={} (heads must be a multiple of kv_heads)",
        num_tokens, num_heads, num_kv_heads);
  }
  if (max_cells <= 0 || max_seqs <= 0 || table_stride <= 0 || window < 0) {
    return invalid_argument(
        "cuda attention: max_cells={} max_seqs={} table_stride={} window={} (sizes must be "
        "positive, window >= 0)",
        max_cells, max_seqs, table_stride, window);
  }
  if (q_stride < static_cast<std::int64_t>(num_heads) * head_dim ||
      out_stride < static_cast<std::int64_t>(num_heads) * head_dim || q_stride % 8 != 0) {
    return invalid_argument(
        "cuda attention: q_stride={} out_stride={} must hold {} heads of {} (q_stride a multiple "
        "of 8)",
        q_stride, out_stride, num_heads, head_dim);
  }
  if (!(scale > 0.0f) || softcap < 0.0f) {
    return invalid_argument("cuda attention: scale={} softcap={} (scale > 0, softcap >= 0)", scale,
                            softcap);
  }
  if (kv_dtype == KvDtype::kFp8 && head_dim % 16 != 0) {
    return not_supported(
        "cuda attention: head_dim={} with FP8 K/V (the tiles are copied 16 codes at a time: need "
        "a multiple of 16)",
        head_dim);
  }
  for (const void* ptr : {static_cast<const void*>(q), k_pool, v_pool}) {
    CELLM_RETURN_IF_ERROR(require_aligned16(ptr, "attention", "q/k_pool/v_pool"));
  }
  return Status::ok();
}

Status AttentionParams::validate_decode() const {
  CELLM_RETURN_IF_ERROR(validate());
  if (num_tokens > 2147483647 || num_splits < 1 || num_splits > kAttentionMaxSplits) {
    return invalid_argument("cuda attention decode: num_splits={} (need 1..{})", num_splits,
                            kAttentionMaxSplits);
  }
  if (num_splits > 1 && workspace == nullptr) {
    return invalid_argument(
        "cuda attention decode: {} splits need a workspace of attention_decode_workspace_bytes",
        num_splits);
  }
  return Status::ok();
}

Status AttentionParams::validate_decode_v2() const {
  CELLM_RETURN_IF_ERROR(validate_decode());
  if (split_min_keys < 1) {
    return invalid_argument("cuda attention decode v2: split_min_keys={} (need >= 1)",
                            split_min_keys);
  }
  if (num_splits > 1 && counters == nullptr) {
    return invalid_argument(
        "cuda attention decode v2: {} splits need `counters` (attention_decode_v2_counters, "
        "zeroed once)",
        num_splits);
  }
  if (!valid_attention_cluster(cluster) || num_splits % cluster != 0) {
    return invalid_argument(
        "cuda attention decode v2: cluster={} with {} splits (need a power of two up to {} "
        "dividing the split count)",
        cluster, num_splits, kAttentionMaxCluster);
  }
  return Status::ok();
}

std::size_t attention_decode_v2_counters(std::int64_t num_tokens, std::int64_t num_heads,
                                         std::int64_t num_kv_heads) {
  const std::int64_t group = num_heads / std::max<std::int64_t>(1, num_kv_heads);
  const std::int64_t groups = (group + kAttentionV2MaxGroup - 1) / kAttentionV2MaxGroup;
  return static_cast<std::size_t>(std::max<std::int64_t>(0, num_tokens) *
                                  std::max<std::int64_t>(1, num_kv_heads) *
                                  std::max<std::int64_t>(1, groups));
}

std::int32_t attention_decode_v2_splits(std::int32_t num_tokens, std::int32_t num_heads,
                                        std::int32_t num_kv_heads, std::int32_t max_kv_len,
                                        int sm_count, std::int32_t split_min_keys,
                                        std::int32_t blocks_per_sm, std::int32_t cluster) {
  const auto blocks = static_cast<std::int64_t>(
      attention_decode_v2_counters(std::max(1, num_tokens), num_heads, std::max(1, num_kv_heads)));
  const std::int64_t target =
      static_cast<std::int64_t>(std::max(1, blocks_per_sm)) * std::max(1, sm_count);
  const std::int64_t wanted = (target + blocks - 1) / blocks;
  const std::int64_t keys = std::max(1, split_min_keys);
  const std::int64_t by_length = std::max<std::int64_t>(1, (max_kv_len + keys - 1) / keys);
  std::int64_t splits =
      std::clamp<std::int64_t>(std::min(wanted, by_length), 1, kAttentionMaxSplits);
  if (cluster > 1 && splits > 1) {
    splits =
        std::min<std::int64_t>((splits + cluster - 1) / cluster * cluster, kAttentionMaxSplits);
  }
  return static_cast<std::int32_t>(splits);
}

std::size_t attention_decode_workspace_bytes(std::int64_t num_tokens, std::int64_t num_heads,
                                             std::int64_t head_dim, std::int32_t num_splits) {
  if (num_splits <= 1) {
    return 0;
  }
  return static_cast<std::size_t>(num_tokens * num_heads * num_splits * (head_dim + 2)) *
         sizeof(float);
}

}  // namespace cellm::cuda
