#include "backend/cuda/device_weights.h"

#include <cstring>
#include <functional>

#include "backend/cuda/arena.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_weights_fill.cuh"
#include "core/dtype.h"

namespace cellm::cuda {
namespace {

struct Dims {
  std::int64_t hidden, q_dim, kv_dim, qkv_dim, inter, vocab, head_dim;
};

Dims dims_of(const model::ModelSpec& s) {
  Dims d{};
  d.hidden = s.hidden_size;
  d.head_dim = s.head_dim;
  d.q_dim = static_cast<std::int64_t>(s.num_heads) * s.head_dim;
  d.kv_dim = static_cast<std::int64_t>(s.num_kv_heads) * s.head_dim;
  d.qkv_dim = d.q_dim + 2 * d.kv_dim;
  d.inter = s.intermediate_size;
  d.vocab = s.vocab_size;
  return d;
}

// Element offsets of every tensor inside the one allocation. Each tensor
// starts on a 256-byte boundary so vectorised kernels may load 16 bytes.
struct Layout {
  struct LayerOffsets {
    std::size_t attn_norm, qkv, qkv_bias, q_norm, k_norm, o, post_attn_norm, mlp_norm, gate_up,
        down, post_mlp_norm;
  };
  std::size_t embed = 0, final_norm = 0, lm_head = 0, total = 0;
  std::vector<LayerOffsets> layers;
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  std::size_t take(std::int64_t count) {
    const std::size_t at = total;
    total += align_up(static_cast<std::size_t>(count) * sizeof(bf16)) / sizeof(bf16);
    return at;
  }
};

// `quant`, when given, names the projections kept in blocks: they take no
// bf16 room (offset kNone).
Layout plan(const model::ModelSpec& s, const QuantWeights* quant = nullptr) {
  const Dims d = dims_of(s);
  Layout l;
  auto matrix = [&l](const DeviceQuant* q, std::int64_t count) {
    return q != nullptr && !q->empty() ? Layout::kNone : l.take(count);
  };
  l.embed = l.take(d.vocab * d.hidden);
  l.final_norm = l.take(d.hidden);
  const bool head_q = quant != nullptr && !quant->lm_head.empty();
  l.lm_head = s.tie_word_embeddings ? l.embed : head_q ? Layout::kNone : l.take(d.vocab * d.hidden);
  const bool sandwich = s.sandwich_norms;
  for (int i = 0; i < s.num_layers; ++i) {
    const QuantWeights::Layer* q =
        quant != nullptr ? &quant->layers[static_cast<std::size_t>(i)] : nullptr;
    Layout::LayerOffsets o{};
    o.attn_norm = l.take(d.hidden);
    o.qkv = matrix(q ? &q->qkv : nullptr, d.qkv_dim * d.hidden);
    o.qkv_bias = s.attention_bias ? l.take(d.qkv_dim) : Layout::kNone;
    o.q_norm = s.qk_norm ? l.take(d.head_dim) : Layout::kNone;
    o.k_norm = s.qk_norm ? l.take(d.head_dim) : Layout::kNone;
    o.o = matrix(q ? &q->o : nullptr, d.hidden * d.q_dim);
    o.post_attn_norm = sandwich ? l.take(d.hidden) : Layout::kNone;
    o.mlp_norm = l.take(d.hidden);
    o.gate_up = matrix(q ? &q->gate_up : nullptr, 2 * d.inter * d.hidden);
    o.down = matrix(q ? &q->down : nullptr, d.hidden * d.inter);
    o.post_mlp_norm = sandwich ? l.take(d.hidden) : Layout::kNone;
    l.layers.push_back(o);
  }
  return l;
}

Result<DeviceWeights> allocate(const model::ModelSpec& spec, const Layout& layout) {
  DeviceWeights w;
  CELLM_ASSIGN_OR_RETURN(w.storage, DeviceBuffer<bf16>::allocate(layout.total));
  const bf16* base = w.storage.data();
  auto at = [&](std::size_t off) -> const bf16* {
    return off == Layout::kNone ? nullptr : base + off;
  };
  w.embed = at(layout.embed);
  w.final_norm = at(layout.final_norm);
  w.lm_head = at(layout.lm_head);
  for (const auto& o : layout.layers) {
    DeviceLayer l;
    l.attn_norm = at(o.attn_norm);
    l.qkv = at(o.qkv);
    l.qkv_bias = at(o.qkv_bias);
    l.q_norm = at(o.q_norm);
    l.k_norm = at(o.k_norm);
    l.o = at(o.o);
    l.post_attn_norm = at(o.post_attn_norm);
    l.mlp_norm = at(o.mlp_norm);
    l.gate_up = at(o.gate_up);
    l.down = at(o.down);
    l.post_mlp_norm = at(o.post_mlp_norm);
    w.layers.push_back(l);
  }
  (void)spec;
  return w;
}

// Converts a host float tensor to bf16 and copies it to device offset `off`
// (nothing for kNone: a projection kept in blocks).
Status upload(bf16* base, std::size_t off, const Tensor& t, std::int64_t expected,
              std::string_view name, std::vector<std::uint16_t>& staging) {
  if (off == Layout::kNone) return Status::ok();
  if (!t.defined() || t.numel() != expected) {
    return invalid_argument("weight {}: expected {} elements, got {}", name, expected,
                            t.defined() ? t.describe() : std::string("nothing"));
  }
  if (t.device() != Device::kCpu) return invalid_argument("weight {} is not a host tensor", name);
  const auto n = static_cast<std::size_t>(expected);
  staging.resize(n);
  switch (t.dtype()) {
    case DType::kBF16: std::memcpy(staging.data(), t.data(), n * sizeof(std::uint16_t)); break;
    case DType::kF32: {
      const float* src = t.data_as<float>();
      for (std::size_t i = 0; i < n; ++i) staging[i] = f32_to_bf16(src[i]);
      break;
    }
    case DType::kF16: {
      const auto* src = t.data_as<std::uint16_t>();
      for (std::size_t i = 0; i < n; ++i) staging[i] = f32_to_bf16(f16_to_f32(src[i]));
      break;
    }
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kF8E4M3:
      return invalid_argument("weight {} has dtype {}; expected a float type", name,
                              dtype_name(t.dtype()));
  }
  CELLM_CUDA_CHECK(
      cudaMemcpy(base + off, staging.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
  return Status::ok();
}

// The bf16 room the projections outside `quant` need, with `quant`'s parts
// attached to their layers.
Result<DeviceWeights> allocate_with(const model::ModelSpec& spec, QuantWeights quant) {
  const Layout layout = plan(spec, quant.layers.empty() ? nullptr : &quant);
  CELLM_ASSIGN_OR_RETURN(DeviceWeights w, allocate(spec, layout));
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const QuantWeights::Layer& q = quant.layers.empty() ? QuantWeights::Layer{} : quant.layers[i];
    w.layers[i].qkv_q = q.qkv;
    w.layers[i].o_q = q.o;
    w.layers[i].gate_up_q = q.gate_up;
    w.layers[i].down_q = q.down;
  }
  w.lm_head_q = quant.lm_head;
  w.quant = std::move(quant);
  return w;
}

}  // namespace

std::size_t device_weight_bytes(const model::ModelSpec& spec) {
  return plan(spec).total * sizeof(bf16);
}

Result<DeviceWeights> upload_weights(const model::ModelSpec& spec, const model::Weights& weights,
                                     const format::GgufFile* gguf, bool keep_quantized) {
  if (static_cast<int>(weights.layers.size()) != spec.num_layers) {
    return invalid_argument("weights hold {} layers; the spec says {}", weights.layers.size(),
                            spec.num_layers);
  }
  QuantWeights quant;
  if (keep_quantized && gguf != nullptr) {
    CELLM_ASSIGN_OR_RETURN(quant, upload_quant_weights(spec, *gguf));
  } else if (keep_quantized) {
    CELLM_ASSIGN_OR_RETURN(quant, upload_fp8_weights(spec, weights));
  }
  CELLM_ASSIGN_OR_RETURN(DeviceWeights w, allocate_with(spec, std::move(quant)));
  const Layout layout = plan(spec, w.quant.layers.empty() ? nullptr : &w.quant);
  bf16* base = w.storage.data();
  const Dims d = dims_of(spec);
  std::vector<std::uint16_t> staging;
  CELLM_RETURN_IF_ERROR(upload(base, layout.embed, weights.embed_tokens, d.vocab * d.hidden,
                               "embed_tokens", staging));
  CELLM_RETURN_IF_ERROR(
      upload(base, layout.final_norm, weights.final_norm, d.hidden, "final_norm", staging));
  if (!spec.tie_word_embeddings) {
    CELLM_RETURN_IF_ERROR(
        upload(base, layout.lm_head, weights.lm_head, d.vocab * d.hidden, "lm_head", staging));
  }
  for (int i = 0; i < spec.num_layers; ++i) {
    const model::LayerWeights& lw = weights.layers[static_cast<std::size_t>(i)];
    const auto& o = layout.layers[static_cast<std::size_t>(i)];
    auto name = [i](std::string_view what) { return fmt::format("layers.{}.{}", i, what); };
    CELLM_RETURN_IF_ERROR(
        upload(base, o.attn_norm, lw.attn_norm, d.hidden, name("attn_norm"), staging));
    if (o.qkv != Layout::kNone) {
      CELLM_RETURN_IF_ERROR(
          upload(base, o.qkv, lw.q_proj, d.q_dim * d.hidden, name("q_proj"), staging));
      CELLM_RETURN_IF_ERROR(upload(base, o.qkv + static_cast<std::size_t>(d.q_dim * d.hidden),
                                   lw.k_proj, d.kv_dim * d.hidden, name("k_proj"), staging));
      CELLM_RETURN_IF_ERROR(
          upload(base, o.qkv + static_cast<std::size_t>((d.q_dim + d.kv_dim) * d.hidden), lw.v_proj,
                 d.kv_dim * d.hidden, name("v_proj"), staging));
    }
    if (o.qkv_bias != Layout::kNone) {
      CELLM_RETURN_IF_ERROR(upload(base, o.qkv_bias, lw.q_bias, d.q_dim, name("q_bias"), staging));
      CELLM_RETURN_IF_ERROR(upload(base, o.qkv_bias + static_cast<std::size_t>(d.q_dim), lw.k_bias,
                                   d.kv_dim, name("k_bias"), staging));
      CELLM_RETURN_IF_ERROR(upload(base, o.qkv_bias + static_cast<std::size_t>(d.q_dim + d.kv_dim),
                                   lw.v_bias, d.kv_dim, name("v_bias"), staging));
    }
    if (o.q_norm != Layout::kNone) {
      CELLM_RETURN_IF_ERROR(upload(base, o.q_norm, lw.q_norm, d.head_dim, name("q_norm"), staging));
      CELLM_RETURN_IF_ERROR(upload(base, o.k_norm, lw.k_norm, d.head_dim, name("k_norm"), staging));
    }
    CELLM_RETURN_IF_ERROR(
        upload(base, o.o, lw.o_proj, d.hidden * d.q_dim, name("o_proj"), staging));
    if (o.post_attn_norm != Layout::kNone) {
      CELLM_RETURN_IF_ERROR(upload(base, o.post_attn_norm, lw.post_attn_norm, d.hidden,
                                   name("post_attn_norm"), staging));
      CELLM_RETURN_IF_ERROR(upload(base, o.post_mlp_norm, lw.post_mlp_norm, d.hidden,
                                   name("post_mlp_norm"), staging));
    }
    CELLM_RETURN_IF_ERROR(
        upload(base, o.mlp_norm, lw.mlp_norm, d.hidden, name("mlp_norm"), staging));
    if (o.gate_up != Layout::kNone) {
      CELLM_RETURN_IF_ERROR(
          upload(base, o.gate_up, lw.gate_proj, d.inter * d.hidden, name("gate_proj"), staging));
      CELLM_RETURN_IF_ERROR(upload(base, o.gate_up + static_cast<std::size_t>(d.inter * d.hidden),
                                   lw.up_proj, d.inter * d.hidden, name("up_proj"), staging));
    }
    CELLM_RETURN_IF_ERROR(
        upload(base, o.down, lw.down_proj, d.hidden * d.inter, name("down_proj"), staging));
  }
  return w;
}

Result<DeviceWeights> random_weights(const model::ModelSpec& spec, std::uint64_t seed, bool fp8) {
  QuantWeights quant;
  if (fp8) {
    CELLM_ASSIGN_OR_RETURN(quant, random_fp8_weights(spec, seed, 0.02f));
  }
  CELLM_ASSIGN_OR_RETURN(DeviceWeights w, allocate_with(spec, std::move(quant)));
  const Layout layout = plan(spec, w.quant.layers.empty() ? nullptr : &w.quant);
  bf16* base = w.storage.data();
  const Dims d = dims_of(spec);
  const float bound = 0.02f * 1.7320508f;  // uniform with std 0.02
  const float norm_value = spec.norm_weight_offset ? 0.0f : 1.0f;
  std::uint64_t stream_id = seed * 1000003ull;
  auto matrix = [&](std::size_t off, std::int64_t count) {
    if (off == Layout::kNone) return;  // in FP8
    launch_fill_uniform(base + off, static_cast<std::size_t>(count), bound, ++stream_id, nullptr);
  };
  auto norm = [&](std::size_t off, std::int64_t count) {
    if (off != Layout::kNone) {
      launch_fill_constant(base + off, static_cast<std::size_t>(count), norm_value, nullptr);
    }
  };
  const float embed_bound = 1.7320508f;  // std 1
  launch_fill_uniform(base + layout.embed, static_cast<std::size_t>(d.vocab * d.hidden),
                      embed_bound, ++stream_id, nullptr);
  norm(layout.final_norm, d.hidden);
  if (!spec.tie_word_embeddings) {
    launch_fill_uniform(base + layout.lm_head, static_cast<std::size_t>(d.vocab * d.hidden),
                        embed_bound, ++stream_id, nullptr);
  }
  for (const auto& o : layout.layers) {
    norm(o.attn_norm, d.hidden);
    matrix(o.qkv, d.qkv_dim * d.hidden);
    if (o.qkv_bias != Layout::kNone) {
      launch_fill_constant(base + o.qkv_bias, static_cast<std::size_t>(d.qkv_dim), 0.0f, nullptr);
    }
    norm(o.q_norm, d.head_dim);
    norm(o.k_norm, d.head_dim);
    matrix(o.o, d.hidden * d.q_dim);
    norm(o.post_attn_norm, d.hidden);
    norm(o.mlp_norm, d.hidden);
    matrix(o.gate_up, 2 * d.inter * d.hidden);
    matrix(o.down, d.hidden * d.inter);
    norm(o.post_mlp_norm, d.hidden);
  }
  CELLM_CUDA_CHECK(cudaDeviceSynchronize());
  return w;
}

}  // namespace cellm::cuda

namespace cellm::cuda {

Result<model::Weights> download_weights(const model::ModelSpec& spec,
                                        const DeviceWeights& weights) {
  const Layout layout = plan(spec);
  const Dims d = dims_of(spec);
  auto host = std::shared_ptr<std::uint16_t[]>(new std::uint16_t[layout.total]);
  CELLM_CUDA_CHECK(cudaMemcpy(host.get(), weights.storage.data(), layout.total * sizeof(bf16),
                              cudaMemcpyDeviceToHost));
  std::shared_ptr<void> owner = host;
  auto view = [&](std::size_t off, Shape shape) -> Tensor {
    if (off == Layout::kNone) return Tensor();
    return Tensor::view_owned(host.get() + off, DType::kBF16, std::move(shape), Device::kCpu,
                              owner);
  };
  model::Weights w;
  w.embed_tokens = view(layout.embed, {d.vocab, d.hidden});
  w.final_norm = view(layout.final_norm, {d.hidden});
  w.lm_head = view(layout.lm_head, {d.vocab, d.hidden});
  for (const auto& o : layout.layers) {
    model::LayerWeights l;
    l.attn_norm = view(o.attn_norm, {d.hidden});
    l.q_proj = view(o.qkv, {d.q_dim, d.hidden});
    l.k_proj = view(o.qkv + static_cast<std::size_t>(d.q_dim * d.hidden), {d.kv_dim, d.hidden});
    l.v_proj = view(o.qkv + static_cast<std::size_t>((d.q_dim + d.kv_dim) * d.hidden),
                    {d.kv_dim, d.hidden});
    if (o.qkv_bias != Layout::kNone) {
      l.q_bias = view(o.qkv_bias, {d.q_dim});
      l.k_bias = view(o.qkv_bias + static_cast<std::size_t>(d.q_dim), {d.kv_dim});
      l.v_bias = view(o.qkv_bias + static_cast<std::size_t>(d.q_dim + d.kv_dim), {d.kv_dim});
    }
    l.q_norm = view(o.q_norm, {d.head_dim});
    l.k_norm = view(o.k_norm, {d.head_dim});
    l.o_proj = view(o.o, {d.hidden, d.q_dim});
    l.post_attn_norm = view(o.post_attn_norm, {d.hidden});
    l.mlp_norm = view(o.mlp_norm, {d.hidden});
    l.gate_proj = view(o.gate_up, {d.inter, d.hidden});
    l.up_proj = view(o.gate_up + static_cast<std::size_t>(d.inter * d.hidden), {d.inter, d.hidden});
    l.down_proj = view(o.down, {d.hidden, d.inter});
    l.post_mlp_norm = view(o.post_mlp_norm, {d.hidden});
    w.layers.push_back(std::move(l));
  }
  w.keep_alive.push_back(owner);
  return w;
}

}  // namespace cellm::cuda
