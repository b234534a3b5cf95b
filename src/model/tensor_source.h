// TensorSource: where a model's tensors come from, under their canonical
// Hugging Face names ("model.layers.3.self_attn.q_proj.weight", "lm_head.weight").
// A safetensors checkpoint is one, a GGUF file (names mapped, quantized
// tensors dequantized, Q/K rows un-permuted) another; build_weights checks
// either against a ModelSpec in the same way.
//
// Thread-safety: implementations are immutable after construction.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"
#include "core/tensor.h"
#include "model/weights.h"

namespace cellm::model {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // "model.safetensors" / "SmolLM2.gguf": names the source in errors.
  virtual std::string description() const = 0;
  // Every canonical name the source offers.
  virtual std::vector<std::string> names() const = 0;
  // The canonical (row-major, [out, in]) shape, without loading; nullopt if absent.
  virtual std::optional<Shape> shape(std::string_view name) const = 0;
  // The stored type, for messages and reports ("bf16", "Q4_K").
  virtual std::string stored_type(std::string_view name) const = 0;
  // The tensor as a float host tensor (f32, f16 or bf16) in canonical layout.
  virtual Result<Tensor> load(std::string_view name) const = 0;
  // For a tensor stored as FP8 codes with scales (that load() dequantizes):
  // the stored codes and scales, without copies; nullopt for any other.
  virtual std::optional<Fp8Weight> fp8(std::string_view /*name*/) const { return std::nullopt; }
};

}  // namespace cellm::model
