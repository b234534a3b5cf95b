#include "toy_program.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/log.h"
#include "sampling/logprobs.h"
#include "sampling/penalties.h"
#include "sampling/sampler.h"
#include "sampling/xorshift.h"

namespace cellm::executor::testing {
namespace {

using program::MethodMeta;
using program::TensorSpec;

std::uint64_t mix(std::int64_t token, std::int64_t position, std::size_t layer) {
  return sampling::splitmix64(static_cast<std::uint64_t>(token) * 1000003ull +
                              static_cast<std::uint64_t>(position) * 7919ull +
                              static_cast<std::uint64_t>(layer) * 104729ull + 1ull);
}

std::int64_t window_begin(std::int64_t position, std::int32_t window) {
  return window == 0 ? 0 : std::max<std::int64_t>(0, position - window + 1);
}

}  // namespace

std::int64_t toy_next_token(std::span<const std::int64_t> history,
                            const std::vector<std::int32_t>& windows, std::int64_t vocab) {
  const auto p = static_cast<std::int64_t>(history.size()) - 1;
  std::uint64_t h = 0;
  for (std::size_t l = 0; l < windows.size(); ++l) {
    for (std::int64_t q = window_begin(p, windows[l]); q <= p; ++q) {
      h += mix(history[static_cast<std::size_t>(q)], q, l);
    }
  }
  return static_cast<std::int64_t>(h % static_cast<std::uint64_t>(vocab));
}

std::vector<float> toy_logits(std::int64_t next, std::int64_t vocab) {
  std::vector<float> row(static_cast<std::size_t>(vocab));
  for (std::int64_t v = 0; v < vocab; ++v) {
    const double angle =
        2.0 * std::numbers::pi * static_cast<double>(v - next) / static_cast<double>(vocab);
    row[static_cast<std::size_t>(v)] = static_cast<float>(2.0 * std::cos(angle));
  }
  return row;
}

std::vector<std::int64_t> toy_greedy(std::vector<std::int64_t> prompt, int steps,
                                     const std::vector<std::int32_t>& windows, std::int64_t vocab) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < steps; ++i) {
    const std::int64_t next = toy_next_token(prompt, windows, vocab);
    out.push_back(next);
    prompt.push_back(next);
  }
  return out;
}

ToyProgram::ToyProgram(ToyConfig config) : config_(std::move(config)) {
  const std::int64_t v = config_.vocab;
  const Device logits_device = config_.device_logits ? Device::kCuda : Device::kCpu;
  const auto forward_meta = [&](std::int64_t t, bool dynamic, bool selector) {
    MethodMeta meta;
    meta.inputs = {TensorSpec{DType::kI64, {1, t}}, TensorSpec{DType::kI64, {t}}};
    if (selector) meta.inputs.push_back(TensorSpec{DType::kI64, {t}});
    meta.outputs = {TensorSpec{DType::kF32, {t, v}, logits_device}};
    if (config_.taps) meta.outputs.push_back(TensorSpec{DType::kF32, {t, 2}});
    meta.backends = {"toy"};
    meta.dynamic = dynamic;
    return meta;
  };
  for (std::int32_t w : config_.static_widths) {
    metas["forward_" + std::to_string(w)] = forward_meta(w, false, true);
  }
  if (config_.dynamic_width > 0) {
    metas["forward_others"] = forward_meta(config_.dynamic_width, true, true);
  }
  if (config_.module_width > 0) {
    metas["forward"] = forward_meta(config_.module_width, true, config_.module_selects_rows);
  }
  if (config_.samplers) {
    const std::int64_t r = config_.sampler_rows;
    MethodMeta sample;
    sample.inputs = {TensorSpec{DType::kF32, {r, v}, logits_device},
                     TensorSpec{DType::kF32, {r, 4}},
                     TensorSpec{DType::kI64, {r, static_cast<std::int64_t>(kMaxSuppressedTokens)}}};
    sample.optional_inputs = 1;
    sample.outputs = {TensorSpec{DType::kI64, {r}}};
    sample.backends = {"toy"};
    sample.dynamic = true;
    metas["sample"] = sample;
    MethodMeta argmax = sample;
    argmax.inputs.resize(1);
    argmax.optional_inputs = 0;
    metas["sample_argmax"] = argmax;
    MethodMeta penalize;
    penalize.inputs = {TensorSpec{DType::kF32, {r, v}, logits_device},
                       TensorSpec{DType::kF32, {r, program::kPenalizeRowParams}},
                       TensorSpec{DType::kI32, {r + 1}},
                       TensorSpec{DType::kI32, {program::kPenalizeMaxEntries, 4}}};
    penalize.backends = {"toy"};
    penalize.dynamic = true;
    metas[std::string(program::kPenalizeMethod)] = penalize;
    MethodMeta logprobs;
    logprobs.inputs = {
        TensorSpec{DType::kF32, {r, v}, logits_device},
        TensorSpec{DType::kF32, {r, program::kLogprobsParams}}, TensorSpec{DType::kI64, {r}},
        TensorSpec{DType::kI64, {r, static_cast<std::int64_t>(kMaxSuppressedTokens)}}};
    logprobs.optional_inputs = 1;
    logprobs.outputs = {TensorSpec{DType::kF32, {r, 1 + program::kLogprobsMaxTop}},
                        TensorSpec{DType::kI64, {r, program::kLogprobsMaxTop}}};
    logprobs.backends = {"toy"};
    logprobs.dynamic = true;
    metas[std::string(program::kLogprobsMethod)] = logprobs;
  }
  metas["get_vocab_size"] = MethodMeta{};  // constant methods are listed too, and ignored
  constants["get_vocab_size"] = v;
  constants["get_max_context_len"] = config_.max_context;
  constants["get_offgraph_kv_max_cells"] = config_.max_cells;
  constants["get_kv_cell_bytes"] = 128;
  if (config_.min_prefill_chunk) constants["get_min_prefill_chunk"] = *config_.min_prefill_chunk;
  layout.layer_windows = config_.windows;
}

std::vector<std::string> ToyProgram::method_names() const {
  std::vector<std::string> names;
  for (const auto& [name, meta] : metas) names.push_back(name);
  return names;
}

Result<MethodMeta> ToyProgram::method_meta(std::string_view method) const {
  const auto it = metas.find(method);
  if (it == metas.end()) return not_found("toy: no method {}", method);
  return it->second;
}

std::optional<std::int64_t> ToyProgram::constant(std::string_view name) const {
  const auto it = constants.find(name);
  if (it == constants.end()) return std::nullopt;
  return it->second;
}

Status ToyProgram::bind_cache(std::shared_ptr<cache::CellCache> cache) {
  if (!cache) return invalid_argument("toy: null cache");
  cache_ = std::move(cache);
  const auto cells = static_cast<std::size_t>(cache_->config().max_cells);
  kv_.assign(config_.windows.size(), std::vector<Record>(cells));
  placements_seen_ = cache_->metrics().placements;
  return Status::ok();
}

Status ToyProgram::load_method(std::string_view method) {
  if (!cache_) return internal_error("toy: load_method({}) before bind_cache", method);
  if (!metas.contains(method)) return not_found("toy: no method {}", method);
  if (fail_method == method) return internal_error("toy: {} refuses to load", method);
  loaded.insert(std::string(method));
  return Status::ok();
}

Result<std::vector<Tensor>> ToyProgram::execute(std::string_view method,
                                                std::span<const Tensor> inputs) {
  if (!loaded.contains(method)) return internal_error("toy: {} is not loaded", method);
  if (fail_method == method) return internal_error("toy: {} fails as asked", method);
  if (method == "sample" || method == "sample_argmax") return sample(method, inputs);
  if (method == program::kPenalizeMethod) return penalize(inputs);
  if (method == program::kLogprobsMethod) return logprobs(inputs);
  return forward(method, inputs);
}

Result<std::vector<Tensor>> ToyProgram::forward(std::string_view method,
                                                std::span<const Tensor> inputs) {
  const MethodMeta& meta = metas.find(method)->second;
  if (inputs.size() != meta.inputs.size()) {
    return invalid_argument("toy {}: {} inputs, expected {}", method, inputs.size(),
                            meta.inputs.size());
  }
  for (const Tensor& t : inputs) {
    if (t.dtype() != DType::kI64 || t.device() != Device::kCpu) {
      return invalid_argument("toy {}: input {} is not host i64", method, t.describe());
    }
  }
  const std::int64_t bound = meta.inputs[0].shape[1];
  const std::int64_t t = inputs[0].rank() == 2 ? inputs[0].dim(1) : -1;
  if (inputs[0].rank() != 2 || inputs[0].dim(0) != 1 || t < 1 || t > bound ||
      (!meta.dynamic && t != bound) || inputs[1].rank() != 1 || inputs[1].dim(0) != t) {
    return invalid_argument("toy {}: tokens {} / positions {} do not fit width {}", method,
                            inputs[0].describe(), inputs[1].describe(), bound);
  }
  const cache::StepPlacement* step = cache_->current_step();
  const std::uint64_t placements = cache_->metrics().placements;
  if (step == nullptr || placements == placements_seen_) {
    return internal_error("toy {}: no step was placed before this forward", method);
  }
  const auto real = static_cast<std::int64_t>(step->cells.size());
  if (real > t) return internal_error("toy {}: {} placed tokens in {} rows", method, real, t);
  const std::int64_t* tok = inputs[0].data_as<std::int64_t>();
  const std::int64_t* pos = inputs[1].data_as<std::int64_t>();
  for (std::int64_t i = 0; i < t; ++i) {
    if (i < real) {
      if (tok[i] < 0 || tok[i] >= config_.vocab || pos[i] != step->positions[i]) {
        return internal_error("toy {}: row {} (token {} at {}) disagrees with the placement at {}",
                              method, i, tok[i], pos[i], step->positions[i]);
      }
    } else if (tok[i] != 0 || pos[i] != 0) {
      return internal_error("toy {}: padding row {} carries token {} at position {}", method, i,
                            tok[i], pos[i]);
    }
  }
  placements_seen_ = placements;
  // Write every row: real rows into their cells, padding into the scratch cell.
  for (std::size_t l = 0; l < kv_.size(); ++l) {
    for (std::int64_t i = 0; i < t; ++i) {
      const cache::CellId cell =
          i < real ? step->cells[static_cast<std::size_t>(i)] : cache::kScratchCell;
      kv_[l][static_cast<std::size_t>(cell)] = Record{tok[i], pos[i]};
    }
  }
  std::vector<std::int64_t> selector;
  if (inputs.size() == 3) {
    const auto sel = inputs[2].span<const std::int64_t>();
    selector.assign(sel.begin(), sel.end());
  } else {
    for (std::int64_t i = 0; i < t; ++i) selector.push_back(i);
  }
  const std::int64_t v = config_.vocab;
  logits_.assign(selector.size() * static_cast<std::size_t>(v), 0.0f);
  for (std::size_t r = 0; r < selector.size(); ++r) {
    const std::int64_t row = selector[r];
    if (row < 0 || row >= t) return invalid_argument("toy {}: selector row {}", method, row);
    std::int64_t next = 0;
    if (row < real) {
      auto predicted = next_token(step->seq_ids[static_cast<std::size_t>(row)], pos[row]);
      if (!predicted.ok()) return predicted.status().with_context(std::string(method));
      next = *predicted;
    } else {
      next = static_cast<std::int64_t>(mix(kv_[0][0].token, kv_[0][0].position, 0) %
                                       static_cast<std::uint64_t>(v));
    }
    const std::vector<float> logits = toy_logits(next, v);
    std::copy(logits.begin(), logits.end(), logits_.begin() + static_cast<std::ptrdiff_t>(r) * v);
  }
  calls.push_back(Call{std::string(method), t, real, selector});
  std::vector<Tensor> out;
  out.push_back(Tensor::view(logits_.data(), DType::kF32,
                             {static_cast<std::int64_t>(selector.size()), v},
                             config_.device_logits ? Device::kCuda : Device::kCpu));
  if (config_.taps) {
    taps_.resize(static_cast<std::size_t>(t) * 2);
    for (std::int64_t i = 0; i < t; ++i) {
      taps_[static_cast<std::size_t>(2 * i)] = static_cast<float>(tok[i]);
      taps_[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(pos[i]);
    }
    out.push_back(Tensor::view(taps_.data(), DType::kF32, {t, 2}));
  }
  return out;
}

Result<std::vector<Tensor>> ToyProgram::sample(std::string_view method,
                                               std::span<const Tensor> inputs) {
  const bool full = method == "sample";
  // sample takes its suppressed ids as an optional third input.
  if (full ? (inputs.size() != 2 && inputs.size() != 3) : inputs.size() != 1) {
    return invalid_argument("toy {}: {} inputs", method, inputs.size());
  }
  // The "device" logits are host memory flagged as device: read them as host.
  const Tensor& in = inputs[0];
  const Tensor logits = Tensor::view(in.data(), in.dtype(), in.shape(), Device::kCpu);
  const Tensor* suppressed = inputs.size() == 3 ? &inputs[2] : nullptr;
  auto tokens =
      full ? sampling::sample_rows(logits, inputs[1], suppressed) : sampling::argmax_rows(logits);
  if (!tokens.ok()) return tokens.status();
  tokens_ = std::move(tokens).value();
  Call call{std::string(method), logits.dim(0), 0, {}};
  call.inputs = inputs.size();
  if (suppressed != nullptr) {
    const auto ids = suppressed->span<const std::int64_t>();
    call.suppressed.assign(ids.begin(), ids.end());
  }
  calls.push_back(std::move(call));
  return std::vector<Tensor>{
      Tensor::view(tokens_.data(), DType::kI64, {static_cast<std::int64_t>(tokens_.size())})};
}

// The reference adjustments (sampling/penalties.h) on the "device" logits.
Result<std::vector<Tensor>> ToyProgram::penalize(std::span<const Tensor> inputs) {
  if (inputs.size() != 4) return invalid_argument("toy sample_penalize: {} inputs", inputs.size());
  const Tensor& logits = inputs[0];
  const std::int64_t rows = logits.dim(0);
  const std::int64_t v = logits.dim(1);
  auto* data = const_cast<float*>(static_cast<const float*>(logits.data()));
  const auto prm = inputs[1].span<const float>();
  const auto offsets = inputs[2].span<const std::int32_t>();
  const std::int32_t* words =
      inputs[3].numel() > 0 ? static_cast<const std::int32_t*>(inputs[3].data()) : nullptr;
  std::vector<sampling::PenaltyEntry> entries;
  for (std::int64_t r = 0; r < rows; ++r) {
    entries.clear();
    for (std::int32_t e = offsets[static_cast<std::size_t>(r)];
         e < offsets[static_cast<std::size_t>(r) + 1]; ++e) {
      entries.push_back(sampling::entry_from_words(words + static_cast<std::ptrdiff_t>(e) * 4));
    }
    const std::span<float> row(data + r * v, static_cast<std::size_t>(v));
    sampling::apply_entries(row, entries, prm[static_cast<std::size_t>(r) * 3]);
    sampling::apply_min_p(row, prm[static_cast<std::size_t>(r) * 3 + 1],
                          prm[static_cast<std::size_t>(r) * 3 + 2]);
  }
  Call call{std::string(program::kPenalizeMethod), rows, 0, {}};
  call.inputs = inputs.size();
  call.entries = inputs[3].dim(0);
  calls.push_back(std::move(call));
  return std::vector<Tensor>{};
}

// The host reference (sampling/logprobs.h) on the "device" logits.
Result<std::vector<Tensor>> ToyProgram::logprobs(std::span<const Tensor> inputs) {
  if (inputs.size() != 3 && inputs.size() != 4) {
    return invalid_argument("toy sample_logprobs: {} inputs", inputs.size());
  }
  const Tensor& logits = inputs[0];
  const std::int64_t rows = logits.dim(0);
  const auto v = static_cast<std::size_t>(logits.dim(1));
  constexpr auto kTop = static_cast<std::size_t>(program::kLogprobsMaxTop);
  const auto prm = inputs[1].span<const float>();
  const auto ids = inputs[2].span<const std::int64_t>();
  logprob_values_.assign(static_cast<std::size_t>(rows) * (1 + kTop), 0.0f);
  logprob_ids_.assign(static_cast<std::size_t>(rows) * kTop, -1);
  Call call{std::string(program::kLogprobsMethod), rows, 0, {}};
  call.inputs = inputs.size();
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
    const float count = prm[r * 2 + 1];
    if (count < 0.0f) continue;
    ++call.real;  // rows that asked
    std::vector<Token> banned;
    if (inputs.size() == 4) {
      for (std::size_t j = 0; j < kMaxSuppressedTokens; ++j) {
        const std::int64_t id = inputs[3].span<const std::int64_t>()[r * kMaxSuppressedTokens + j];
        if (id >= 0) banned.push_back(static_cast<Token>(id));
      }
    }
    TokenLogprobs lp;
    sampling::row_logprobs(std::span(static_cast<const float*>(logits.data()) + r * v, v),
                           prm[r * 2], banned, static_cast<Token>(ids[r]), static_cast<int>(count),
                           lp);
    logprob_values_[r * (1 + kTop)] = lp.logprob;
    for (std::size_t j = 0; j < lp.top.size(); ++j) {
      logprob_values_[r * (1 + kTop) + 1 + j] = lp.top[j].logprob;
      logprob_ids_[r * kTop + j] = static_cast<std::int64_t>(lp.top[j].token);
    }
  }
  calls.push_back(std::move(call));
  return std::vector<Tensor>{
      Tensor::view(logprob_values_.data(), DType::kF32,
                   {rows, static_cast<std::int64_t>(1 + kTop)}),
      Tensor::view(logprob_ids_.data(), DType::kI64, {rows, static_cast<std::int64_t>(kTop)})};
}

Result<std::int64_t> ToyProgram::next_token(cache::SeqId seq, std::int64_t p) const {
  const auto table = cache_->cell_table(seq);
  if (p >= static_cast<std::int64_t>(table.size())) {
    return internal_error("toy: sequence {} has no position {}", seq, p);
  }
  std::uint64_t h = 0;
  for (std::size_t l = 0; l < kv_.size(); ++l) {
    for (std::int64_t q = window_begin(p, config_.windows[l]); q <= p; ++q) {
      const Record& rec = kv_[l][static_cast<std::size_t>(table[static_cast<std::size_t>(q)])];
      h += mix(rec.token, rec.position, l);
    }
  }
  return static_cast<std::int64_t>(h % static_cast<std::uint64_t>(config_.vocab));
}

std::unique_ptr<CudaExecutor> make_toy_executor(std::shared_ptr<ToyProgram> program) {
  auto made = CudaExecutor::create(std::move(program), 4, 0);
  if (!made.ok()) {
    CELLM_LOG_ERROR("toy executor: {}", made.status().to_string());
    return nullptr;
  }
  if (!(*made)->initialize()) return nullptr;
  return std::move(made).value();
}

}  // namespace cellm::executor::testing
