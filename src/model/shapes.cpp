#include "model/shapes.h"

#include <array>
#include <utility>

#include "model/hf_config.h"

namespace cellm::model {
namespace {

// The fields of each checkpoint's config.json that shape the computation.
constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kShapes = {{
    {"llama-3.2-1b", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
      "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
      "rope_theta": 500000.0, "tie_word_embeddings": true, "hidden_act": "silu",
      "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"},
      "bos_token_id": 128000, "eos_token_id": 128001})"},
    {"llama-3.1-8b", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
      "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
      "rope_theta": 500000.0, "tie_word_embeddings": false, "hidden_act": "silu",
      "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"},
      "bos_token_id": 128000, "eos_token_id": 128001})"},
    {"qwen3-0.6b", R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
      "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
      "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
      "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
      "rope_theta": 1000000, "tie_word_embeddings": true, "hidden_act": "silu",
      "attention_bias": false, "use_sliding_window": false,
      "bos_token_id": 151643, "eos_token_id": 151645})"},
    {"smollm2-135m", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
      "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
      "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
      "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 100000,
      "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2})"},
    {"gemma3-270m", R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
      "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
      "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
      "vocab_size": 262144, "max_position_embeddings": 32768, "rms_norm_eps": 1e-06,
      "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 512,
      "sliding_window_pattern": 6, "query_pre_attn_scalar": 256,
      "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true,
      "final_logit_softcapping": null, "attn_logit_softcapping": null,
      "bos_token_id": 2, "eos_token_id": 1})"},
}};

}  // namespace

Result<ModelSpec> named_shape(std::string_view name) {
  for (const auto& [shape, config] : kShapes) {
    if (shape == name) return spec_from_hf_config_text(config, shape);
  }
  std::string known;
  for (const auto& entry : kShapes) known += (known.empty() ? "" : ", ") + std::string(entry.first);
  return not_found("unknown model shape '{}': use one of {}", name, known);
}

std::vector<std::string> shape_names() {
  std::vector<std::string> names;
  names.reserve(kShapes.size());
  for (const auto& entry : kShapes) names.emplace_back(entry.first);
  return names;
}

}  // namespace cellm::model
