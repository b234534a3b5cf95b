#include "program/forward_methods.h"

#include <cmath>
#include <limits>
#include <set>

#include "cellm/types.h"

namespace cellm::program {

Status check_host_input(std::string_view method, std::string_view what, const Tensor& t,
                        DType dtype, int rank) {
  if (t.device() != Device::kCpu) {
    return invalid_argument("{}: input '{}' must be a host tensor, got {}", method, what,
                            t.describe());
  }
  if (t.dtype() != dtype || t.rank() != rank) {
    return invalid_argument("{}: input '{}' is {}; expected a rank-{} {} tensor", method, what,
                            t.describe(), rank, dtype_name(dtype));
  }
  if (t.numel() > 0 && t.data() == nullptr) {
    return invalid_argument("{}: input '{}' has no data", method, what);
  }
  return Status::ok();
}

namespace {
// Whether the cache's table still maps `pos` of `seq` to the placed `cell`
// (a rewind or another placement since makes the placement stale).
bool placement_current(const cache::CellCache& cache, cache::SeqId seq, std::int32_t pos,
                       cache::CellId cell) {
  std::span<const cache::CellId> table = cache.cell_table(seq);
  return pos < static_cast<std::int32_t>(table.size()) &&
         table[static_cast<std::size_t>(pos)] == cell;
}
}  // namespace

Result<ForwardMethods> ForwardMethods::build(const ProgramOptions& options, std::string backend) {
  if (options.max_step <= 0) {
    return invalid_argument("program options: max_step {} must be positive", options.max_step);
  }
  std::set<std::int32_t> widths;
  for (std::int32_t w : options.static_widths) {
    if (w <= 0) return invalid_argument("program options: static width {} must be positive", w);
    if (w <= options.max_step) widths.insert(w);
  }
  if (widths.empty()) {
    return invalid_argument("program options: no static width fits max_step {}", options.max_step);
  }
  if (options.min_prefill_chunk < 0 || options.min_prefill_chunk > options.max_step) {
    return invalid_argument("program options: min_prefill_chunk {} must lie in [0, max_step {}]",
                            options.min_prefill_chunk, options.max_step);
  }
  ForwardMethods m;
  m.options_ = options;
  m.backend_ = std::move(backend);
  for (std::int32_t w : widths) {
    m.methods_.emplace(std::string(kStaticMethodPrefix) + std::to_string(w),
                       MethodEntry{MethodKind::kStatic, w});
  }
  if (options.max_step > *widths.rbegin()) {
    m.methods_.emplace(std::string(kDynamicMethod),
                       MethodEntry{MethodKind::kDynamic, options.max_step});
  }
  m.methods_.emplace(std::string(kModuleMethod),
                     MethodEntry{MethodKind::kModule, options.max_step});
  if (options.device_sampling) {
    m.methods_.emplace(std::string(kSampleMethod), MethodEntry{MethodKind::kSample, 0});
    m.methods_.emplace(std::string(kArgmaxMethod), MethodEntry{MethodKind::kArgmax, 0});
    m.methods_.emplace(std::string(kPenalizeMethod), MethodEntry{MethodKind::kPenalize, 0});
    m.methods_.emplace(std::string(kMaskMethod), MethodEntry{MethodKind::kMask, 0});
    m.methods_.emplace(std::string(kLogprobsMethod), MethodEntry{MethodKind::kLogprobs, 0});
  }
  return m;
}

std::vector<std::string> ForwardMethods::names() const {
  std::vector<std::string> names;
  names.reserve(methods_.size());
  for (const auto& entry : methods_) names.push_back(entry.first);
  return names;
}

MethodEntry* ForwardMethods::find(std::string_view name) {
  auto it = methods_.find(name);
  return it == methods_.end() ? nullptr : &it->second;
}

const MethodEntry* ForwardMethods::find(std::string_view name) const {
  auto it = methods_.find(name);
  return it == methods_.end() ? nullptr : &it->second;
}

const MethodEntry* ForwardMethods::narrowest_static(std::int32_t rows) const {
  const MethodEntry* best = nullptr;
  for (const auto& [name, m] : methods_) {
    if (m.kind == MethodKind::kStatic && m.width >= rows &&
        (best == nullptr || m.width < best->width)) {
      best = &m;
    }
  }
  return best;
}

Result<const MethodEntry*> ForwardMethods::find_loaded(std::string_view name) const {
  const MethodEntry* m = find(name);
  if (m == nullptr) {
    return not_found("execute: method '{}' is not exported by the {} program", name, backend_);
  }
  if (!m->loaded) {
    return invalid_argument("execute: method '{}' is not loaded; call load_method first", name);
  }
  return m;
}

Result<MethodMeta> ForwardMethods::meta(std::string_view name, std::int64_t vocab,
                                        std::int64_t hidden, Device logits_device) const {
  const MethodEntry* m = find(name);
  if (m == nullptr)
    return not_found("method '{}' is not exported by the {} program", name, backend_);
  MethodMeta meta;
  meta.backends = {backend_};
  const std::int64_t rows = options_.max_step;
  switch (m->kind) {
    case MethodKind::kStatic:
    case MethodKind::kDynamic:
    case MethodKind::kModule: {
      const std::int64_t t = m->width;
      meta.dynamic = m->kind != MethodKind::kStatic;
      meta.inputs = {TensorSpec{DType::kI64, {1, t}}, TensorSpec{DType::kI64, {t}},
                     TensorSpec{DType::kI64, {t}}};
      meta.outputs = {TensorSpec{DType::kF32, {t, vocab}, logits_device}};
      if (options_.taps)
        meta.outputs.push_back(TensorSpec{DType::kF32, {t, hidden}, logits_device});
      return meta;
    }
    case MethodKind::kSample:
      meta.dynamic = true;
      meta.inputs = {
          TensorSpec{DType::kF32, {rows, vocab}, logits_device}, TensorSpec{DType::kF32, {rows, 4}},
          TensorSpec{DType::kI64, {rows, static_cast<std::int64_t>(kMaxSuppressedTokens)}}};
      meta.optional_inputs = 1;  // the suppressed ids
      meta.outputs = {TensorSpec{DType::kI64, {rows}}};
      return meta;
    case MethodKind::kArgmax:
      meta.dynamic = true;
      meta.inputs = {TensorSpec{DType::kF32, {rows, vocab}, logits_device}};
      meta.outputs = {TensorSpec{DType::kI64, {rows}}};
      return meta;
    case MethodKind::kPenalize:
      meta.dynamic = true;
      meta.inputs = {TensorSpec{DType::kF32, {rows, vocab}, logits_device},
                     TensorSpec{DType::kF32, {rows, kPenalizeRowParams}},
                     TensorSpec{DType::kI32, {rows + 1}},
                     TensorSpec{DType::kI32, {kPenalizeMaxEntries, 4}}};
      return meta;
    case MethodKind::kLogprobs:
      meta.dynamic = true;
      meta.inputs = {
          TensorSpec{DType::kF32, {rows, vocab}, logits_device},
          TensorSpec{DType::kF32, {rows, kLogprobsParams}}, TensorSpec{DType::kI64, {rows}},
          TensorSpec{DType::kI64, {rows, static_cast<std::int64_t>(kMaxSuppressedTokens)}}};
      meta.optional_inputs = 1;  // the suppressed ids
      meta.outputs = {TensorSpec{DType::kF32, {rows, 1 + kLogprobsMaxTop}},
                      TensorSpec{DType::kI64, {rows, kLogprobsMaxTop}}};
      return meta;
    case MethodKind::kMask:
      meta.dynamic = true;
      meta.inputs = {TensorSpec{DType::kF32, {kMaskMaxRows, vocab}, logits_device},
                     TensorSpec{DType::kI32, {kMaskMaxRows, (vocab + 31) / 32}}};
      return meta;
  }
  return internal_error("method '{}' has an unknown kind", name);
}

Result<ForwardCall> ForwardMethods::check_forward(std::string_view name, const MethodEntry& method,
                                                  std::span<const Tensor> inputs,
                                                  std::int64_t vocab,
                                                  const cache::CellCache& cache) const {
  if (inputs.size() != 3) {
    return invalid_argument("{}: takes 3 inputs (tokens, positions, selector), got {}", name,
                            inputs.size());
  }
  CELLM_RETURN_IF_ERROR(check_host_input(name, "tokens", inputs[0], DType::kI64, 2));
  CELLM_RETURN_IF_ERROR(check_host_input(name, "positions", inputs[1], DType::kI64, 1));
  CELLM_RETURN_IF_ERROR(check_host_input(name, "selector", inputs[2], DType::kI64, 1));
  const std::int64_t t = inputs[0].dim(1);
  if (inputs[0].dim(0) != 1 || inputs[1].dim(0) != t) {
    return invalid_argument("{}: tokens {} and positions {} must be [1, T] and [T]", name,
                            inputs[0].describe(), inputs[1].describe());
  }
  const bool is_static = method.kind == MethodKind::kStatic;
  if (is_static ? t != method.width : (t < 1 || t > method.width)) {
    return invalid_argument(
        "{}: takes {} tokens, got {}", name,
        is_static ? std::to_string(method.width) : "1 to " + std::to_string(method.width), t);
  }
  const std::int64_t r_count = inputs[2].dim(0);
  const std::int64_t r_max = is_static ? method.width : options_.max_step;
  if (r_count < 1 || r_count > r_max) {
    return invalid_argument("{}: the selector has {} rows; expected 1 to {}", name, r_count, r_max);
  }
  ForwardCall call;
  call.tokens = inputs[0].span<std::int64_t>();
  call.positions = inputs[1].span<std::int64_t>();
  call.selector = inputs[2].span<std::int64_t>();
  for (std::size_t i = 0; i < call.selector.size(); ++i) {
    if (call.selector[i] < 0 || call.selector[i] >= t) {
      return invalid_argument("{}: selector entry {} is row {}, outside [0, {})", name, i,
                              call.selector[i], t);
    }
  }
  for (std::size_t r = 0; r < call.tokens.size(); ++r) {
    if (call.tokens[r] < 0 || call.tokens[r] >= vocab) {
      return invalid_argument("{}: row {} has token id {} outside the vocabulary [0, {})", name, r,
                              call.tokens[r], vocab);
    }
    if (call.positions[r] < 0 || call.positions[r] > std::numeric_limits<std::int32_t>::max()) {
      return invalid_argument("{}: row {} has position {} outside [0, 2^31)", name, r,
                              call.positions[r]);
    }
  }
  const cache::StepPlacement* step = cache.current_step();
  if (step == nullptr) {
    return invalid_argument("{}: no step is placed in the bound CellCache; place_step first", name);
  }
  const std::size_t real = step->cells.size();
  if (real > call.tokens.size() || step->positions.size() != real || step->seq_ids.size() != real) {
    return invalid_argument("{}: the placed step has {} tokens but the forward has {} rows", name,
                            real, call.tokens.size());
  }
  call.rows.resize(call.tokens.size());
  for (std::size_t r = 0; r < real; ++r) {
    const cache::SeqId seq = step->seq_ids[r];
    const std::int32_t pos = step->positions[r];
    if (call.positions[r] != pos) {
      return invalid_argument(
          "{}: row {} is at position {} but the cache placed sequence {} at position {}", name, r,
          call.positions[r], seq, pos);
    }
    const cache::CellId cell = step->cells[r];
    if (!placement_current(cache, seq, pos, cell)) {
      return invalid_argument(
          "{}: row {} (sequence {}, position {}) no longer matches its cell "
          "table; the placement is stale",
          name, r, seq, pos);
    }
    call.rows[r] = PlacedRow{seq, pos, cell};
  }
  call.placed = static_cast<std::int32_t>(real);
  return call;
}

namespace {

// The logits every sampler-side method takes: f32 [1..max_rows, vocab] where
// the program keeps them (`device`).
Status check_sampler_logits(std::string_view name, const Tensor& logits, std::int64_t vocab,
                            std::int64_t max_rows, Device device) {
  if (logits.device() != device || logits.dtype() != DType::kF32 || logits.rank() != 2 ||
      logits.dim(1) != vocab || logits.dim(0) < 1 || logits.dim(0) > max_rows ||
      logits.data() == nullptr) {
    return invalid_argument("{}: logits must be {} f32 [1..{}, {}], got {}", name,
                            device == Device::kCuda ? "device" : "host", max_rows, vocab,
                            logits.describe());
  }
  return Status::ok();
}

}  // namespace

Result<MaskCall> ForwardMethods::check_mask(std::span<const Tensor> inputs, std::int64_t vocab,
                                            Device device) const {
  const std::string_view name = kMaskMethod;
  if (inputs.size() != 2) {
    return invalid_argument("{}: takes 2 inputs (logits, words), got {}", name, inputs.size());
  }
  const Tensor& logits = inputs[0];
  CELLM_RETURN_IF_ERROR(check_sampler_logits(name, logits, vocab, kMaskMaxRows, device));
  const std::int64_t rows = logits.dim(0);
  const std::int64_t per_row = (vocab + 31) / 32;
  CELLM_RETURN_IF_ERROR(check_host_input(name, "words", inputs[1], DType::kI32, 2));
  if (inputs[1].dim(0) != rows || inputs[1].dim(1) != per_row) {
    return invalid_argument("{}: words must be i32 [{}, {}], got {}", name, rows, per_row,
                            inputs[1].describe());
  }
  MaskCall call;
  call.rows = static_cast<std::int32_t>(rows);
  call.words_per_row = static_cast<std::int32_t>(per_row);
  call.words = std::span<const std::uint32_t>(static_cast<const std::uint32_t*>(inputs[1].data()),
                                              static_cast<std::size_t>(rows * per_row));
  return call;
}

Result<PenalizeCall> ForwardMethods::check_penalize(std::span<const Tensor> inputs,
                                                    std::int64_t vocab, Device device) const {
  const std::string_view name = kPenalizeMethod;
  if (inputs.size() != 4) {
    return invalid_argument("{}: takes 4 inputs (logits, rows, offsets, entries), got {}", name,
                            inputs.size());
  }
  const Tensor& logits = inputs[0];
  CELLM_RETURN_IF_ERROR(check_sampler_logits(name, logits, vocab, options_.max_step, device));
  const std::int64_t rows = logits.dim(0);
  CELLM_RETURN_IF_ERROR(check_host_input(name, "rows", inputs[1], DType::kF32, 2));
  if (inputs[1].dim(0) != rows || inputs[1].dim(1) != kPenalizeRowParams) {
    return invalid_argument("{}: rows must be f32 [{}, {}], got {}", name, rows, kPenalizeRowParams,
                            inputs[1].describe());
  }
  CELLM_RETURN_IF_ERROR(check_host_input(name, "offsets", inputs[2], DType::kI32, 1));
  if (inputs[2].dim(0) != rows + 1) {
    return invalid_argument("{}: offsets must be i32 [{}], got {}", name, rows + 1,
                            inputs[2].describe());
  }
  const Tensor& entries = inputs[3];
  if (entries.device() != Device::kCpu || entries.dtype() != DType::kI32 || entries.rank() != 2 ||
      entries.dim(1) != 4 || entries.dim(0) > kPenalizeMaxEntries ||
      (entries.numel() > 0 && entries.data() == nullptr)) {
    return invalid_argument("{}: entries must be host i32 [0..{}, 4], got {}", name,
                            kPenalizeMaxEntries, entries.describe());
  }
  PenalizeCall call;
  call.rows = static_cast<std::int32_t>(rows);
  call.row_params = inputs[1].span<const float>();
  call.offsets = inputs[2].span<const std::int32_t>();
  if (entries.numel() > 0) call.entries = entries.span<const std::int32_t>();
  const auto n = static_cast<std::int32_t>(entries.dim(0));
  if (call.offsets[0] != 0 || call.offsets[static_cast<std::size_t>(rows)] != n) {
    return invalid_argument("{}: offsets must run from 0 to the {} entries, got {} .. {}", name, n,
                            call.offsets[0], call.offsets[static_cast<std::size_t>(rows)]);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    if (call.offsets[static_cast<std::size_t>(r + 1)] < call.offsets[static_cast<std::size_t>(r)]) {
      return invalid_argument("{}: offsets fall at row {}", name, r);
    }
  }
  for (std::int32_t e = 0; e < n; ++e) {
    const std::int32_t token = call.entries[static_cast<std::size_t>(e) * 4];
    if (token < 0 || token >= vocab) {
      return invalid_argument("{}: entry {} names token {} outside the vocabulary of {}", name, e,
                              token, vocab);
    }
  }
  return call;
}

Result<LogprobsCall> ForwardMethods::check_logprobs(std::span<const Tensor> inputs,
                                                    std::int64_t vocab, Device device) const {
  const std::string_view name = kLogprobsMethod;
  if (inputs.size() != 3 && inputs.size() != 4) {
    return invalid_argument(
        "{}: takes 3 or 4 inputs (logits, params, tokens[, suppressed]), got {}", name,
        inputs.size());
  }
  const Tensor& logits = inputs[0];
  CELLM_RETURN_IF_ERROR(check_sampler_logits(name, logits, vocab, options_.max_step, device));
  const std::int64_t rows = logits.dim(0);
  CELLM_RETURN_IF_ERROR(check_host_input(name, "params", inputs[1], DType::kF32, 2));
  if (inputs[1].dim(0) != rows || inputs[1].dim(1) != kLogprobsParams) {
    return invalid_argument("{}: params must be f32 [{}, {}], got {}", name, rows, kLogprobsParams,
                            inputs[1].describe());
  }
  CELLM_RETURN_IF_ERROR(check_host_input(name, "tokens", inputs[2], DType::kI64, 1));
  if (inputs[2].dim(0) != rows) {
    return invalid_argument("{}: tokens must be i64 [{}], got {}", name, rows,
                            inputs[2].describe());
  }
  LogprobsCall call;
  call.rows = static_cast<std::int32_t>(rows);
  call.params = inputs[1].span<const float>();
  call.tokens = inputs[2].span<const std::int64_t>();
  if (inputs.size() == 4) {
    CELLM_RETURN_IF_ERROR(check_host_input(name, "suppressed", inputs[3], DType::kI64, 2));
    if (inputs[3].dim(0) != rows ||
        inputs[3].dim(1) != static_cast<std::int64_t>(kMaxSuppressedTokens)) {
      return invalid_argument("{}: suppressed ids must be i64 [{}, {}] (-1: empty), got {}", name,
                              rows, kMaxSuppressedTokens, inputs[3].describe());
    }
    call.suppressed = inputs[3].span<const std::int64_t>();
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const float count = call.params[static_cast<std::size_t>(r * kLogprobsParams + 1)];
    if (count < 0.0f) continue;
    if (!(count <= static_cast<float>(kLogprobsMaxTop)) || count != std::floor(count)) {
      return invalid_argument(
          "{}: row {} asks for {} top logprobs; the count must be an integer "
          "in [-1, {}]",
          name, r, count, kLogprobsMaxTop);
    }
    const std::int64_t token = call.tokens[static_cast<std::size_t>(r)];
    if (token < 0 || token >= vocab) {
      return invalid_argument("{}: row {} names drawn token {} outside the vocabulary of {}", name,
                              r, token, vocab);
    }
  }
  return call;
}

}  // namespace cellm::program
