#include "backend/cpu/fast_forward.h"

#include <sched.h>

#include <algorithm>
#include <initializer_list>
#include <map>
#include <thread>
#include <utility>

#include <cblas.h>
#include <omp.h>
#include <fmt/format.h>

#include "backend/cpu/cpu_weights.h"
#include "backend/cpu/fast_attention.h"
#include "backend/cpu/fast_math.h"
#include "backend/cpu/forward_common.h"
#include "backend/cpu/ops.h"
#include "model/gguf_model.h"

namespace cellm::cpu {
namespace {

// Below this many query-key products (cells x heads x head_dim over the
// step's rows, ~20 us of work) a step's attention stays on the calling
// thread: waking the pool costs about as much.
constexpr std::int64_t kParallelAttentionProducts = 64 * 1024;

void add_bias(float* y, std::int64_t rows, std::int64_t out, const Tensor& bias) {
  if (bias.data() == nullptr) return;
  const auto* b = bias.data_as<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < out; ++i) y[r * out + i] += b[i];
  }
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

FastForward::FastForward(model::ModelSpec spec, model::Weights weights, DType rope_table_dtype,
                         FastOptions options)
    : spec_(std::move(spec)),
      weights_(std::move(weights)),
      options_(options),
      pool_(std::make_unique<ThreadPool>(options.threads)),
      attn_scratch_(static_cast<std::size_t>(std::max(1, options.threads))) {
  inv_freq_ = rope_tables(spec_, rope_table_dtype);
  attention_scale_ = attention_scale(spec_);
  layers_.resize(weights_.layers.size());
  for (std::size_t i = 0; i < weights_.layers.size(); ++i) {
    const model::LayerWeights& w = weights_.layers[i];
    LayerLinears& l = layers_[i];
    l.q.f32 = w.q_proj;
    l.k.f32 = w.k_proj;
    l.v.f32 = w.v_proj;
    l.o.f32 = w.o_proj;
    l.gate.f32 = w.gate_proj;
    l.up.f32 = w.up_proj;
    l.down.f32 = w.down_proj;
  }
  lm_head_.f32 = weights_.lm_head;
}

Result<std::unique_ptr<FastForward>> FastForward::create(const model::ModelSpec& spec,
                                                         const model::Weights& weights,
                                                         const format::GgufFile* gguf,
                                                         DType rope_table_dtype,
                                                         FastOptions options) {
  CELLM_RETURN_IF_ERROR(check_spec(spec));
  if (options.threads < 0) {
    return invalid_argument("threads {}: give a positive count, or 0 for every core",
                            options.threads);
  }
  if (options.threads == 0) options.threads = available_cores();
  if (!options.force_isa) options.isa = active_isa();
  if (options.isa == Isa::kAvx2 && best_isa() != Isa::kAvx2) {
    return invalid_argument("the fast CPU program cannot use AVX2 on this processor");
  }
  CELLM_ASSIGN_OR_RETURN(model::Weights f32w, to_f32_weights(spec, weights));
  std::unique_ptr<FastForward> f(
      new FastForward(spec, std::move(f32w), rope_table_dtype, options));
  if (gguf != nullptr) CELLM_RETURN_IF_ERROR(f->attach_gguf(*gguf));
  return f;
}

Status FastForward::attach_gguf(const format::GgufFile& gguf) {
  std::map<std::string, const format::GgufTensorInfo*, std::less<>> by_name;
  for (const auto& t : gguf.tensors()) {
    by_name.emplace(model::canonical_tensor_name(spec_.arch, t.name), &t);
  }
  const bool llama = model::gguf_rotary_rows_permuted(spec_.arch);
  auto bind = [&](FastLinear& lin, const std::string& name, std::int32_t rotary) -> Status {
    const auto it = by_name.find(name);
    if (it == by_name.end() || !has_quant_kernel(it->second->type)) return Status::ok();
    CELLM_ASSIGN_OR_RETURN(QMatrix q, qmatrix_from_gguf(gguf, *it->second, rotary));
    if (q.rows != lin.f32.dim(0) || q.cols != lin.f32.dim(1)) {
      return invalid_argument("GGUF tensor '{}' is [{}, {}]; the model's '{}' is {}",
                              it->second->name, q.rows, q.cols, name,
                              shape_string(lin.f32.shape()));
    }
    lin.q = std::move(q);
    lin.dot = dot_row_kernel(lin.q.type, options_.isa);
    lin.tile = dot_tile_kernel(lin.q.type, options_.isa);
    return Status::ok();
  };
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    LayerLinears& l = layers_[i];
    CELLM_RETURN_IF_ERROR(bind(l.q, p + "self_attn.q_proj.weight", llama ? spec_.num_heads : 0));
    CELLM_RETURN_IF_ERROR(bind(l.k, p + "self_attn.k_proj.weight", llama ? spec_.num_kv_heads : 0));
    CELLM_RETURN_IF_ERROR(bind(l.v, p + "self_attn.v_proj.weight", 0));
    CELLM_RETURN_IF_ERROR(bind(l.o, p + "self_attn.o_proj.weight", 0));
    CELLM_RETURN_IF_ERROR(bind(l.gate, p + "mlp.gate_proj.weight", 0));
    CELLM_RETURN_IF_ERROR(bind(l.up, p + "mlp.up_proj.weight", 0));
    CELLM_RETURN_IF_ERROR(bind(l.down, p + "mlp.down_proj.weight", 0));
  }
  const bool own_head = by_name.count("lm_head.weight") != 0;
  CELLM_RETURN_IF_ERROR(
      bind(lm_head_, own_head ? "lm_head.weight" : "model.embed_tokens.weight", 0));
  return Status::ok();
}

std::string FastForward::describe() const {
  std::map<std::string, int> count;
  auto add = [&](const FastLinear& l) {
    ++count[l.q.defined() ? std::string(format::ggml_type_name(l.q.type)) : "f32 (BLAS)"];
  };
  for (const LayerLinears& l : layers_) {
    for (const FastLinear* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) add(*x);
  }
  add(lm_head_);
  std::string out = fmt::format("{} threads, {} kernels:", options_.threads, isa_name(options_.isa));
  for (const auto& [k, n] : count) out += fmt::format(" {} x{}", k, n);
  return out;
}

void FastForward::begin_input(const float* x, std::int64_t t, std::int64_t cols) {
  input_ = Input{x, t, cols, {false, false}};
}

void FastForward::linear(const FastLinear& w, const Tensor& bias, float* y) {
  const std::int64_t t = input_.t;
  const std::int64_t out = w.f32.dim(0);
  if (w.q.defined()) {
    const ActKind kind = act_kind(w.q.type);
    const auto k = static_cast<std::size_t>(kind);
    if (!input_.ready[k]) {
      quantize_rows(kind, input_.x, t, input_.cols, *pool_, acts_[k]);
      input_.ready[k] = true;
    }
    qmatmul(w.q, acts_[k], w.dot, w.tile, *pool_, y, out);
  } else {
    const std::int64_t in = w.f32.dim(1);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(t),
                static_cast<int>(out), static_cast<int>(in), 1.0f, input_.x, static_cast<int>(in),
                w.f32.data_as<float>(), static_cast<int>(in), 0.0f, y, static_cast<int>(out));
  }
  add_bias(y, t, out, bias);
}

void FastForward::linear_group(std::initializer_list<std::pair<const FastLinear*, float*>> group,
                               std::initializer_list<const Tensor*> biases) {
  bool fused = true;
  const FastLinear* first = group.begin()->first;
  for (const auto& [w, y] : group) {
    fused = fused && w->q.defined() && first->q.defined() &&
            act_kind(w->q.type) == act_kind(first->q.type);
  }
  if (!fused) {
    auto b = biases.begin();
    for (const auto& [w, y] : group) linear(*w, **b++, y);
    return;
  }
  const ActKind kind = act_kind(first->q.type);
  const auto k = static_cast<std::size_t>(kind);
  if (!input_.ready[k]) {
    quantize_rows(kind, input_.x, input_.t, input_.cols, *pool_, acts_[k]);
    input_.ready[k] = true;
  }
  const QuantActs& acts = acts_[k];
  pool_->run([&](int id, int n) {
    for (const auto& [w, y] : group) {
      qmatmul_slice(w->q, acts, w->dot, w->tile, y, w->f32.dim(0), id, n);
    }
  });
  auto b = biases.begin();
  for (const auto& [w, y] : group) add_bias(y, input_.t, w->f32.dim(0), **b++);
}

void FastForward::attention_block(std::int32_t layer, const StepRows& rows, KvStore& kv) {
  const model::LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
  const LayerLinears& lin = layers_[static_cast<std::size_t>(layer)];
  const model::LayerSpec& ls = spec_.layers[static_cast<std::size_t>(layer)];
  const auto t = static_cast<std::int64_t>(rows.tokens.size());
  const std::int64_t hd = spec_.head_dim;

  norm_block_input(spec_, w.attn_norm, t, b_);
  begin_input(b_.h.data(), t, spec_.hidden_size);
  linear_group({{&lin.q, b_.q.data()}, {&lin.k, b_.k.data()}, {&lin.v, b_.v.data()}},
               {&w.q_bias, &w.k_bias, &w.v_bias});
  const AttentionParams params =
      prepare_attention(spec_, w, inv_freq_[static_cast<std::size_t>(layer)], ls.window,
                        attention_scale_, layer, rows, kv, b_);
  const float* k_pool = kv.k(layer);
  const float* v_pool = kv.v(layer);
  // Units of a row's heads spread over the pool (each thread's attention
  // runs alone: its OpenMP team is one thread, see ThreadPool::worker and
  // run()). A unit is a whole KV group, whose heads share each key's loads,
  // unless the step has too few groups to keep every thread busy (decode):
  // then single heads. A head's bits do not depend on its unit.
  const std::int64_t q_row = spec_.num_heads * hd;
  const std::int64_t group = spec_.num_heads / spec_.num_kv_heads;
  const std::int64_t threads = pool_->size();
  const std::int64_t unit_heads = t * spec_.num_kv_heads >= threads ? group : 1;
  const std::int64_t row_units = spec_.num_heads / unit_heads;
  auto attend = [&](int id, int n) {
    std::vector<float>& scratch = attn_scratch_[static_cast<std::size_t>(id)];
    for (std::int64_t u = id; u < t * row_units; u += n) {
      const std::int64_t r = u / row_units;
      const auto h0 = static_cast<std::int32_t>((u % row_units) * unit_heads);
      attend_heads_fast(b_.q.data() + r * q_row, k_pool, v_pool,
                        b_.row_cells[static_cast<std::size_t>(r)], params, options_.isa, h0,
                        h0 + static_cast<std::int32_t>(unit_heads), b_.attn.data() + r * q_row,
                        scratch);
    }
  };
  // A small step runs here: waking a thread would cost more than it saves.
  std::int64_t products = 0;
  for (const auto& cells : b_.row_cells) products += static_cast<std::int64_t>(cells.size());
  products *= spec_.num_heads * hd;
  if (threads == 1 || products < kParallelAttentionProducts) {
    attend(0, 1);
  } else {
    pool_->run(attend);
  }

  begin_input(b_.attn.data(), t, spec_.num_heads * hd);
  linear(lin.o, Tensor(), b_.o.data());
  add_block_output(spec_, w.post_attn_norm, t, b_);
}

void FastForward::mlp_block(std::int32_t layer, std::int64_t t) {
  const model::LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
  const LayerLinears& lin = layers_[static_cast<std::size_t>(layer)];
  const std::int64_t ff = spec_.intermediate_size;
  norm_block_input(spec_, w.mlp_norm, t, b_);
  begin_input(b_.h.data(), t, spec_.hidden_size);
  const Tensor none;
  linear_group({{&lin.gate, b_.gate.data()}, {&lin.up, b_.up.data()}}, {&none, &none});
  // Whole rows to each thread (one row of a decode runs here).
  auto activate = [&](int id, int n) {
    for (std::int64_t r = id; r < t; r += n) {
      gated_activation_fast(b_.gate.data() + r * ff, b_.up.data() + r * ff, ff, spec_.activation,
                            options_.isa);
    }
  };
  if (t == 1) {
    activate(0, 1);
  } else {
    pool_->run(activate);
  }
  begin_input(b_.gate.data(), t, ff);
  linear(lin.down, Tensor(), b_.o.data());
  add_block_output(spec_, w.post_mlp_norm, t, b_);
}

void FastForward::run(const StepRows& rows, std::span<const std::int64_t> selector, KvStore& kv,
                      float* logits, float* taps) {
  // The calling thread is the pool's thread 0: its OpenMP regions (the
  // reference's attention) stay one thread for this call, as the workers'.
  const int omp_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  run_layers(rows, selector, kv, logits, taps);
  omp_set_num_threads(omp_threads);
}

void FastForward::run_layers(const StepRows& rows, std::span<const std::int64_t> selector,
                             KvStore& kv, float* logits, float* taps) {
  const std::int64_t t = begin_step(spec_, weights_.embed_tokens, rows, b_);
  for (std::int32_t layer = 0; layer < spec_.num_layers; ++layer) {
    attention_block(layer, rows, kv);
    mlp_block(layer, t);
  }
  const std::int64_t r_count = final_norm_rows(spec_, weights_.final_norm, t, selector, taps, b_);
  if (r_count > 0) {
    begin_input(b_.h.data(), r_count, spec_.hidden_size);
    linear(lm_head_, Tensor(), logits);
    cap_logits(spec_, logits, r_count);
  }
}

}  // namespace cellm::cpu
