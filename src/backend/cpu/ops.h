// Float32 building blocks of the CPU reference forward: RMSNorm, RoPE
// frequency tables and rotation (HF rotate_half layout), gated activations,
// soft caps and attention over per-row cell lists. Raw pointers in, so op
// tests can drive them without a model.
//
// Thread-safety: pure functions; attention parallelises internally (OpenMP).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "model/model_spec.h"

namespace cellm::cpu {

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * g, with g = w (or 1 + w when
// weight_offset, the Gemma convention). `out` may alias `x`.
void rms_norm(const float* x, const float* weight, std::int64_t rows, std::int64_t dim, float eps,
              bool weight_offset, float* out);

// The inverse frequencies of a rotary table, one per rotated pair:
// rotary_dim / 2 entries (rotary_dim 0 means the whole head). Computed in
// float32 exactly as Hugging Face builds its inv_freq buffer, including the
// llama3 band scaling and linear scaling, then rounded to `table_dtype`
// (kF32, kBF16 or kF16): transformers keeps that buffer in the dtype of the
// checkpoint it loaded, so matching its outputs for a 16-bit checkpoint
// needs the same rounding.
std::vector<float> rope_inv_freq(const model::RopeSpec& rope, std::int32_t head_dim,
                                 DType table_dtype = DType::kF32);

// Rotates x [rows, heads, head_dim] in place: for row r at positions[r] the
// first 2*inv_freq.size() dims of every head are rotated with rotate_half
// (pair i couples dims i and i + rotary_dim/2); the rest pass through.
void apply_rope(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                std::span<const float> inv_freq, const std::int64_t* positions);

// gate[i] = act(gate[i]) * up[i] for n elements.
void gated_activation(float* gate, const float* up, std::int64_t n, model::Activation act);
float gelu_tanh(float x);
float silu(float x);

// x = cap * tanh(x / cap) for n elements.
void soft_cap(float* x, std::int64_t n, float cap);

struct AttentionParams {
  std::int32_t heads = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  float scale = 0.0f;
  std::optional<float> softcap;  // tanh cap on the scaled scores
};

// For every row r and head h: softmax over the cells in row_cells[r] of
// scale * q[r,h] . k[cell, h / (heads / kv_heads)], then the weighted sum of
// the matching v. q and out are [rows, heads, head_dim]; k and v are
// [cells, kv_heads, head_dim]. A row with no cells gets zeros. The caller
// guarantees every cell id lies inside k and v.
void attend_cells(const float* q, const float* k, const float* v,
                  std::span<const std::span<const std::int32_t>> row_cells,
                  const AttentionParams& params, float* out);

}  // namespace cellm::cpu
