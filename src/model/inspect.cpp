#include "model/inspect.h"

#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/gguf_model.h"

namespace cellm::model {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

std::string human_count(std::int64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.2f}B", static_cast<double>(n) / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
  if (n >= 1'000) return fmt::format("{:.1f}K", static_cast<double>(n) / 1e3);
  return fmt::format("{}", n);
}

std::string rope_string(const RopeSpec& r, std::int32_t head_dim) {
  std::string s;
  switch (r.type) {
    case RopeType::kDefault: s = "default"; break;
    case RopeType::kLinear: s = fmt::format("linear x{}", r.factor); break;
    case RopeType::kLlama3:
      s = fmt::format("llama3 x{} (low {}, high {}, original context {})", r.factor,
                      r.low_freq_factor, r.high_freq_factor, r.original_max_position);
      break;
  }
  s += fmt::format(", theta {}", r.theta);
  if (r.rotary_dim != head_dim) s += fmt::format(", rotary {} of {}", r.rotary_dim, head_dim);
  return s;
}

// Distinct (window, rope) kinds with the layers using them: "sliding 512: 15 layers".
std::string attention_summary(const ModelSpec& spec) {
  std::vector<std::pair<LayerSpec, int>> kinds;
  for (const auto& l : spec.layers) {
    bool found = false;
    for (auto& [k, n] : kinds) {
      if (k == l) {
        ++n;
        found = true;
      }
    }
    if (!found) kinds.emplace_back(l, 1);
  }
  std::string out;
  for (const auto& [k, n] : kinds) {
    out += fmt::format("\n  {:>3} layer(s): {}; rope {}", n,
                       k.window > 0 ? fmt::format("sliding window {}", k.window) : "full attention",
                       rope_string(k.rope, spec.head_dim));
  }
  return out;
}

}  // namespace

std::int64_t kv_cache_bytes(const ModelSpec& spec, std::int64_t cells, DType kv_dtype) {
  return 2 * static_cast<std::int64_t>(spec.num_layers) * spec.num_kv_heads * spec.head_dim *
         cells * static_cast<std::int64_t>(dtype_size(kv_dtype));
}

std::vector<std::pair<std::string, Tensor>> named_weights(const Weights& w) {
  std::vector<std::pair<std::string, Tensor>> out;
  const auto add = [&](std::string name, const Tensor& t) {
    if (t.defined() && t.data() != nullptr) out.emplace_back(std::move(name), t);
  };
  add("embed_tokens", w.embed_tokens);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = fmt::format("layers.{}.", i);
    add(p + "attn_norm", l.attn_norm);
    add(p + "q_proj", l.q_proj);
    add(p + "k_proj", l.k_proj);
    add(p + "v_proj", l.v_proj);
    add(p + "q_bias", l.q_bias);
    add(p + "k_bias", l.k_bias);
    add(p + "v_bias", l.v_bias);
    add(p + "q_norm", l.q_norm);
    add(p + "k_norm", l.k_norm);
    add(p + "o_proj", l.o_proj);
    add(p + "post_attn_norm", l.post_attn_norm);
    add(p + "mlp_norm", l.mlp_norm);
    add(p + "gate_proj", l.gate_proj);
    add(p + "up_proj", l.up_proj);
    add(p + "down_proj", l.down_proj);
    add(p + "post_mlp_norm", l.post_mlp_norm);
  }
  add("final_norm", w.final_norm);
  add("lm_head", w.lm_head);
  return out;
}

std::int64_t weight_bytes(const Weights& w) {
  std::set<const void*> seen;
  std::int64_t total = 0;
  for (const auto& [name, t] : named_weights(w)) {
    if (seen.insert(t.data()).second) total += static_cast<std::int64_t>(t.nbytes());
  }
  return total;
}

std::string inspect_report(const LoadedModel& m, const InspectOptions& o) {
  const ModelSpec& s = m.spec;
  std::string r;
  r += fmt::format("model        {}\n", m.path.string());
  r += fmt::format("source       {}\n", m.source);
  r += fmt::format(
      "architecture {} ({} layers, hidden {}, {} heads / {} kv heads of {}, ffn {}, "
      "vocab {}, context {})\n",
      s.arch_name, s.num_layers, s.hidden_size, s.num_heads, s.num_kv_heads, s.head_dim,
      s.intermediate_size, s.vocab_size, s.max_context);
  std::vector<std::string> features;
  if (s.tie_word_embeddings) features.push_back("tied embeddings");
  if (s.attention_bias) features.push_back("q/k/v biases");
  if (s.qk_norm) features.push_back("qk-norm");
  if (s.sandwich_norms) features.push_back("sandwich norms");
  if (s.norm_weight_offset) features.push_back("(1+w) norms");
  if (s.embedding_scale != 1.0f)
    features.push_back(fmt::format("embedding x{:.4g}", s.embedding_scale));
  if (s.final_logit_softcap)
    features.push_back(fmt::format("logit softcap {}", *s.final_logit_softcap));
  if (s.attn_logit_softcap)
    features.push_back(fmt::format("attention softcap {}", *s.attn_logit_softcap));
  features.push_back(s.activation == Activation::kSilu ? "SiLU MLP" : "GELU-tanh MLP");
  features.push_back(fmt::format("rms eps {:g}", s.norm_eps));
  features.push_back(fmt::format("attention scale {:.6g}", s.attention_scale));
  r += fmt::format("features     {}\n", fmt::join(features, ", "));
  r += fmt::format("attention{}\n", attention_summary(s));
  std::string eos;
  for (auto id : s.eos_token_ids) eos += fmt::format("{}{}", eos.empty() ? "" : " ", id);
  r += fmt::format("tokens       bos {}, eos [{}]\n",
                   s.bos_token_id ? fmt::format("{}", *s.bos_token_id) : "none", eos);

  // Distinct storage per dtype.
  const auto named = named_weights(m.weights);
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> per_dtype;  // tensors, bytes
  std::set<const void*> seen;
  std::int64_t params = 0;
  for (const auto& [name, t] : named) {
    if (!seen.insert(t.data()).second) continue;
    auto& [count, bytes] = per_dtype[std::string(dtype_name(t.dtype()))];
    ++count;
    bytes += static_cast<std::int64_t>(t.nbytes());
    params += t.numel();
  }
  r += fmt::format("parameters   {} ({}), config implies {}\n", params, human_count(params),
                   s.parameter_count());
  const std::int64_t wbytes = weight_bytes(m.weights);
  r += fmt::format("weights      {} as loaded:", human_bytes(static_cast<double>(wbytes)));
  for (const auto& [dt, cb] : per_dtype) {
    r += fmt::format(" {} {} in {} tensors;", dt, human_bytes(static_cast<double>(cb.second)),
                     cb.first);
  }
  r.back() = '\n';
  if (s.quant.quantized()) {
    std::int64_t fp8_bytes = 0;
    for (const auto& [name, w] : m.weights.fp8) {
      fp8_bytes += static_cast<std::int64_t>(w.codes.nbytes() + w.scales.nbytes());
    }
    r += fmt::format("quantized    {}; {} FP8 tensors stored in {} (codes + scales)\n",
                     s.quant.describe(), m.weights.fp8.size(),
                     human_bytes(static_cast<double>(fp8_bytes)));
  }
  if (m.gguf) {
    std::map<std::string, std::pair<std::int64_t, std::uint64_t>> stored;
    for (const auto& t : m.gguf->tensors()) {
      auto& [count, bytes] = stored[std::string(format::ggml_type_name(t.type))];
      ++count;
      bytes += t.nbytes;
    }
    r += "stored       ";
    for (const auto& [ty, cb] : stored) {
      r += fmt::format("{} {} in {} tensors; ", ty, human_bytes(static_cast<double>(cb.second)),
                       cb.first);
    }
    r.resize(r.size() - 2);
    r += "\n";
  }

  const std::int64_t context = o.context > 0 ? o.context : s.max_context;
  const std::int64_t cells = context * std::max<std::int64_t>(o.sessions, 1);
  const std::int64_t kv = kv_cache_bytes(s, cells, o.kv_dtype);
  // The CUDA backend converts weights to bf16; with --keep-quantized it keeps
  // GGUF projections in the block types it decodes (the embedding lookup
  // always reads bf16; a tied head in such a type is kept a second time, in
  // blocks).
  const std::int64_t device_weights = params * 2;
  std::int64_t block_weights = device_weights;
  if (m.gguf) {
    for (const auto& t : m.gguf->tensors()) {
      if (t.ne.size() != 2 || !gguf_type_kept_on_gpu(t.type)) continue;
      const std::string name = canonical_tensor_name(s.arch, t.name);
      const bool embed = name == "model.embed_tokens.weight";
      if (embed && !s.tie_word_embeddings) continue;
      block_weights += static_cast<std::int64_t>(t.nbytes) -
                       (embed ? 0 : static_cast<std::int64_t>(t.numel()) * 2);
    }
  }
  r += fmt::format("memory       {} session(s) x {} tokens = {} KV cells\n", o.sessions, context,
                   cells);
  r += fmt::format(
      "  kv cache   2 x {} layers x {} kv heads x {} head_dim x {} cells x {} B ({}) = {}\n",
      s.num_layers, s.num_kv_heads, s.head_dim, cells, dtype_size(o.kv_dtype),
      dtype_name(o.kv_dtype), human_bytes(static_cast<double>(kv)));
  r += fmt::format(
      "  total      {} (weights as loaded) or {} (bf16 weights on a GPU{}) + activations\n",
      human_bytes(static_cast<double>(wbytes + kv)),
      human_bytes(static_cast<double>(device_weights + kv)),
      m.gguf ? fmt::format("; {} with --keep-quantized",
                           human_bytes(static_cast<double>(block_weights + kv)))
             : std::string());
  if (o.list_tensors) {
    r += fmt::format("tensors      {}\n", named.size());
    for (const auto& [name, t] : named) {
      const bool alias = name == "lm_head" && s.tie_word_embeddings;
      r += fmt::format("  {:<28} {:<5} {}{}\n", name, dtype_name(t.dtype()),
                       shape_string(t.shape()), alias ? "  (= embed_tokens)" : "");
    }
  }
  return r;
}

Result<std::string> inspect_model(const std::filesystem::path& path,
                                  const InspectOptions& options) {
  LoadOptions load;
  load.dequant_dtype = DType::kBF16;
  CELLM_ASSIGN_OR_RETURN(LoadedModel m, load_model(path, load));
  return inspect_report(m, options);
}

}  // namespace cellm::model
