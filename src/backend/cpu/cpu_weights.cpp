#include "backend/cpu/cpu_weights.h"

#include <string>

#include "core/check.h"

namespace cellm::cpu {
namespace {

Result<Tensor> convert(const Tensor& t, const std::string& name, const Shape& want) {
  if (!t.defined() || t.data() == nullptr) {
    return invalid_argument("weight '{}' is missing; expected f32/f16/bf16 {}", name,
                            shape_string(want));
  }
  if (t.device() != Device::kCpu) {
    return invalid_argument("weight '{}' is on a device; the CPU program needs host tensors", name);
  }
  if (t.shape() != want) {
    return invalid_argument("weight '{}' has shape {}; the model spec implies {}", name,
                            shape_string(t.shape()), shape_string(want));
  }
  switch (t.dtype()) {
    case DType::kF32: return t;  // shares the storage
    case DType::kF16:
    case DType::kBF16: {
      Tensor out = Tensor::empty(DType::kF32, t.shape());
      float* dst = out.data_as<float>();
      const auto* src = static_cast<const std::uint16_t*>(t.data());
      const bool bf16 = t.dtype() == DType::kBF16;
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        dst[i] = bf16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
      }
      return out;
    }
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kF8E4M3: break;
  }
  return invalid_argument("weight '{}' has dtype {}; the CPU program reads f32, f16 or bf16", name,
                          dtype_name(t.dtype()));
}

}  // namespace

Result<model::Weights> to_f32_weights(const model::ModelSpec& spec, const model::Weights& weights) {
  const std::int64_t d = spec.hidden_size;
  const std::int64_t q_dim = static_cast<std::int64_t>(spec.num_heads) * spec.head_dim;
  const std::int64_t kv_dim = static_cast<std::int64_t>(spec.num_kv_heads) * spec.head_dim;
  const std::int64_t ff = spec.intermediate_size;
  const std::int64_t vocab = spec.vocab_size;
  if (static_cast<std::int64_t>(weights.layers.size()) != spec.num_layers) {
    return invalid_argument("weights hold {} layers; the model spec says {}", weights.layers.size(),
                            spec.num_layers);
  }

  model::Weights out;
  out.keep_alive = weights.keep_alive;
  CELLM_ASSIGN_OR_RETURN(out.embed_tokens,
                         convert(weights.embed_tokens, "embed_tokens", {vocab, d}));
  CELLM_ASSIGN_OR_RETURN(out.final_norm, convert(weights.final_norm, "final_norm", {d}));
  if (weights.lm_head.data() != nullptr && weights.lm_head.data() == weights.embed_tokens.data() &&
      weights.lm_head.dtype() == weights.embed_tokens.dtype()) {
    if (weights.lm_head.shape() != weights.embed_tokens.shape()) {
      return invalid_argument("weight 'lm_head' views the embedding with shape {}; expected {}",
                              shape_string(weights.lm_head.shape()),
                              shape_string(weights.embed_tokens.shape()));
    }
    out.lm_head = out.embed_tokens;  // tied: keep sharing after conversion
  } else {
    CELLM_ASSIGN_OR_RETURN(out.lm_head, convert(weights.lm_head, "lm_head", {vocab, d}));
  }

  out.layers.resize(weights.layers.size());
  for (std::size_t i = 0; i < weights.layers.size(); ++i) {
    const model::LayerWeights& src = weights.layers[i];
    model::LayerWeights& dst = out.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    CELLM_ASSIGN_OR_RETURN(dst.attn_norm, convert(src.attn_norm, p + "attn_norm", {d}));
    CELLM_ASSIGN_OR_RETURN(dst.q_proj, convert(src.q_proj, p + "q_proj", {q_dim, d}));
    CELLM_ASSIGN_OR_RETURN(dst.k_proj, convert(src.k_proj, p + "k_proj", {kv_dim, d}));
    CELLM_ASSIGN_OR_RETURN(dst.v_proj, convert(src.v_proj, p + "v_proj", {kv_dim, d}));
    CELLM_ASSIGN_OR_RETURN(dst.o_proj, convert(src.o_proj, p + "o_proj", {d, q_dim}));
    if (spec.attention_bias) {
      CELLM_ASSIGN_OR_RETURN(dst.q_bias, convert(src.q_bias, p + "q_bias", {q_dim}));
      CELLM_ASSIGN_OR_RETURN(dst.k_bias, convert(src.k_bias, p + "k_bias", {kv_dim}));
      CELLM_ASSIGN_OR_RETURN(dst.v_bias, convert(src.v_bias, p + "v_bias", {kv_dim}));
    }
    if (spec.qk_norm) {
      CELLM_ASSIGN_OR_RETURN(dst.q_norm, convert(src.q_norm, p + "q_norm", {spec.head_dim}));
      CELLM_ASSIGN_OR_RETURN(dst.k_norm, convert(src.k_norm, p + "k_norm", {spec.head_dim}));
    }
    CELLM_ASSIGN_OR_RETURN(dst.mlp_norm, convert(src.mlp_norm, p + "mlp_norm", {d}));
    if (spec.sandwich_norms) {
      CELLM_ASSIGN_OR_RETURN(dst.post_attn_norm,
                             convert(src.post_attn_norm, p + "post_attn_norm", {d}));
      CELLM_ASSIGN_OR_RETURN(dst.post_mlp_norm,
                             convert(src.post_mlp_norm, p + "post_mlp_norm", {d}));
    }
    CELLM_ASSIGN_OR_RETURN(dst.gate_proj, convert(src.gate_proj, p + "gate_proj", {ff, d}));
    CELLM_ASSIGN_OR_RETURN(dst.up_proj, convert(src.up_proj, p + "up_proj", {ff, d}));
    CELLM_ASSIGN_OR_RETURN(dst.down_proj, convert(src.down_proj, p + "down_proj", {d, ff}));
  }
  return out;
}

}  // namespace cellm::cpu
