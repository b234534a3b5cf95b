#include "model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/files.h"
#include "model/hf_quant_config.h"

namespace cellm::model {
namespace {

using nlohmann::json;

// Typed, null-aware field access that names the file and field on error.
class Fields {
 public:
  Fields(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  const json* raw(std::string_view key) const {
    const auto it = obj_.find(std::string(key));
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(std::string_view key) const { return raw(key) != nullptr; }
  std::string where(std::string_view key) const {
    return fmt::format("{}: field '{}{}'", source_, prefix_, key);
  }

  Result<std::optional<std::int64_t>> opt_int(std::string_view key) const {
    const json* v = raw(key);
    if (v == nullptr) return std::optional<std::int64_t>();
    if (v->is_number_integer()) return std::optional<std::int64_t>(v->get<std::int64_t>());
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9e15) {
        return std::optional<std::int64_t>(static_cast<std::int64_t>(d));
      }
    }
    return invalid_argument("{} is {}, expected an integer", where(key), v->dump());
  }
  Result<std::int32_t> req_size(std::string_view key) const {
    CELLM_ASSIGN_OR_RETURN(auto v, opt_int(key));
    if (!v) return invalid_argument("{} is missing (required)", where(key));
    return check_size(key, *v);
  }
  Result<std::int32_t> size_or(std::string_view key, std::int64_t fallback) const {
    CELLM_ASSIGN_OR_RETURN(auto v, opt_int(key));
    return check_size(key, v.value_or(fallback));
  }
  Result<std::optional<double>> opt_double(std::string_view key) const {
    const json* v = raw(key);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number())
      return invalid_argument("{} is {}, expected a number", where(key), v->dump());
    return std::optional<double>(v->get<double>());
  }
  Result<double> double_or(std::string_view key, double fallback) const {
    CELLM_ASSIGN_OR_RETURN(auto v, opt_double(key));
    return v.value_or(fallback);
  }
  Result<double> req_double(std::string_view key) const {
    CELLM_ASSIGN_OR_RETURN(auto v, opt_double(key));
    if (!v) return invalid_argument("{} is missing (required)", where(key));
    return *v;
  }
  Result<bool> bool_or(std::string_view key, bool fallback) const {
    const json* v = raw(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean())
      return invalid_argument("{} is {}, expected true or false", where(key), v->dump());
    return v->get<bool>();
  }
  Result<std::optional<std::string>> opt_string(std::string_view key) const {
    const json* v = raw(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string())
      return invalid_argument("{} is {}, expected a string", where(key), v->dump());
    return std::optional<std::string>(v->get<std::string>());
  }

 private:
  Result<std::int32_t> check_size(std::string_view key, std::int64_t v) const {
    if (v <= 0 || v > std::numeric_limits<std::int32_t>::max()) {
      return invalid_argument("{} is {}, expected a positive 32-bit integer", where(key), v);
    }
    return static_cast<std::int32_t>(v);
  }

  const json& obj_;
  std::string source_;
  std::string prefix_;
};

Result<Architecture> parse_architecture(const std::string& model_type, const std::string& source) {
  if (model_type == "llama") return Architecture::kLlama;
  if (model_type == "qwen2") return Architecture::kQwen2;
  if (model_type == "qwen3") return Architecture::kQwen3;
  if (model_type == "mistral") return Architecture::kMistral;
  if (model_type == "gemma3_text" || model_type == "gemma3") return Architecture::kGemma3;
  if (model_type == "phi3") return Architecture::kPhi3;
  return not_supported(
      "{}: model_type '{}' is not supported (llama, qwen2, qwen3, mistral, "
      "gemma3_text, gemma3, phi3 are)",
      source, model_type);
}

// One RoPE description: a transformers 5 rope_parameters entry or a
// transformers 4 rope_scaling object (then `theta` comes from rope_theta).
Result<RopeSpec> parse_rope(const json* obj, std::optional<double> theta, std::int32_t rotary_dim,
                            const std::string& source, const std::string& field) {
  RopeSpec rope;
  rope.rotary_dim = rotary_dim;
  if (obj != nullptr && !obj->is_object()) {
    return invalid_argument("{}: field '{}' is {}, expected an object", source, field, obj->dump());
  }
  const json empty = json::object();
  const Fields f(obj != nullptr ? *obj : empty, source, field + ".");
  CELLM_ASSIGN_OR_RETURN(auto own_theta, f.opt_double("rope_theta"));
  if (own_theta) theta = own_theta;
  if (!theta) return invalid_argument("{}: no rope_theta for '{}'", source, field);
  rope.theta = *theta;
  CELLM_ASSIGN_OR_RETURN(auto type, f.opt_string("rope_type"));
  if (!type) {
    CELLM_ASSIGN_OR_RETURN(type, f.opt_string("type"));
  }
  const std::string t = type.value_or("default");
  if (t == "default") {
    rope.type = RopeType::kDefault;
  } else if (t == "linear") {
    rope.type = RopeType::kLinear;
    CELLM_ASSIGN_OR_RETURN(rope.factor, f.req_double("factor"));
  } else if (t == "llama3") {
    rope.type = RopeType::kLlama3;
    CELLM_ASSIGN_OR_RETURN(rope.factor, f.req_double("factor"));
    CELLM_ASSIGN_OR_RETURN(rope.low_freq_factor, f.req_double("low_freq_factor"));
    CELLM_ASSIGN_OR_RETURN(rope.high_freq_factor, f.req_double("high_freq_factor"));
    CELLM_ASSIGN_OR_RETURN(rope.original_max_position,
                           f.req_size("original_max_position_embeddings"));
  } else {
    return not_supported(
        "{}: field '{}.rope_type' is '{}', which cellm does not implement "
        "(default, linear, llama3 are)",
        source, field, t);
  }
  return rope;
}

Result<std::int32_t> rotary_dim_of(const Fields& top, const json* rope_params,
                                   std::int32_t head_dim, const std::string& source) {
  std::optional<double> factor;
  if (rope_params != nullptr && rope_params->is_object()) {
    CELLM_ASSIGN_OR_RETURN(
        factor,
        Fields(*rope_params, source, "rope_parameters.").opt_double("partial_rotary_factor"));
  }
  if (!factor) {
    CELLM_ASSIGN_OR_RETURN(factor, top.opt_double("partial_rotary_factor"));
  }
  const double f = factor.value_or(1.0);
  if (!(f > 0.0 && f <= 1.0)) {
    return invalid_argument("{}: partial_rotary_factor {} must be in (0, 1]", source, f);
  }
  return static_cast<std::int32_t>(static_cast<double>(head_dim) * f);
}

// Which layers slide: layer_types when present, else each architecture's
// transformers 4 rule. Returns one window per layer (0 = full attention).
Result<std::vector<std::int32_t>> layer_windows(const Fields& f, Architecture arch,
                                                std::int32_t num_layers, const std::string& source,
                                                std::vector<bool>& sliding) {
  CELLM_ASSIGN_OR_RETURN(auto window, f.opt_int("sliding_window"));
  sliding.assign(static_cast<std::size_t>(num_layers), false);
  if (const json* types = f.raw("layer_types")) {
    if (!types->is_array() || types->size() != static_cast<std::size_t>(num_layers)) {
      return invalid_argument("{}: field 'layer_types' must list one type per layer ({})", source,
                              num_layers);
    }
    for (std::size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") {
        sliding[i] = true;
      } else if (t != "full_attention") {
        return not_supported(
            "{}: field 'layer_types[{}]' is {} (full_attention and "
            "sliding_attention are supported)",
            source, i, t.dump());
      }
    }
  } else {
    switch (arch) {
      case Architecture::kMistral:
      case Architecture::kPhi3:
        if (window) sliding.assign(sliding.size(), true);
        break;
      case Architecture::kQwen2:
      case Architecture::kQwen3: {
        CELLM_ASSIGN_OR_RETURN(bool use, f.bool_or("use_sliding_window", false));
        CELLM_ASSIGN_OR_RETURN(auto max_window_layers, f.opt_int("max_window_layers"));
        if (use && window) {
          for (std::int32_t i = 0; i < num_layers; ++i) {
            sliding[static_cast<std::size_t>(i)] = i >= max_window_layers.value_or(0);
          }
        }
        break;
      }
      case Architecture::kGemma3: {
        CELLM_ASSIGN_OR_RETURN(auto pattern, f.opt_int("sliding_window_pattern"));
        if (!pattern) {
          CELLM_ASSIGN_OR_RETURN(pattern, f.opt_int("_sliding_window_pattern"));
        }
        const std::int64_t p = pattern.value_or(6);
        if (p <= 0)
          return invalid_argument("{}: sliding_window_pattern {} must be positive", source, p);
        for (std::int32_t i = 0; i < num_layers; ++i) {
          sliding[static_cast<std::size_t>(i)] = (i + 1) % p != 0;
        }
        if (!window) window = 4096;  // Gemma3TextConfig's default
        break;
      }
      case Architecture::kLlama: break;
    }
  }
  std::vector<std::int32_t> windows(sliding.size(), 0);
  for (std::size_t i = 0; i < sliding.size(); ++i) {
    if (!sliding[i]) continue;
    if (!window || *window <= 0 || *window > std::numeric_limits<std::int32_t>::max()) {
      return invalid_argument(
          "{}: layer {} uses sliding attention but field 'sliding_window' "
          "is missing or not positive",
          source, i);
    }
    windows[i] = static_cast<std::int32_t>(*window);
  }
  return windows;
}

Result<std::vector<std::int64_t>> token_ids(const json& v, const std::string& where) {
  std::vector<std::int64_t> ids;
  if (v.is_number_integer()) {
    ids.push_back(v.get<std::int64_t>());
  } else if (v.is_array()) {
    for (const json& e : v) {
      if (!e.is_number_integer())
        return invalid_argument("{} holds {}, not a token id", where, e.dump());
      ids.push_back(e.get<std::int64_t>());
    }
  } else if (!v.is_null()) {
    return invalid_argument("{} is {}, expected a token id or a list of them", where, v.dump());
  }
  return ids;
}

Status apply_special_tokens(const json& obj, const std::string& source, ModelSpec& spec) {
  if (const auto it = obj.find("bos_token_id"); it != obj.end() && !it->is_null()) {
    CELLM_ASSIGN_OR_RETURN(auto ids, token_ids(*it, source + ": field 'bos_token_id'"));
    if (ids.size() != 1) return invalid_argument("{}: field 'bos_token_id' must be one id", source);
    spec.bos_token_id = ids[0];
  }
  if (const auto it = obj.find("eos_token_id"); it != obj.end() && !it->is_null()) {
    CELLM_ASSIGN_OR_RETURN(auto ids, token_ids(*it, source + ": field 'eos_token_id'"));
    spec.eos_token_ids.clear();
    for (auto id : ids) {
      if (std::find(spec.eos_token_ids.begin(), spec.eos_token_ids.end(), id) ==
          spec.eos_token_ids.end()) {
        spec.eos_token_ids.push_back(id);
      }
    }
  }
  return Status::ok();
}

Result<ModelSpec> spec_from_json(const json& root, const std::string& source) {
  if (!root.is_object()) return invalid_argument("{}: not a JSON object", source);
  const Fields top(root, source);
  CELLM_ASSIGN_OR_RETURN(auto model_type, top.opt_string("model_type"));
  if (!model_type) return invalid_argument("{}: field 'model_type' is missing (required)", source);
  CELLM_ASSIGN_OR_RETURN(const Architecture arch, parse_architecture(*model_type, source));
  const bool gemma = arch == Architecture::kGemma3;

  // A multimodal gemma3 config keeps the language model in text_config.
  const json* body = &root;
  std::string prefix;
  if (*model_type == "gemma3") {
    body = top.raw("text_config");
    if (body == nullptr || !body->is_object()) {
      return invalid_argument("{}: model_type 'gemma3' needs a 'text_config' object", source);
    }
    prefix = "text_config.";
  }
  const Fields f(*body, source, prefix);

  ModelSpec spec;
  spec.arch = arch;
  spec.arch_name = std::string(architecture_name(arch));
  // Gemma 3's published text configs lean on Gemma3TextConfig defaults.
  if (gemma) {
    CELLM_ASSIGN_OR_RETURN(spec.vocab_size, f.size_or("vocab_size", 262208));
    CELLM_ASSIGN_OR_RETURN(spec.num_heads, f.size_or("num_attention_heads", 8));
    CELLM_ASSIGN_OR_RETURN(spec.max_context, f.size_or("max_position_embeddings", 131072));
  } else {
    CELLM_ASSIGN_OR_RETURN(spec.vocab_size, f.req_size("vocab_size"));
    CELLM_ASSIGN_OR_RETURN(spec.num_heads, f.req_size("num_attention_heads"));
    CELLM_ASSIGN_OR_RETURN(spec.max_context, f.req_size("max_position_embeddings"));
  }
  CELLM_ASSIGN_OR_RETURN(spec.hidden_size, f.req_size("hidden_size"));
  CELLM_ASSIGN_OR_RETURN(spec.intermediate_size, f.req_size("intermediate_size"));
  CELLM_ASSIGN_OR_RETURN(spec.num_layers, f.req_size("num_hidden_layers"));
  CELLM_ASSIGN_OR_RETURN(spec.num_kv_heads, f.size_or("num_key_value_heads", spec.num_heads));
  CELLM_ASSIGN_OR_RETURN(spec.head_dim,
                         f.size_or("head_dim", gemma ? 256 : spec.hidden_size / spec.num_heads));
  if (spec.num_layers > 100000) {
    return invalid_argument("{} is {}, which is absurd", f.where("num_hidden_layers"),
                            spec.num_layers);
  }
  CELLM_ASSIGN_OR_RETURN(const double eps,
                         f.double_or("rms_norm_eps", arch == Architecture::kPhi3 ? 1e-5 : 1e-6));
  spec.norm_eps = static_cast<float>(eps);

  // Tying is a property of the outer (CausalLM) config.
  CELLM_ASSIGN_OR_RETURN(spec.tie_word_embeddings, top.bool_or("tie_word_embeddings", gemma));

  CELLM_ASSIGN_OR_RETURN(auto act, f.opt_string(gemma ? "hidden_activation" : "hidden_act"));
  if (!act && gemma) {
    CELLM_ASSIGN_OR_RETURN(act, f.opt_string("hidden_act"));
  }
  const std::string activation = act.value_or(gemma ? "gelu_pytorch_tanh" : "silu");
  if (activation == "silu" || activation == "swish") {
    spec.activation = Activation::kSilu;
  } else if (activation == "gelu_pytorch_tanh" || activation == "gelu_new" ||
             (gemma && activation == "gelu")) {
    spec.activation = Activation::kGeluTanh;  // Gemma's "gelu" always meant the tanh form
  } else {
    return not_supported("{} is '{}' (silu and gelu_pytorch_tanh are supported)",
                         f.where(gemma ? "hidden_activation" : "hidden_act"), activation);
  }

  CELLM_ASSIGN_OR_RETURN(const bool attention_bias, f.bool_or("attention_bias", false));
  CELLM_ASSIGN_OR_RETURN(const bool mlp_bias, f.bool_or("mlp_bias", false));
  if (mlp_bias)
    return not_supported("{} is true: MLP biases are not supported", f.where("mlp_bias"));
  if (arch == Architecture::kQwen2) {
    spec.attention_bias = true;  // Qwen2 always biases q/k/v (and never o)
  } else if (attention_bias) {
    return not_supported("{} is true: an o_proj bias is not supported for {}",
                         f.where("attention_bias"), spec.arch_name);
  }
  spec.qk_norm = arch == Architecture::kQwen3 || gemma;
  spec.norm_weight_offset = gemma;
  spec.sandwich_norms = gemma;
  spec.attention_scale = 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
  if (gemma) {
    CELLM_ASSIGN_OR_RETURN(const double scalar, f.double_or("query_pre_attn_scalar", 256.0));
    if (!(scalar > 0))
      return invalid_argument("{} must be positive", f.where("query_pre_attn_scalar"));
    spec.attention_scale = static_cast<float>(1.0 / std::sqrt(scalar));
    spec.embedding_scale = std::sqrt(static_cast<float>(spec.hidden_size));
    CELLM_ASSIGN_OR_RETURN(auto final_cap, f.opt_double("final_logit_softcapping"));
    CELLM_ASSIGN_OR_RETURN(auto attn_cap, f.opt_double("attn_logit_softcapping"));
    if (final_cap) spec.final_logit_softcap = static_cast<float>(*final_cap);
    if (attn_cap) spec.attn_logit_softcap = static_cast<float>(*attn_cap);
  }

  // Attention pattern and RoPE, per layer.
  std::vector<bool> sliding;
  CELLM_ASSIGN_OR_RETURN(auto windows, layer_windows(f, arch, spec.num_layers, source, sliding));
  const json* rope_params = f.raw("rope_parameters");
  CELLM_ASSIGN_OR_RETURN(const std::int32_t rotary_dim,
                         rotary_dim_of(f, rope_params, spec.head_dim, source));
  const std::string rp = prefix + "rope_parameters";
  RopeSpec full_rope;
  RopeSpec sliding_rope;
  if (rope_params != nullptr && rope_params->is_object() &&
      (rope_params->contains("full_attention") || rope_params->contains("sliding_attention"))) {
    // transformers 5, one entry per attention type (gemma3).
    const auto entry = [&](const char* key) -> const json* {
      const auto it = rope_params->find(key);
      return it == rope_params->end() ? nullptr : &*it;
    };
    if (entry("full_attention") == nullptr) {
      return invalid_argument("{}: field '{}.full_attention' is missing", source, rp);
    }
    CELLM_ASSIGN_OR_RETURN(full_rope, parse_rope(entry("full_attention"), std::nullopt, rotary_dim,
                                                 source, rp + ".full_attention"));
    sliding_rope = full_rope;
    if (entry("sliding_attention") != nullptr) {
      CELLM_ASSIGN_OR_RETURN(
          sliding_rope, parse_rope(entry("sliding_attention"), std::nullopt, rotary_dim, source,
                                   rp + ".sliding_attention"));
    } else if (std::find(sliding.begin(), sliding.end(), true) != sliding.end()) {
      return invalid_argument("{}: field '{}.sliding_attention' is missing", source, rp);
    }
  } else if (rope_params != nullptr) {
    CELLM_ASSIGN_OR_RETURN(full_rope,
                           parse_rope(rope_params, std::nullopt, rotary_dim, source, rp));
    sliding_rope = full_rope;
  } else {
    // transformers 4: rope_theta + rope_scaling; gemma3 gives sliding layers
    // their own base frequency and leaves them unscaled.
    CELLM_ASSIGN_OR_RETURN(const double theta, f.double_or("rope_theta", gemma ? 1e6 : 1e4));
    CELLM_ASSIGN_OR_RETURN(full_rope, parse_rope(f.raw("rope_scaling"), theta, rotary_dim, source,
                                                 prefix + "rope_scaling"));
    sliding_rope = full_rope;
    if (gemma) {
      CELLM_ASSIGN_OR_RETURN(const double local, f.double_or("rope_local_base_freq", 1e4));
      CELLM_ASSIGN_OR_RETURN(sliding_rope, parse_rope(nullptr, local, rotary_dim, source,
                                                      prefix + "rope_local_base_freq"));
    }
  }
  for (std::size_t i = 0; i < windows.size(); ++i) {
    spec.layers.push_back(LayerSpec{windows[i], sliding[i] ? sliding_rope : full_rope});
  }

  if (const json* quant = top.raw("quantization_config")) {
    CELLM_ASSIGN_OR_RETURN(spec.quant, parse_quantization_config(*quant, source));
  }

  CELLM_RETURN_IF_ERROR(apply_special_tokens(*body, source, spec));
  if (body != &root) CELLM_RETURN_IF_ERROR(apply_special_tokens(root, source, spec));
  const Status valid = spec.validate();
  if (!valid.is_ok()) return valid.with_context(source);
  return spec;
}

}  // namespace

Result<ModelSpec> spec_from_hf_config_text(std::string_view json_text, std::string_view source) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_argument("{}: not valid JSON", source);
  return spec_from_json(root, std::string(source));
}

Status apply_generation_config_text(std::string_view json_text, std::string_view source,
                                    ModelSpec& spec) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return invalid_argument("{}: not a JSON object", source);
  }
  ModelSpec updated = spec;  // a refused call changes nothing
  CELLM_RETURN_IF_ERROR(apply_special_tokens(root, std::string(source), updated));
  spec = std::move(updated);
  return Status::ok();
}

Result<ModelSpec> read_hf_spec(const std::filesystem::path& config_path) {
  CELLM_ASSIGN_OR_RETURN(const std::string text, read_file(config_path));
  CELLM_ASSIGN_OR_RETURN(ModelSpec spec, spec_from_hf_config_text(text, config_path.string()));
  const auto gen_path = config_path.parent_path() / "generation_config.json";
  std::error_code ec;
  if (std::filesystem::exists(gen_path, ec)) {
    CELLM_ASSIGN_OR_RETURN(const std::string gen, read_file(gen_path));
    CELLM_RETURN_IF_ERROR(apply_generation_config_text(gen, gen_path.string(), spec));
  }
  return spec;
}

}  // namespace cellm::model
