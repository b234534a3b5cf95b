#include "model/weights_builder.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/ranges.h>

#include "core/log.h"

namespace cellm::model {
namespace {

constexpr std::size_t kMaxListedProblems = 12;

std::string layer_name(std::int32_t layer, std::string_view suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

bool fused_projections(const ModelSpec& spec) {
  return spec.arch == Architecture::kPhi3;
}

// Buffers some old checkpoints carry that no forward reads.
bool harmless_extra(std::string_view name) {
  return name.ends_with("rotary_emb.inv_freq");
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelSpec& spec) {
  const std::int64_t h = spec.hidden_size;
  const std::int64_t inter = spec.intermediate_size;
  const std::int64_t q = static_cast<std::int64_t>(spec.num_heads) * spec.head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(spec.num_kv_heads) * spec.head_dim;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {spec.vocab_size, h}});
  for (std::int32_t i = 0; i < spec.num_layers; ++i) {
    out.push_back({layer_name(i, "input_layernorm.weight"), {h}});
    if (fused_projections(spec)) {
      out.push_back({layer_name(i, "self_attn.qkv_proj.weight"), {q + 2 * kv, h}});
    } else {
      out.push_back({layer_name(i, "self_attn.q_proj.weight"), {q, h}});
      out.push_back({layer_name(i, "self_attn.k_proj.weight"), {kv, h}});
      out.push_back({layer_name(i, "self_attn.v_proj.weight"), {kv, h}});
    }
    out.push_back({layer_name(i, "self_attn.o_proj.weight"), {h, q}});
    if (spec.attention_bias) {
      out.push_back({layer_name(i, "self_attn.q_proj.bias"), {q}});
      out.push_back({layer_name(i, "self_attn.k_proj.bias"), {kv}});
      out.push_back({layer_name(i, "self_attn.v_proj.bias"), {kv}});
    }
    if (spec.qk_norm) {
      out.push_back({layer_name(i, "self_attn.q_norm.weight"), {spec.head_dim}});
      out.push_back({layer_name(i, "self_attn.k_norm.weight"), {spec.head_dim}});
    }
    out.push_back({layer_name(i, "post_attention_layernorm.weight"), {h}});
    if (spec.sandwich_norms) {
      out.push_back({layer_name(i, "pre_feedforward_layernorm.weight"), {h}});
      out.push_back({layer_name(i, "post_feedforward_layernorm.weight"), {h}});
    }
    if (fused_projections(spec)) {
      out.push_back({layer_name(i, "mlp.gate_up_proj.weight"), {2 * inter, h}});
    } else {
      out.push_back({layer_name(i, "mlp.gate_proj.weight"), {inter, h}});
      out.push_back({layer_name(i, "mlp.up_proj.weight"), {inter, h}});
    }
    out.push_back({layer_name(i, "mlp.down_proj.weight"), {h, inter}});
  }
  out.push_back({"model.norm.weight", {h}});
  out.push_back({"lm_head.weight", {spec.vocab_size, h}, spec.tie_word_embeddings});
  return out;
}

Result<Weights> build_weights(const ModelSpec& spec, const TensorSource& source,
                              const BuildOptions& options) {
  CELLM_RETURN_IF_ERROR(spec.validate());
  const std::vector<ExpectedTensor> expected = expected_tensors(spec);

  // Check every name and shape first, so one error lists every problem.
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (const auto& e : expected) {
    wanted.insert(e.name);
    const auto shape = source.shape(e.name);
    if (!shape) {
      if (!e.optional) {
        problems.push_back(e.name == "lm_head.weight"
                               ? "missing 'lm_head.weight' (tie_word_embeddings is false)"
                               : fmt::format("missing '{}'", e.name));
      }
      continue;
    }
    if (*shape != e.shape) {
      problems.push_back(fmt::format("'{}' is {} {} but the config implies {}", e.name,
                                     source.stored_type(e.name), shape_string(*shape),
                                     shape_string(e.shape)));
    }
  }
  std::vector<std::string> extras;
  for (const auto& name : source.names()) {
    if (wanted.count(name) == 0 && !harmless_extra(name)) extras.push_back(name);
  }
  if (!extras.empty()) {
    const std::string list =
        fmt::format("{}", fmt::join(extras.begin(),
                                    extras.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                         extras.size(), kMaxListedProblems)),
                                    ", "));
    if (options.allow_extra_tensors) {
      CELLM_LOG_WARN("{}: ignoring {} unexpected tensor(s): {}", source.description(),
                     extras.size(), list);
    } else {
      problems.push_back(fmt::format("{} unexpected tensor(s) the {} spec does not use: {}{}",
                                     extras.size(), spec.arch_name, list,
                                     extras.size() > kMaxListedProblems ? ", ..." : ""));
    }
  }
  if (!problems.empty()) {
    const std::size_t shown = std::min(problems.size(), kMaxListedProblems);
    return invalid_argument(
        "{}: {} problem(s) against the {} spec: {}{}", source.description(), problems.size(),
        spec.arch_name,
        fmt::join(problems.begin(), problems.begin() + static_cast<std::ptrdiff_t>(shown), "; "),
        problems.size() > shown ? "; ..." : "");
  }

  std::map<std::string, Tensor, std::less<>> loaded;
  for (const auto& e : expected) {
    if (e.optional && !source.shape(e.name)) continue;
    if (e.name == "lm_head.weight" && spec.tie_word_embeddings) continue;  // aliased below
    if (options.left_unloaded.count(e.name) != 0) {
      loaded.emplace(e.name, Tensor());
      continue;
    }
    auto t = source.load(e.name);
    if (!t.ok()) return t.status().with_context(source.description());
    const DType dt = t->dtype();
    if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) {
      return invalid_argument("{}: tensor '{}' has dtype {}; weights must be f32, f16 or bf16",
                              source.description(), e.name, dtype_name(dt));
    }
    if (t->shape() != e.shape) {
      return internal_error("{}: '{}' loaded as {} after announcing {}", source.description(),
                            e.name, shape_string(t->shape()), shape_string(e.shape));
    }
    loaded.emplace(e.name, std::move(t).value());
  }
  const auto take = [&](const std::string& name) { return loaded.at(name); };

  Weights w;
  for (const auto& [name, tensor] : loaded) {
    if (auto stored = source.fp8(name)) w.fp8.emplace(name, std::move(*stored));
  }
  w.embed_tokens = take("model.embed_tokens.weight");
  w.final_norm = take("model.norm.weight");
  w.lm_head = spec.tie_word_embeddings ? w.embed_tokens : take("lm_head.weight");
  const std::int64_t q = static_cast<std::int64_t>(spec.num_heads) * spec.head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(spec.num_kv_heads) * spec.head_dim;
  for (std::int32_t i = 0; i < spec.num_layers; ++i) {
    LayerWeights l;
    l.attn_norm = take(layer_name(i, "input_layernorm.weight"));
    if (fused_projections(spec)) {
      const Tensor qkv = take(layer_name(i, "self_attn.qkv_proj.weight"));
      l.q_proj = qkv.slice_rows(0, q);
      l.k_proj = qkv.slice_rows(q, q + kv);
      l.v_proj = qkv.slice_rows(q + kv, q + 2 * kv);
      const Tensor gate_up = take(layer_name(i, "mlp.gate_up_proj.weight"));
      l.gate_proj = gate_up.slice_rows(0, spec.intermediate_size);
      l.up_proj = gate_up.slice_rows(spec.intermediate_size, 2 * spec.intermediate_size);
    } else {
      l.q_proj = take(layer_name(i, "self_attn.q_proj.weight"));
      l.k_proj = take(layer_name(i, "self_attn.k_proj.weight"));
      l.v_proj = take(layer_name(i, "self_attn.v_proj.weight"));
      l.gate_proj = take(layer_name(i, "mlp.gate_proj.weight"));
      l.up_proj = take(layer_name(i, "mlp.up_proj.weight"));
    }
    l.o_proj = take(layer_name(i, "self_attn.o_proj.weight"));
    l.down_proj = take(layer_name(i, "mlp.down_proj.weight"));
    if (spec.attention_bias) {
      l.q_bias = take(layer_name(i, "self_attn.q_proj.bias"));
      l.k_bias = take(layer_name(i, "self_attn.k_proj.bias"));
      l.v_bias = take(layer_name(i, "self_attn.v_proj.bias"));
    }
    if (spec.qk_norm) {
      l.q_norm = take(layer_name(i, "self_attn.q_norm.weight"));
      l.k_norm = take(layer_name(i, "self_attn.k_norm.weight"));
    }
    if (spec.sandwich_norms) {
      l.post_attn_norm = take(layer_name(i, "post_attention_layernorm.weight"));
      l.mlp_norm = take(layer_name(i, "pre_feedforward_layernorm.weight"));
      l.post_mlp_norm = take(layer_name(i, "post_feedforward_layernorm.weight"));
    } else {
      l.mlp_norm = take(layer_name(i, "post_attention_layernorm.weight"));
    }
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace cellm::model
