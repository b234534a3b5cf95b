#include "backend/cpu/cpu_forward.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <cblas.h>

#include "backend/cpu/ops.h"
#include "core/check.h"

namespace cellm::cpu {
namespace {

// y[rows, out] = x[rows, in] . w[out, in]^T (+ bias[out]).
void linear(const float* x, std::int64_t rows, const Tensor& w, const Tensor& bias, float* y) {
  const std::int64_t out = w.dim(0);
  const std::int64_t in = w.dim(1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(out), static_cast<int>(in), 1.0f, x, static_cast<int>(in),
              w.data_as<float>(), static_cast<int>(in), 0.0f, y, static_cast<int>(out));
  if (bias.data() != nullptr) {
    const auto* b = bias.data_as<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      float* yr = y + r * out;
      for (std::int64_t i = 0; i < out; ++i) {
        yr[i] += b[i];
      }
    }
  }
}

void grow(std::vector<float>& buffer, std::int64_t n) {
  if (static_cast<std::int64_t>(buffer.size()) < n) {
    buffer.resize(static_cast<std::size_t>(n));
  }
}

const float* f32(const Tensor& t) {
  return t.data_as<float>();
}

}  // namespace

Status check_spec(const model::ModelSpec& spec) {
  if (spec.vocab_size <= 0 || spec.hidden_size <= 0 || spec.intermediate_size <= 0 ||
      spec.num_layers <= 0 || spec.num_heads <= 0 || spec.num_kv_heads <= 0 || spec.head_dim <= 0) {
    return invalid_argument(
        "model spec has a non-positive size (vocab {}, hidden {}, intermediate {}, layers {}, "
        "heads {}, kv heads {}, head dim {})",
        spec.vocab_size, spec.hidden_size, spec.intermediate_size, spec.num_layers, spec.num_heads,
        spec.num_kv_heads, spec.head_dim);
  }
  if (spec.num_heads % spec.num_kv_heads != 0) {
    return invalid_argument("model spec: {} heads are not a multiple of {} KV heads",
                            spec.num_heads, spec.num_kv_heads);
  }
  if (static_cast<std::int64_t>(spec.layers.size()) != spec.num_layers) {
    return invalid_argument("model spec lists {} layer specs for {} layers", spec.layers.size(),
                            spec.num_layers);
  }
  if (!(spec.attention_scale >= 0.0f) || !std::isfinite(spec.attention_scale)) {
    return invalid_argument("model spec: attention scale {} must be finite and >= 0",
                            spec.attention_scale);
  }
  for (const auto& cap : {spec.final_logit_softcap, spec.attn_logit_softcap}) {
    if (cap && !(*cap > 0.0f)) {
      return invalid_argument("model spec: soft cap {} must be positive", *cap);
    }
  }
  for (std::size_t i = 0; i < spec.layers.size(); ++i) {
    const model::LayerSpec& layer = spec.layers[i];
    const std::int32_t rd = layer.rope.rotary_dim > 0 ? layer.rope.rotary_dim : spec.head_dim;
    if (layer.rope.rotary_dim < 0 || rd % 2 != 0 || rd > spec.head_dim) {
      return invalid_argument("layer {}: rotary dim {} must be even and at most head dim {}", i,
                              layer.rope.rotary_dim, spec.head_dim);
    }
    if (!(layer.rope.theta > 0.0) || !(layer.rope.factor > 0.0)) {
      return invalid_argument("layer {}: rope theta {} and factor {} must be positive", i,
                              layer.rope.theta, layer.rope.factor);
    }
    if (layer.rope.type == model::RopeType::kLlama3 &&
        (layer.rope.original_max_position <= 0 ||
         !(layer.rope.high_freq_factor > layer.rope.low_freq_factor) ||
         !(layer.rope.low_freq_factor > 0.0))) {
      return invalid_argument(
          "layer {}: llama3 rope needs original_max_position > 0 and high_freq_factor > "
          "low_freq_factor > 0 (got {}, {}, {})",
          i, layer.rope.original_max_position, layer.rope.high_freq_factor,
          layer.rope.low_freq_factor);
    }
    if (layer.window < 0) {
      return invalid_argument("layer {}: sliding window {} is negative", i, layer.window);
    }
  }
  return Status::ok();
}

void KvStore::FreeDeleter::operator()(float* p) const {
  std::free(p);
}

Result<std::unique_ptr<KvStore>> KvStore::create(std::int32_t layers, std::int32_t cells,
                                                 std::int32_t kv_heads, std::int32_t head_dim) {
  const std::int64_t cell_floats = static_cast<std::int64_t>(kv_heads) * head_dim;
  std::unique_ptr<KvStore> store(new KvStore(cells, cell_floats));
  const auto n = static_cast<std::size_t>(cells) * static_cast<std::size_t>(cell_floats);
  for (std::int32_t l = 0; l < layers; ++l) {
    store->k_.emplace_back(static_cast<float*>(std::calloc(n, sizeof(float))));
    store->v_.emplace_back(static_cast<float*>(std::calloc(n, sizeof(float))));
    if (store->k_.back() == nullptr || store->v_.back() == nullptr) {
      return out_of_resources("cannot allocate K/V for {} cells of layer {} ({} bytes each)", cells,
                              l, n * sizeof(float));
    }
  }
  return store;
}

std::size_t KvStore::bytes() const {
  return 2 * k_.size() * static_cast<std::size_t>(cells_) * static_cast<std::size_t>(cell_floats_) *
         sizeof(float);
}

CpuForward::CpuForward(model::ModelSpec spec, model::Weights weights, DType rope_table_dtype)
    : spec_(std::move(spec)), weights_(std::move(weights)) {
  CELLM_CHECK(check_spec(spec_).is_ok(), "CpuForward built from an unchecked spec");
  for (const model::LayerSpec& layer : spec_.layers) {
    inv_freq_.push_back(rope_inv_freq(layer.rope, spec_.head_dim, rope_table_dtype));
  }
  attention_scale_ = spec_.attention_scale > 0.0f
                         ? spec_.attention_scale
                         : static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec_.head_dim)));
}

void store_step_kv(KvStore& kv, std::int32_t layer, const StepRows& rows, const float* k,
                   const float* v, std::int64_t kv_dim) {
  float* k_pool = kv.k(layer);
  float* v_pool = kv.v(layer);
  for (std::size_t r = 0; r < rows.write_cells.size(); ++r) {
    const std::int64_t cell = rows.write_cells[r];
    const auto row = static_cast<std::int64_t>(r);
    std::memcpy(k_pool + cell * kv_dim, k + row * kv_dim, sizeof(float) * kv_dim);
    std::memcpy(v_pool + cell * kv_dim, v + row * kv_dim, sizeof(float) * kv_dim);
  }
}

void visible_cells(const StepRows& rows, std::int32_t window,
                   std::vector<std::span<const std::int32_t>>& cells) {
  cells.resize(rows.history.size());
  for (std::size_t r = 0; r < rows.history.size(); ++r) {
    std::span<const std::int32_t> all = rows.history[r];
    if (window > 0 && all.size() > static_cast<std::size_t>(window)) {
      all = all.last(static_cast<std::size_t>(window));
    }
    cells[r] = all;
  }
}

void CpuForward::attention_block(std::int32_t layer, const StepRows& rows, KvStore& kv) {
  const model::LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
  const model::LayerSpec& ls = spec_.layers[static_cast<std::size_t>(layer)];
  const auto t = static_cast<std::int64_t>(rows.tokens.size());
  const std::int64_t d = spec_.hidden_size;
  const std::int64_t hd = spec_.head_dim;
  const std::int64_t kv_dim = spec_.num_kv_heads * hd;

  rms_norm(x_.data(), f32(w.attn_norm), t, d, spec_.norm_eps, spec_.norm_weight_offset, h_.data());
  linear(h_.data(), t, w.q_proj, w.q_bias, q_.data());
  linear(h_.data(), t, w.k_proj, w.k_bias, k_.data());
  linear(h_.data(), t, w.v_proj, w.v_bias, v_.data());
  if (spec_.qk_norm) {
    rms_norm(q_.data(), f32(w.q_norm), t * spec_.num_heads, hd, spec_.norm_eps,
             spec_.norm_weight_offset, q_.data());
    rms_norm(k_.data(), f32(w.k_norm), t * spec_.num_kv_heads, hd, spec_.norm_eps,
             spec_.norm_weight_offset, k_.data());
  }
  const std::vector<float>& inv = inv_freq_[static_cast<std::size_t>(layer)];
  apply_rope(q_.data(), t, spec_.num_heads, hd, inv, rows.positions.data());
  apply_rope(k_.data(), t, spec_.num_kv_heads, hd, inv, rows.positions.data());

  store_step_kv(kv, layer, rows, k_.data(), v_.data(), kv_dim);
  const float* k_pool = kv.k(layer);
  const float* v_pool = kv.v(layer);
  visible_cells(rows, ls.window, row_cells_);
  AttentionParams params;
  params.heads = spec_.num_heads;
  params.kv_heads = spec_.num_kv_heads;
  params.head_dim = spec_.head_dim;
  params.scale = attention_scale_;
  params.softcap = spec_.attn_logit_softcap;
  attend_cells(q_.data(), k_pool, v_pool, row_cells_, params, attn_.data());

  linear(attn_.data(), t, w.o_proj, Tensor(), o_.data());
  add_block_output(w.post_attn_norm, t);
}

void CpuForward::mlp_block(std::int32_t layer, std::int64_t t) {
  const model::LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
  const std::int64_t d = spec_.hidden_size;
  const std::int64_t ff = spec_.intermediate_size;
  rms_norm(x_.data(), f32(w.mlp_norm), t, d, spec_.norm_eps, spec_.norm_weight_offset, h_.data());
  linear(h_.data(), t, w.gate_proj, Tensor(), gate_.data());
  linear(h_.data(), t, w.up_proj, Tensor(), up_.data());
  gated_activation(gate_.data(), up_.data(), t * ff, spec_.activation);
  linear(gate_.data(), t, w.down_proj, Tensor(), o_.data());
  add_block_output(w.post_mlp_norm, t);
}

void CpuForward::add_block_output(const Tensor& post_norm, std::int64_t t) {
  const std::int64_t d = spec_.hidden_size;
  if (spec_.sandwich_norms) {
    rms_norm(o_.data(), f32(post_norm), t, d, spec_.norm_eps, spec_.norm_weight_offset, o_.data());
  }
  for (std::int64_t i = 0; i < t * d; ++i) {
    x_[static_cast<std::size_t>(i)] += o_[static_cast<std::size_t>(i)];
  }
}

void CpuForward::run(const StepRows& rows, std::span<const std::int64_t> selector, KvStore& kv,
                     float* logits, float* taps) {
  const auto t = static_cast<std::int64_t>(rows.tokens.size());
  const std::int64_t d = spec_.hidden_size;
  const std::int64_t hd = spec_.head_dim;
  CELLM_CHECK(t > 0 && rows.positions.size() == rows.tokens.size() &&
                  rows.write_cells.size() == rows.tokens.size() &&
                  rows.history.size() == rows.tokens.size(),
              "step rows disagree in length");
  grow(x_, t * d);
  grow(h_, t * d);
  grow(o_, t * d);
  grow(q_, t * spec_.num_heads * hd);
  grow(attn_, t * spec_.num_heads * hd);
  grow(k_, t * spec_.num_kv_heads * hd);
  grow(v_, t * spec_.num_kv_heads * hd);
  grow(gate_, t * spec_.intermediate_size);
  grow(up_, t * spec_.intermediate_size);

  const float* embed = f32(weights_.embed_tokens);
  for (std::int64_t r = 0; r < t; ++r) {
    const float* src = embed + rows.tokens[static_cast<std::size_t>(r)] * d;
    float* dst = x_.data() + r * d;
    for (std::int64_t i = 0; i < d; ++i) {
      dst[i] = src[i] * spec_.embedding_scale;
    }
  }
  for (std::int32_t layer = 0; layer < spec_.num_layers; ++layer) {
    attention_block(layer, rows, kv);
    mlp_block(layer, t);
  }

  // Final norm: of every row when taps are wanted, else of the selected rows only.
  const auto r_count = static_cast<std::int64_t>(selector.size());
  grow(h_, std::max(t, r_count) * d);
  if (taps != nullptr) {
    rms_norm(x_.data(), f32(weights_.final_norm), t, d, spec_.norm_eps, spec_.norm_weight_offset,
             taps);
    for (std::int64_t i = 0; i < r_count; ++i) {
      std::memcpy(h_.data() + i * d, taps + selector[static_cast<std::size_t>(i)] * d,
                  sizeof(float) * d);
    }
  } else {
    for (std::int64_t i = 0; i < r_count; ++i) {
      std::memcpy(h_.data() + i * d, x_.data() + selector[static_cast<std::size_t>(i)] * d,
                  sizeof(float) * d);
    }
    rms_norm(h_.data(), f32(weights_.final_norm), r_count, d, spec_.norm_eps,
             spec_.norm_weight_offset, h_.data());
  }
  linear(h_.data(), r_count, weights_.lm_head, Tensor(), logits);
  if (spec_.final_logit_softcap) {
    soft_cap(logits, r_count * spec_.vocab_size, *spec_.final_logit_softcap);
  }
}

}  // namespace cellm::cpu
