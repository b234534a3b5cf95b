// The text report of `cellm inspect MODEL`: architecture facts, parameter
// count, bytes per dtype, every tensor, and the memory a program serving the
// model needs for a given context and session count (weights + KV cache).
//
// Thread-safety: pure functions of their inputs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cellm/status.h"
#include "core/dtype.h"
#include "model/loader.h"

namespace cellm::model {

struct InspectOptions {
  std::int64_t context = 0;   // tokens per session; 0 = the model's max_context
  std::int64_t sessions = 1;  // concurrent sessions sharing the KV pool
  DType kv_dtype = DType::kBF16;
  bool list_tensors = true;
};

// KV cache bytes for `cells` cells: 2 (K and V) × layers × kv_heads × head_dim × cells × dtype
// size.
std::int64_t kv_cache_bytes(const ModelSpec& spec, std::int64_t cells, DType kv_dtype);

// Every weight under a short canonical name ("layers.3.q_proj"), in forward order.
std::vector<std::pair<std::string, Tensor>> named_weights(const Weights& weights);

// Bytes of distinct storage (a tied head or a fused view is counted once).
std::int64_t weight_bytes(const Weights& weights);

std::string inspect_report(const LoadedModel& model, const InspectOptions& options = {});

// Loads `path` (quantized GGUF tensors as bf16 unless `load` says otherwise) and reports.
Result<std::string> inspect_model(const std::filesystem::path& path,
                                  const InspectOptions& options = {});

}  // namespace cellm::model
