// ModelSpec: the architecture facts a forward pass must honour, independent of
// the file format they came from. Loaders (Hugging Face config.json in the
// transformers 4 and 5 layouts, GGUF metadata) fill it; backends read it.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cellm/status.h"
#include "model/quant_spec.h"

namespace cellm::model {

enum class Architecture : std::uint8_t { kLlama, kQwen2, kQwen3, kMistral, kGemma3, kPhi3 };

enum class Activation : std::uint8_t { kSilu, kGeluTanh };

enum class RopeType : std::uint8_t {
  kDefault,  // theta^(-2i/rotary_dim)
  kLlama3,   // Llama 3.1 frequency-dependent scaling
  kLinear,   // positions divided by `factor`
};

struct RopeSpec {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;                        // linear and llama3
  double low_freq_factor = 1.0;               // llama3
  double high_freq_factor = 4.0;              // llama3
  std::int32_t original_max_position = 8192;  // llama3
  std::int32_t rotary_dim = 0;                // rotated leading dims of a head (partial rotary)

  friend bool operator==(const RopeSpec&, const RopeSpec&) = default;
};

struct LayerSpec {
  std::int32_t window = 0;  // sliding window in tokens; 0 = attends all history
  RopeSpec rope;

  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

struct ModelSpec {
  Architecture arch = Architecture::kLlama;
  std::string arch_name;  // "llama", "qwen2", "qwen3", "mistral", "gemma3_text", "phi3"

  std::int32_t vocab_size = 0;
  std::int32_t hidden_size = 0;
  std::int32_t intermediate_size = 0;
  std::int32_t num_layers = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int32_t max_context = 0;  // max_position_embeddings

  float norm_eps = 1e-6f;
  bool norm_weight_offset = false;   // gemma: RMSNorm multiplies by (1 + w)
  bool sandwich_norms = false;       // gemma3: post-attention and pre/post-MLP norms
  bool qk_norm = false;              // qwen3, gemma3: per-head RMSNorm on q and k before RoPE
  bool attention_bias = false;       // qwen2: q/k/v projections carry biases
  bool tie_word_embeddings = false;  // the LM head reuses the embedding matrix
  float embedding_scale = 1.0f;      // gemma: sqrt(hidden_size)
  float attention_scale = 0.0f;  // softmax scale; 1/sqrt(head_dim) unless the model says otherwise
  std::optional<float> final_logit_softcap;  // tanh soft cap on logits, if any
  std::optional<float> attn_logit_softcap;   // tanh soft cap on attention scores, if any
  Activation activation = Activation::kSilu;

  std::vector<LayerSpec> layers;  // one per layer, in order

  // How the checkpoint's weights are quantized (FP8 Hugging Face checkpoints);
  // the loader dequantizes them, so a forward reads plain float weights.
  QuantSpec quant;

  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;

  // Internal consistency (positive sizes, heads divisible, one LayerSpec per layer).
  Status validate() const;
  // Parameters implied by the shapes (embedding counted once when tied).
  std::int64_t parameter_count() const;

  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

std::string_view architecture_name(Architecture arch);

}  // namespace cellm::model
