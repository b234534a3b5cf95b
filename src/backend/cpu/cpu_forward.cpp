#include "backend/cpu/cpu_forward.h"

#include <cmath>
#include <cstdlib>
#include <utility>

#include <cblas.h>

#include "backend/cpu/forward_common.h"
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
  inv_freq_ = rope_tables(spec_, rope_table_dtype);
  attention_scale_ = attention_scale(spec_);
}

void CpuForward::attention_block(std::int32_t layer, const StepRows& rows, KvStore& kv) {
  const model::LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
  const model::LayerSpec& ls = spec_.layers[static_cast<std::size_t>(layer)];
  const auto t = static_cast<std::int64_t>(rows.tokens.size());

  norm_block_input(spec_, w.attn_norm, t, b_);
  linear(b_.h.data(), t, w.q_proj, w.q_bias, b_.q.data());
  linear(b_.h.data(), t, w.k_proj, w.k_bias, b_.k.data());
  linear(b_.h.data(), t, w.v_proj, w.v_bias, b_.v.data());
  const AttentionParams params =
      prepare_attention(spec_, w, inv_freq_[static_cast<std::size_t>(layer)], ls.window,
                        attention_scale_, layer, rows, kv, b_);
  attend_cells(b_.q.data(), kv.k(layer), kv.v(layer), b_.row_cells, params, b_.attn.data());

  linear(b_.attn.data(), t, w.o_proj, Tensor(), b_.o.data());
  add_block_output(spec_, w.post_attn_norm, t, b_);
}

void CpuForward::mlp_block(std::int32_t layer, std::int64_t t) {
  const model::LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
  norm_block_input(spec_, w.mlp_norm, t, b_);
  linear(b_.h.data(), t, w.gate_proj, Tensor(), b_.gate.data());
  linear(b_.h.data(), t, w.up_proj, Tensor(), b_.up.data());
  gated_activation(b_.gate.data(), b_.up.data(), t * spec_.intermediate_size, spec_.activation);
  linear(b_.gate.data(), t, w.down_proj, Tensor(), b_.o.data());
  add_block_output(spec_, w.post_mlp_norm, t, b_);
}

void CpuForward::run(const StepRows& rows, std::span<const std::int64_t> selector, KvStore& kv,
                     float* logits, float* taps) {
  const std::int64_t t = begin_step(spec_, weights_.embed_tokens, rows, b_);
  for (std::int32_t layer = 0; layer < spec_.num_layers; ++layer) {
    attention_block(layer, rows, kv);
    mlp_block(layer, t);
  }
  const std::int64_t r_count = final_norm_rows(spec_, weights_.final_norm, t, selector, taps, b_);
  linear(b_.h.data(), r_count, weights_.lm_head, Tensor(), logits);
  cap_logits(spec_, logits, r_count);
}

}  // namespace cellm::cpu
