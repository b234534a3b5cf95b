#include "model/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "format/ggml_types.h"

namespace cellm::model {
namespace {

// llama.cpp's Gemma 3 conventions that GGUF metadata does not spell out.
constexpr std::int64_t kGemma3SlidingPattern = 6;  // every sixth layer is global
constexpr double kGemma3LocalRopeBase = 10000.0;

class Meta {
 public:
  Meta(const format::GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  std::string key(std::string_view suffix) const { return fmt::format("{}.{}", arch_, suffix); }

  Result<std::int32_t> req_size(std::string_view suffix) const {
    CELLM_ASSIGN_OR_RETURN(auto v, f_.get_uint(key(suffix)));
    if (!v)
      return invalid_argument("{}: metadata '{}' is missing (required)", f_.path(), key(suffix));
    return check(suffix, *v);
  }
  Result<std::int32_t> size_or(std::string_view suffix, std::int64_t fallback) const {
    if (const format::GgufValue* v = f_.find(key(suffix)); v != nullptr && v->is_array()) {
      return not_supported("{}: metadata '{}' varies per layer, which is not supported", f_.path(),
                           key(suffix));
    }
    CELLM_ASSIGN_OR_RETURN(auto v, f_.get_uint(key(suffix)));
    return check(suffix, v ? *v : static_cast<std::uint64_t>(fallback));
  }
  Result<std::optional<double>> opt_float(std::string_view suffix) const {
    return f_.get_float(key(suffix));
  }

 private:
  Result<std::int32_t> check(std::string_view suffix, std::uint64_t v) const {
    if (v == 0 || v > static_cast<std::uint64_t>(INT32_MAX)) {
      return invalid_argument("{}: metadata '{}' is {}, expected a positive 32-bit integer",
                              f_.path(), key(suffix), v);
    }
    return static_cast<std::int32_t>(v);
  }

  const format::GgufFile& f_;
  std::string arch_;
};

std::optional<std::int64_t> token_id(const format::GgufFile& f, std::string_view key) {
  const format::GgufValue* v = f.find(key);
  if (v == nullptr) return std::nullopt;
  return v->as_int();
}

std::optional<std::int64_t> find_token(const format::GgufFile& f, std::string_view text) {
  const format::GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (tokens == nullptr || !tokens->is_array()) return std::nullopt;
  for (std::size_t i = 0; i < tokens->strings.size(); ++i) {
    if (tokens->strings[i] == text) return static_cast<std::int64_t>(i);
  }
  return std::nullopt;
}

Result<Architecture> gguf_architecture(const format::GgufFile& f, std::string_view name) {
  if (name == "llama") return Architecture::kLlama;  // also Mistral, as llama.cpp writes it
  if (name == "mistral") return Architecture::kMistral;
  if (name == "qwen2") return Architecture::kQwen2;
  if (name == "qwen3") return Architecture::kQwen3;
  if (name == "phi3") return Architecture::kPhi3;
  if (name == "gemma3") return Architecture::kGemma3;
  return not_supported(
      "{}: GGUF architecture '{}' (general.architecture) is not supported; supported are "
      "llama, mistral, qwen2, qwen3, phi3 and gemma3",
      f.path(), name);
}

}  // namespace

bool gguf_rotary_rows_permuted(Architecture arch) {
  return arch == Architecture::kLlama || arch == Architecture::kMistral;
}

Status check_gguf_tensor_types(const format::GgufFile& f) {
  for (const auto& t : f.tensors()) {
    const auto info = format::ggml_type_info(static_cast<std::uint32_t>(t.type));
    if (!info || !info->dequantizable) {
      return not_supported(
          "{}: tensor '{}' is stored as {}, which cellm cannot load (F32, F16, BF16, Q4_0, "
          "Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K are supported); convert the model with one of "
          "those types",
          f.path(), t.name,
          info ? std::string(info->name)
               : fmt::format("unknown type {}", static_cast<std::uint32_t>(t.type)));
    }
  }
  return Status::ok();
}

Result<ModelSpec> spec_from_gguf(const format::GgufFile& f) {
  CELLM_ASSIGN_OR_RETURN(auto arch_name, f.get_string("general.architecture"));
  if (!arch_name) {
    return invalid_argument("{}: metadata 'general.architecture' is missing (required)", f.path());
  }
  ModelSpec spec;
  CELLM_ASSIGN_OR_RETURN(spec.arch, gguf_architecture(f, *arch_name));
  const bool gemma = spec.arch == Architecture::kGemma3;
  const bool phi3 = spec.arch == Architecture::kPhi3;
  spec.arch_name = std::string(architecture_name(spec.arch));
  const Meta m(f, *arch_name);

  CELLM_ASSIGN_OR_RETURN(spec.num_layers, m.req_size("block_count"));
  CELLM_ASSIGN_OR_RETURN(spec.hidden_size, m.req_size("embedding_length"));
  CELLM_ASSIGN_OR_RETURN(spec.intermediate_size, m.size_or("feed_forward_length", 0));
  CELLM_ASSIGN_OR_RETURN(spec.num_heads, m.size_or("attention.head_count", 0));
  CELLM_ASSIGN_OR_RETURN(spec.num_kv_heads, m.size_or("attention.head_count_kv", spec.num_heads));
  CELLM_ASSIGN_OR_RETURN(spec.max_context, m.req_size("context_length"));
  CELLM_ASSIGN_OR_RETURN(spec.head_dim,
                         m.size_or("attention.key_length", spec.hidden_size / spec.num_heads));
  CELLM_ASSIGN_OR_RETURN(const std::int32_t value_dim,
                         m.size_or("attention.value_length", spec.head_dim));
  if (value_dim != spec.head_dim) {
    return not_supported("{}: key length {} differs from value length {}", f.path(), spec.head_dim,
                         value_dim);
  }
  CELLM_ASSIGN_OR_RETURN(auto eps, m.opt_float("attention.layer_norm_rms_epsilon"));
  if (!eps) {
    return invalid_argument("{}: metadata '{}' is missing (required)", f.path(),
                            m.key("attention.layer_norm_rms_epsilon"));
  }
  spec.norm_eps = static_cast<float>(*eps);

  // Vocabulary: the embedding's row count is what the weights must match.
  const format::GgufTensorInfo* embed = f.find_tensor("token_embd.weight");
  if (embed == nullptr)
    return invalid_argument("{}: tensor 'token_embd.weight' is missing", f.path());
  if (embed->ne.size() != 2 || embed->ne[1] > static_cast<std::uint64_t>(INT32_MAX)) {
    return invalid_argument("{}: tensor 'token_embd.weight' is not a [vocab, hidden] matrix",
                            f.path());
  }
  CELLM_ASSIGN_OR_RETURN(spec.vocab_size,
                         m.size_or("vocab_size", static_cast<std::int64_t>(embed->ne[1])));
  spec.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  if (phi3 && (f.find_tensor("rope_factors_long.weight") != nullptr ||
               f.find_tensor("rope_factors_short.weight") != nullptr)) {
    return not_supported(
        "{}: Phi-3 LongRoPE factors (rope_factors_long/short.weight) are not supported from "
        "GGUF; use a model without long-context scaling",
        f.path());
  }
  if (f.find_tensor("rope_freqs.weight") != nullptr) {
    return not_supported(
        "{}: per-dimension RoPE frequency factors (rope_freqs.weight, Llama 3.1 "
        "style) are not supported from GGUF; load the Hugging Face folder",
        f.path());
  }

  // RoPE.
  CELLM_ASSIGN_OR_RETURN(auto theta, m.opt_float("rope.freq_base"));
  CELLM_ASSIGN_OR_RETURN(const std::int32_t rotary_dim,
                         m.size_or("rope.dimension_count", spec.head_dim));
  RopeSpec rope;
  rope.theta = theta.value_or(gemma ? 1e6 : 1e4);
  rope.rotary_dim = rotary_dim;
  CELLM_ASSIGN_OR_RETURN(auto scaling, f.get_string(m.key("rope.scaling.type")));
  if (scaling && *scaling == "linear") {
    CELLM_ASSIGN_OR_RETURN(auto factor, m.opt_float("rope.scaling.factor"));
    rope.type = RopeType::kLinear;
    rope.factor = factor.value_or(1.0);
  } else if (scaling && *scaling != "none") {
    return not_supported("{}: metadata '{}' is '{}' (none and linear are supported)", f.path(),
                         m.key("rope.scaling.type"), *scaling);
  }

  spec.attention_scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
  if (gemma) {
    spec.activation = Activation::kGeluTanh;
    spec.sandwich_norms = true;
    spec.norm_weight_offset = false;  // the converter stored 1 + w
    spec.embedding_scale = std::sqrt(static_cast<float>(spec.hidden_size));
    // Gemma 3 27B scales queries by hidden/heads; the other sizes by head_dim.
    if (spec.num_layers == 62) {
      spec.attention_scale =
          1.0f / std::sqrt(static_cast<float>(spec.hidden_size / spec.num_heads));
    }
    CELLM_ASSIGN_OR_RETURN(auto cap, m.opt_float("final_logit_softcapping"));
    if (cap) spec.final_logit_softcap = static_cast<float>(*cap);
    CELLM_ASSIGN_OR_RETURN(auto window, m.size_or("attention.sliding_window", 4096));
    CELLM_ASSIGN_OR_RETURN(auto local_base, m.opt_float("rope.freq_base_swa"));
    RopeSpec local;
    local.theta = local_base.value_or(kGemma3LocalRopeBase);
    local.rotary_dim = rotary_dim;
    for (std::int32_t i = 0; i < spec.num_layers; ++i) {
      const bool sliding = (i + 1) % kGemma3SlidingPattern != 0;
      spec.layers.push_back(LayerSpec{sliding ? window : 0, sliding ? local : rope});
    }
  } else {
    // qwen2 and qwen3 attend all history; llama.cpp's llama converter drops
    // Mistral's window, so a window is honoured only where a file states one
    // (phi3 writes 0 for "none"; a "mistral" file may carry one).
    CELLM_ASSIGN_OR_RETURN(auto window, f.get_uint(m.key("attention.sliding_window")));
    if (window && *window > static_cast<std::uint64_t>(INT32_MAX)) {
      return invalid_argument("{}: metadata '{}' is {}, expected a 32-bit size", f.path(),
                              m.key("attention.sliding_window"), *window);
    }
    const auto w = static_cast<std::int32_t>(window.value_or(0));
    spec.layers.assign(static_cast<std::size_t>(spec.num_layers), LayerSpec{w, rope});
  }
  spec.attention_bias = spec.arch == Architecture::kQwen2;  // Qwen2 biases q/k/v, never o
  spec.qk_norm = gemma || spec.arch == Architecture::kQwen3;

  if (auto bos = token_id(f, "tokenizer.ggml.bos_token_id")) spec.bos_token_id = *bos;
  const auto add_eos = [&](std::optional<std::int64_t> id) {
    if (id && std::find(spec.eos_token_ids.begin(), spec.eos_token_ids.end(), *id) ==
                  spec.eos_token_ids.end()) {
      spec.eos_token_ids.push_back(*id);
    }
  };
  add_eos(token_id(f, "tokenizer.ggml.eos_token_id"));
  add_eos(token_id(f, "tokenizer.ggml.eot_token_id"));
  // Gemma chat turns end with <end_of_turn>, which the metadata does not mark.
  if (gemma) add_eos(find_token(f, "<end_of_turn>"));

  const Status valid = spec.validate();
  if (!valid.is_ok()) return valid.with_context(f.path());
  return spec;
}

std::string canonical_tensor_name(Architecture arch, std::string_view name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (!name.starts_with("blk.")) return std::string(name);
  const std::size_t dot = name.find('.', 4);
  if (dot == std::string_view::npos) return std::string(name);
  const std::string_view layer = name.substr(4, dot - 4);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::string(name);
  }
  const std::string_view rest = name.substr(dot + 1);
  const bool gemma = arch == Architecture::kGemma3;
  // Phi-3 keeps its fused projections: attn_qkv holds q, k, v stacked and
  // ffn_up holds gate then up, as in the Hugging Face checkpoint.
  if (arch == Architecture::kPhi3) {
    if (rest == "attn_qkv.weight") {
      return fmt::format("model.layers.{}.self_attn.qkv_proj.weight", layer);
    }
    if (rest == "ffn_up.weight") {
      return fmt::format("model.layers.{}.mlp.gate_up_proj.weight", layer);
    }
  }
  struct Entry {
    std::string_view gguf;
    std::string_view hf;
  };
  static constexpr Entry kCommon[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
  };
  std::string_view hf;
  if (rest == "ffn_norm.weight") {
    hf = gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
  }
  for (const auto& e : kCommon) {
    if (e.gguf == rest) hf = e.hf;
  }
  if (hf.empty()) return std::string(name);
  return fmt::format("model.layers.{}.{}", layer, hf);
}

void unpermute_rotary_row_bytes(std::span<const std::uint8_t> src, std::span<std::uint8_t> dst,
                                std::int64_t rows, std::size_t row_bytes, std::int32_t heads) {
  CELLM_CHECK(heads > 0 && rows % (2 * heads) == 0 &&
                  src.size() == static_cast<std::size_t>(rows) * row_bytes &&
                  dst.size() == src.size(),
              "cannot un-permute {} rows of {} bytes over {} heads", rows, row_bytes, heads);
  const std::int64_t head_dim = rows / heads;
  const std::int64_t half = head_dim / 2;
  for (std::int64_t h = 0; h < heads; ++h) {
    for (std::int64_t i = 0; i < half; ++i) {
      for (std::int64_t j = 0; j < 2; ++j) {
        const std::int64_t from = h * head_dim + 2 * i + j;   // interleaved pairs
        const std::int64_t to = h * head_dim + j * half + i;  // first halves, then second halves
        std::memcpy(dst.data() + static_cast<std::size_t>(to) * row_bytes,
                    src.data() + static_cast<std::size_t>(from) * row_bytes, row_bytes);
      }
    }
  }
}

std::set<std::string, std::less<>> gguf_projections_kept_on_gpu(const ModelSpec& spec,
                                                                const format::GgufFile& file) {
  std::map<std::string, const format::GgufTensorInfo*, std::less<>> by_name;
  for (const auto& t : file.tensors()) {
    by_name.emplace(canonical_tensor_name(spec.arch, t.name), &t);
  }
  const auto kept = [&](const std::string& name) {
    const auto it = by_name.find(name);
    return it != by_name.end() && it->second->ne.size() == 2 &&
           gguf_type_kept_on_gpu(it->second->type);
  };
  std::set<std::string, std::less<>> out;
  const auto group = [&](std::vector<std::string> names) {
    if (std::all_of(names.begin(), names.end(), kept)) out.insert(names.begin(), names.end());
  };
  for (int i = 0; i < spec.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    group({p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
           p + "self_attn.v_proj.weight"});
    group({p + "self_attn.o_proj.weight"});
    group({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
    group({p + "mlp.down_proj.weight"});
  }
  if (!spec.tie_word_embeddings) group({"lm_head.weight"});
  return out;
}

bool gguf_type_kept_on_gpu(format::GgmlType type) {
  using format::GgmlType;
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kIQ4_XS: return true;
    default: return false;
  }
}

Tensor unpermute_rotary_rows(const Tensor& t, std::int32_t heads) {
  CELLM_CHECK(t.rank() == 2 && heads > 0 && t.dim(0) % (2 * heads) == 0,
              "cannot un-permute {} over {} heads", t.describe(), heads);
  const std::size_t row_bytes = static_cast<std::size_t>(t.dim(1)) * dtype_size(t.dtype());
  Tensor out = Tensor::empty(t.dtype(), t.shape());
  const std::size_t bytes = row_bytes * static_cast<std::size_t>(t.dim(0));
  unpermute_rotary_row_bytes({static_cast<const std::uint8_t*>(t.data()), bytes},
                             {static_cast<std::uint8_t*>(out.data()), bytes}, t.dim(0), row_bytes,
                             heads);
  return out;
}

GgufTensorSource::GgufTensorSource(std::shared_ptr<const format::GgufFile> file,
                                   const ModelSpec& spec, DType dequant_dtype)
    : file_(std::move(file)), spec_(spec), dequant_dtype_(dequant_dtype) {
  for (const auto& t : file_->tensors()) {
    by_canonical_.emplace(canonical_tensor_name(spec_.arch, t.name), &t);
  }
}

const format::GgufTensorInfo* GgufTensorSource::info(std::string_view name) const {
  const auto it = by_canonical_.find(name);
  return it == by_canonical_.end() ? nullptr : it->second;
}

std::vector<std::string> GgufTensorSource::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : by_canonical_) out.push_back(name);
  return out;
}

std::optional<Shape> GgufTensorSource::shape(std::string_view name) const {
  const auto* i = info(name);
  if (i == nullptr) return std::nullopt;
  return i->shape();
}

std::string GgufTensorSource::stored_type(std::string_view name) const {
  const auto* i = info(name);
  return i == nullptr ? "absent" : std::string(format::ggml_type_name(i->type));
}

Result<Tensor> GgufTensorSource::load(std::string_view name) const {
  const auto* i = info(name);
  if (i == nullptr) return not_found("{}: no tensor maps to '{}'", file_->path(), name);
  const bool plain = i->type == format::GgmlType::kF32 || i->type == format::GgmlType::kF16 ||
                     i->type == format::GgmlType::kBF16;
  Tensor t;
  if (plain) {
    CELLM_ASSIGN_OR_RETURN(t, file_->view(*i));
  } else {
    CELLM_ASSIGN_OR_RETURN(t, file_->dequantize(*i, dequant_dtype_));
  }
  // GGUF's llama converter interleaves each head's rotary halves in Q and K.
  const bool permuted = gguf_rotary_rows_permuted(spec_.arch);
  if (permuted && spec_.head_dim % 2 != 0 &&
      (name.ends_with("self_attn.q_proj.weight") || name.ends_with("self_attn.k_proj.weight"))) {
    return invalid_argument("{}: head_dim {} is odd, so '{}' cannot hold rotary pairs",
                            file_->path(), spec_.head_dim, name);
  }
  if (permuted) {
    if (name.ends_with("self_attn.q_proj.weight")) return unpermute_rotary_rows(t, spec_.num_heads);
    if (name.ends_with("self_attn.k_proj.weight"))
      return unpermute_rotary_rows(t, spec_.num_kv_heads);
  }
  return t;
}

}  // namespace cellm::model
