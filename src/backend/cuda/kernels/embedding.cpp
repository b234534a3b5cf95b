#include "backend/cuda/kernels/embedding.cuh"

#include "backend/cuda/kernels/validate_util.h"

namespace cellm::cuda {

Status EmbeddingParams::validate() const {
  CELLM_RETURN_IF_ERROR(require_ptr(tokens, "embedding", "tokens"));
  CELLM_RETURN_IF_ERROR(require_ptr(table, "embedding", "table"));
  CELLM_RETURN_IF_ERROR(require_ptr(out, "embedding", "out"));
  if (record_size < 0 || (record != nullptr && feedback == nullptr)) {
    return invalid_argument(
        "cuda embedding: record_size={} with record {} and feedback {} (a record needs the "
        "feedback ids it copies)",
        record_size, record != nullptr ? "set" : "null", feedback != nullptr ? "set" : "null");
  }
  if (num_tokens < 0 || vocab <= 0 || dim <= 0 || dim % 8 != 0) {
    return invalid_argument(
        "cuda embedding: num_tokens={} vocab={} dim={} (dim must be a positive multiple of 8)",
        num_tokens, vocab, dim);
  }
  CELLM_RETURN_IF_ERROR(require_aligned16(table, "embedding", "table"));
  return require_aligned16(out, "embedding", "out");
}

}  // namespace cellm::cuda
