#include "model/model_spec.h"

namespace cellm::model {

std::string_view architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama: return "llama";
    case Architecture::kQwen2: return "qwen2";
    case Architecture::kQwen3: return "qwen3";
    case Architecture::kMistral: return "mistral";
    case Architecture::kGemma3: return "gemma3_text";
    case Architecture::kPhi3: return "phi3";
  }
  return "unknown";
}

Status ModelSpec::validate() const {
  const auto positive = [&](std::int64_t v, std::string_view field) -> Status {
    if (v <= 0)
      return invalid_argument("model spec ({}): {} is {}, must be positive", arch_name, field, v);
    return Status::ok();
  };
  CELLM_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  CELLM_RETURN_IF_ERROR(positive(hidden_size, "hidden_size"));
  CELLM_RETURN_IF_ERROR(positive(intermediate_size, "intermediate_size"));
  CELLM_RETURN_IF_ERROR(positive(num_layers, "num_layers"));
  CELLM_RETURN_IF_ERROR(positive(num_heads, "num_heads"));
  CELLM_RETURN_IF_ERROR(positive(num_kv_heads, "num_kv_heads"));
  CELLM_RETURN_IF_ERROR(positive(head_dim, "head_dim"));
  CELLM_RETURN_IF_ERROR(positive(max_context, "max_context"));
  if (num_heads % num_kv_heads != 0) {
    return invalid_argument("model spec ({}): {} attention heads are not a multiple of {} kv heads",
                            arch_name, num_heads, num_kv_heads);
  }
  if (!(norm_eps > 0.0f))
    return invalid_argument("model spec ({}): norm_eps {} must be positive", arch_name, norm_eps);
  if (!(attention_scale > 0.0f)) {
    return invalid_argument("model spec ({}): attention_scale {} must be positive", arch_name,
                            attention_scale);
  }
  if (static_cast<std::int64_t>(layers.size()) != num_layers) {
    return invalid_argument("model spec ({}): {} layer specs for {} layers", arch_name,
                            layers.size(), num_layers);
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    if (l.window < 0) return invalid_argument("layer {}: window {} is negative", i, l.window);
    if (!(l.rope.theta > 0.0))
      return invalid_argument("layer {}: rope theta {} must be positive", i, l.rope.theta);
    if (l.rope.rotary_dim <= 0 || l.rope.rotary_dim > head_dim || l.rope.rotary_dim % 2 != 0) {
      return invalid_argument("layer {}: rotary_dim {} must be even and in (0, head_dim {}]", i,
                              l.rope.rotary_dim, head_dim);
    }
    if (!(l.rope.factor > 0.0))
      return invalid_argument("layer {}: rope factor {} must be positive", i, l.rope.factor);
    if (l.rope.type == RopeType::kLlama3 && (l.rope.original_max_position <= 0 ||
                                             !(l.rope.high_freq_factor > l.rope.low_freq_factor))) {
      return invalid_argument(
          "layer {}: llama3 rope needs original_max_position > 0 and "
          "high_freq_factor > low_freq_factor",
          i);
    }
  }
  return Status::ok();
}

std::int64_t ModelSpec::parameter_count() const {
  const std::int64_t h = hidden_size;
  const std::int64_t q = static_cast<std::int64_t>(num_heads) * head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(num_kv_heads) * head_dim;
  std::int64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * intermediate_size;
  per_layer += h * (sandwich_norms ? 4 : 2);
  if (attention_bias) per_layer += q + 2 * kv;
  if (qk_norm) per_layer += 2 * head_dim;
  std::int64_t total = static_cast<std::int64_t>(vocab_size) * h + h + per_layer * num_layers;
  if (!tie_word_embeddings) total += static_cast<std::int64_t>(vocab_size) * h;
  return total;
}

}  // namespace cellm::model
