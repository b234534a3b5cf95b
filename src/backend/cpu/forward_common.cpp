#include "backend/cpu/forward_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_forward.h"
#include "core/check.h"

namespace cellm::cpu {
namespace {

void grow(std::vector<float>& buffer, std::int64_t n) {
  if (static_cast<std::int64_t>(buffer.size()) < n) buffer.resize(static_cast<std::size_t>(n));
}

const float* f32(const Tensor& t) {
  return t.data_as<float>();
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

}  // namespace

std::vector<std::vector<float>> rope_tables(const model::ModelSpec& spec, DType table_dtype) {
  std::vector<std::vector<float>> tables;
  for (const model::LayerSpec& layer : spec.layers) {
    tables.push_back(rope_inv_freq(layer.rope, spec.head_dim, table_dtype));
  }
  return tables;
}

float attention_scale(const model::ModelSpec& spec) {
  return spec.attention_scale > 0.0f
             ? spec.attention_scale
             : static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.head_dim)));
}

std::int64_t begin_step(const model::ModelSpec& spec, const Tensor& embed, const StepRows& rows,
                        StepBuffers& b) {
  const auto t = static_cast<std::int64_t>(rows.tokens.size());
  const std::int64_t d = spec.hidden_size;
  const std::int64_t hd = spec.head_dim;
  CELLM_CHECK(t > 0 && rows.positions.size() == rows.tokens.size() &&
                  rows.write_cells.size() == rows.tokens.size() &&
                  rows.history.size() == rows.tokens.size(),
              "step rows disagree in length");
  grow(b.x, t * d);
  grow(b.h, t * d);
  grow(b.o, t * d);
  grow(b.q, t * spec.num_heads * hd);
  grow(b.attn, t * spec.num_heads * hd);
  grow(b.k, t * spec.num_kv_heads * hd);
  grow(b.v, t * spec.num_kv_heads * hd);
  grow(b.gate, t * spec.intermediate_size);
  grow(b.up, t * spec.intermediate_size);

  const float* table = f32(embed);
  for (std::int64_t r = 0; r < t; ++r) {
    const float* src = table + rows.tokens[static_cast<std::size_t>(r)] * d;
    float* dst = b.x.data() + r * d;
    for (std::int64_t i = 0; i < d; ++i) dst[i] = src[i] * spec.embedding_scale;
  }
  return t;
}

void norm_block_input(const model::ModelSpec& spec, const Tensor& norm, std::int64_t t,
                      StepBuffers& b) {
  rms_norm(b.x.data(), f32(norm), t, spec.hidden_size, spec.norm_eps, spec.norm_weight_offset,
           b.h.data());
}

AttentionParams prepare_attention(const model::ModelSpec& spec, const model::LayerWeights& w,
                                  std::span<const float> inv_freq, std::int32_t window, float scale,
                                  std::int32_t layer, const StepRows& rows, KvStore& kv,
                                  StepBuffers& b) {
  const auto t = static_cast<std::int64_t>(rows.tokens.size());
  const std::int64_t hd = spec.head_dim;
  if (spec.qk_norm) {
    rms_norm(b.q.data(), f32(w.q_norm), t * spec.num_heads, hd, spec.norm_eps,
             spec.norm_weight_offset, b.q.data());
    rms_norm(b.k.data(), f32(w.k_norm), t * spec.num_kv_heads, hd, spec.norm_eps,
             spec.norm_weight_offset, b.k.data());
  }
  apply_rope(b.q.data(), t, spec.num_heads, hd, inv_freq, rows.positions.data());
  apply_rope(b.k.data(), t, spec.num_kv_heads, hd, inv_freq, rows.positions.data());

  store_step_kv(kv, layer, rows, b.k.data(), b.v.data(), spec.num_kv_heads * hd);
  visible_cells(rows, window, b.row_cells);
  AttentionParams params;
  params.heads = spec.num_heads;
  params.kv_heads = spec.num_kv_heads;
  params.head_dim = spec.head_dim;
  params.scale = scale;
  params.softcap = spec.attn_logit_softcap;
  return params;
}

void add_block_output(const model::ModelSpec& spec, const Tensor& post_norm, std::int64_t t,
                      StepBuffers& b) {
  const std::int64_t d = spec.hidden_size;
  if (spec.sandwich_norms) {
    rms_norm(b.o.data(), f32(post_norm), t, d, spec.norm_eps, spec.norm_weight_offset, b.o.data());
  }
  for (std::int64_t i = 0; i < t * d; ++i) {
    b.x[static_cast<std::size_t>(i)] += b.o[static_cast<std::size_t>(i)];
  }
}

std::int64_t final_norm_rows(const model::ModelSpec& spec, const Tensor& norm, std::int64_t t,
                             std::span<const std::int64_t> selector, float* taps, StepBuffers& b) {
  const std::int64_t d = spec.hidden_size;
  const auto r_count = static_cast<std::int64_t>(selector.size());
  grow(b.h, std::max(t, r_count) * d);
  if (taps != nullptr) {
    rms_norm(b.x.data(), f32(norm), t, d, spec.norm_eps, spec.norm_weight_offset, taps);
    for (std::int64_t i = 0; i < r_count; ++i) {
      std::memcpy(b.h.data() + i * d, taps + selector[static_cast<std::size_t>(i)] * d,
                  sizeof(float) * d);
    }
  } else {
    for (std::int64_t i = 0; i < r_count; ++i) {
      std::memcpy(b.h.data() + i * d, b.x.data() + selector[static_cast<std::size_t>(i)] * d,
                  sizeof(float) * d);
    }
    rms_norm(b.h.data(), f32(norm), r_count, d, spec.norm_eps, spec.norm_weight_offset, b.h.data());
  }
  return r_count;
}

void cap_logits(const model::ModelSpec& spec, float* logits, std::int64_t rows) {
  if (spec.final_logit_softcap) {
    soft_cap(logits, rows * spec.vocab_size, *spec.final_logit_softcap);
  }
}

}  // namespace cellm::cpu
