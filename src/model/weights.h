// Weights: a model's tensors, checked against its ModelSpec and arranged per
// layer in one canonical form whatever the file layout (fused phi3
// projections are split into views, tied heads alias the embedding, GGUF's
// Q/K row permutation is undone, quantized tensors are dequantized).
//
// Tensors are host tensors in their stored float dtype (f32, f16 or bf16;
// dequantized GGUF tensors become f32). They may view memory-mapped files, so
// a Weights keeps its sources alive. Shapes follow PyTorch Linear: [out, in].
//
// Thread-safety: immutable after loading; safe to read from any thread.
#pragma once

#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/model_spec.h"

namespace cellm::model {

struct LayerWeights {
  Tensor attn_norm;       // [hidden]            input_layernorm
  Tensor q_proj;          // [heads*head_dim, hidden]
  Tensor k_proj;          // [kv_heads*head_dim, hidden]
  Tensor v_proj;          // [kv_heads*head_dim, hidden]
  Tensor o_proj;          // [hidden, heads*head_dim]
  Tensor q_bias;          // [heads*head_dim]      attention_bias only
  Tensor k_bias;          // [kv_heads*head_dim]   attention_bias only
  Tensor v_bias;          // [kv_heads*head_dim]   attention_bias only
  Tensor q_norm;          // [head_dim]            qk_norm only
  Tensor k_norm;          // [head_dim]            qk_norm only
  Tensor post_attn_norm;  // [hidden]  gemma3: post_attention_layernorm (applied to attn output)
  Tensor mlp_norm;  // [hidden]  llama: post_attention_layernorm; gemma3: pre_feedforward_layernorm
  Tensor post_mlp_norm;  // [hidden]  gemma3: post_feedforward_layernorm
  Tensor gate_proj;      // [intermediate, hidden]
  Tensor up_proj;        // [intermediate, hidden]
  Tensor down_proj;      // [hidden, intermediate]
};

struct Weights {
  Tensor embed_tokens;  // [vocab, hidden]
  Tensor final_norm;    // [hidden]
  Tensor lm_head;       // [vocab, hidden]; the same storage as embed_tokens when tied
  std::vector<LayerWeights> layers;
  // Keeps memory-mapped files or converted buffers alive for the views above.
  std::vector<std::shared_ptr<void>> keep_alive;
};

}  // namespace cellm::model
