// Test-only models: tiny random-weight ModelSpec + Weights for each supported
// architecture, and an independent dense reference forward (double
// precision, no cache, explicit causal/window mask) to check the CPU program
// against when no fixture is at hand.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace cellm::cpu::testing {

struct TinyModel {
  model::ModelSpec spec;
  model::Weights weights;
};

// A small random model exercising `arch`'s features: llama (llama3 RoPE,
// GQA, untied), qwen2 (biases, tied, bf16 weights), qwen3 (QK-norm),
// mistral (window 5 everywhere), gemma3 (sandwich + offset norms, GELU-tanh,
// embedding scale, custom attention scale, windowed and global layers with
// their own theta, logit soft caps), phi3 (partial rotary, linear scaling).
TinyModel make_tiny_model(model::Architecture arch, std::uint64_t seed = 1);

// Logits [T][V] of one uncached forward over `tokens` (positions 0..T-1),
// computed in double straight from the model definition; RoPE frequencies
// are rounded to `rope_table_dtype` first (ProgramOptions::rope_table_dtype).
std::vector<std::vector<double>> reference_logits(const model::ModelSpec& spec,
                                                  const model::Weights& weights,
                                                  const std::vector<std::int64_t>& tokens,
                                                  DType rope_table_dtype = DType::kF32);

// ||a - b|| / ||b||.
double relative_error(const std::vector<float>& a, const std::vector<double>& b);
double relative_error(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace cellm::cpu::testing
