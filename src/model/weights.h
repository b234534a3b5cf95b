// Weights: a model's tensors, checked against its ModelSpec and arranged per
// layer in one canonical form whatever the file layout (fused phi3
// projections are split into views, tied heads alias the embedding, GGUF's
// Q/K row permutation is undone, quantized tensors are dequantized).
//
// Tensors are host tensors in their stored float dtype (f32, f16 or bf16;
// dequantized GGUF tensors become f32). They may view memory-mapped files, so
// a Weights keeps its sources alive. Shapes follow PyTorch Linear: [out, in].
//
// FP8 checkpoints: the tensors above are dequantized (f32 or bf16, per
// LoadOptions), which every backend reads today. The stored E4M3 codes and
// their scales stay reachable through `fp8`, views of the mapped file that
// cost no memory, so that a backend able to multiply FP8 (the CUDA one,
// later) can upload those instead.
//
// Thread-safety: immutable after loading; safe to read from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model_spec.h"

namespace cellm::model {

// A weight as an FP8 checkpoint stores it: value[r][c] =
// e4m3(codes[r][c]) × scales[r / block_rows][c / block_cols] (format/fp8.h).
struct Fp8Weight {
  Tensor codes;   // u8 [rows, cols] E4M3FN codes, canonical [out, in] layout
  Tensor scales;  // f32/bf16/f16, ceil(rows/block_rows) × ceil(cols/block_cols) values, row-major
  std::int64_t block_rows = 0;
  std::int64_t block_cols = 0;
};

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
  // FP8 checkpoints: the stored form of each weight that was dequantized, by
  // canonical checkpoint name ("model.layers.0.self_attn.qkv_proj.weight" for
  // phi3's fused projections); empty for other checkpoints. Models quantized
  // on load (LoadOptions::quantize, model/quantize.h) fill it too, with
  // per-row scales and one entry per LayerWeights projection (split names
  // for phi3: "...self_attn.q_proj.weight", "...mlp.up_proj.weight").
  std::map<std::string, Fp8Weight, std::less<>> fp8;
  // Keeps memory-mapped files or converted buffers alive for the views above.
  std::vector<std::shared_ptr<void>> keep_alive;
};

}  // namespace cellm::model
