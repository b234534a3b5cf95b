#include "backend/cpu/cpu_program.h"

#include <algorithm>
#include <set>
#include <utility>

#include "backend/cpu/cpu_weights.h"
#include "cache/cell_cache.h"
#include "core/check.h"

namespace cellm::cpu {
namespace {

using program::MethodMeta;
using program::TensorSpec;

constexpr std::int32_t kScratchRow[1] = {cache::kScratchCell};

Status check_input(std::string_view method, std::string_view what, const Tensor& t, DType dtype,
                   int rank) {
  if (t.device() != Device::kCpu) {
    return invalid_argument("{}: input '{}' is on a device; the CPU program takes host tensors",
                            method, what);
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

}  // namespace

Result<std::unique_ptr<CpuProgram>> CpuProgram::create(const model::ModelSpec& spec,
                                                       const model::Weights& weights,
                                                       const program::ProgramOptions& options) {
  CELLM_RETURN_IF_ERROR(check_spec(spec));
  if (options.max_step <= 0) {
    return invalid_argument("program options: max_step {} must be positive", options.max_step);
  }
  std::set<std::int32_t> widths;
  for (std::int32_t w : options.static_widths) {
    if (w <= 0) {
      return invalid_argument("program options: static width {} must be positive", w);
    }
    if (w <= options.max_step) {
      widths.insert(w);
    }
  }
  if (widths.empty()) {
    return invalid_argument("program options: no static width fits max_step {}", options.max_step);
  }
  if (options.min_prefill_chunk < 0 || options.min_prefill_chunk > options.max_step) {
    return invalid_argument("program options: min_prefill_chunk {} must lie in [0, max_step {}]",
                            options.min_prefill_chunk, options.max_step);
  }
  if (options.rope_table_dtype != DType::kF32 && options.rope_table_dtype != DType::kBF16 &&
      options.rope_table_dtype != DType::kF16) {
    return invalid_argument("program options: rope_table_dtype {} must be f32, bf16 or f16",
                            dtype_name(options.rope_table_dtype));
  }
  std::int32_t kv_cells = options.kv_cells;
  if (kv_cells == 0) {
    kv_cells = 4 * std::min(spec.max_context > 0 ? spec.max_context : 8192, 8192) + 1;
  }
  if (kv_cells < 2) {
    return invalid_argument("program options: kv_cells {} must be at least 2 (scratch + one)",
                            options.kv_cells);
  }
  CELLM_ASSIGN_OR_RETURN(model::Weights f32, to_f32_weights(spec, weights));
  auto forward = std::make_unique<CpuForward>(spec, std::move(f32), options.rope_table_dtype);
  auto program = std::unique_ptr<CpuProgram>(new CpuProgram(options, kv_cells, std::move(forward)));
  for (std::int32_t w : widths) {
    program->methods_.emplace(std::string(program::kStaticMethodPrefix) + std::to_string(w),
                              Method{Kind::kStatic, w});
  }
  if (options.max_step > *widths.rbegin()) {
    program->methods_.emplace(std::string(program::kDynamicMethod),
                              Method{Kind::kDynamic, options.max_step});
  }
  program->methods_.emplace(std::string(program::kModuleMethod),
                            Method{Kind::kModule, options.max_step});
  if (options.device_sampling) {
    program->methods_.emplace(std::string(program::kSampleMethod), Method{Kind::kSample, 0});
    program->methods_.emplace(std::string(program::kArgmaxMethod), Method{Kind::kArgmax, 0});
  }
  return program;
}

CpuProgram::CpuProgram(program::ProgramOptions options, std::int32_t kv_cells,
                       std::unique_ptr<CpuForward> forward)
    : options_(std::move(options)), kv_cells_(kv_cells), forward_(std::move(forward)) {}

std::vector<std::string> CpuProgram::method_names() const {
  std::vector<std::string> names;
  names.reserve(methods_.size());
  for (const auto& [name, method] : methods_) {
    names.push_back(name);
  }
  return names;
}

Result<MethodMeta> CpuProgram::method_meta(std::string_view name) const {
  auto it = methods_.find(name);
  if (it == methods_.end()) {
    return not_found("method '{}' is not exported by the CPU program", name);
  }
  const Method& m = it->second;
  const std::int64_t vocab = spec().vocab_size;
  MethodMeta meta;
  meta.backends = {std::string(kBackendName)};
  switch (m.kind) {
    case Kind::kStatic:
    case Kind::kDynamic:
    case Kind::kModule: {
      const std::int64_t t = m.width;
      meta.dynamic = m.kind != Kind::kStatic;
      meta.inputs = {TensorSpec{DType::kI64, {1, t}}, TensorSpec{DType::kI64, {t}},
                     TensorSpec{DType::kI64, {t}}};
      meta.outputs = {TensorSpec{DType::kF32, {t, vocab}}};
      if (options_.taps) {
        meta.outputs.push_back(TensorSpec{DType::kF32, {t, spec().hidden_size}});
      }
      return meta;
    }
    case Kind::kSample:
      meta.dynamic = true;
      meta.inputs = {TensorSpec{DType::kF32, {options_.max_step, vocab}},
                     TensorSpec{DType::kF32, {options_.max_step, 4}}};
      meta.outputs = {TensorSpec{DType::kI64, {options_.max_step}}};
      return meta;
    case Kind::kArgmax:
      meta.dynamic = true;
      meta.inputs = {TensorSpec{DType::kF32, {options_.max_step, vocab}}};
      meta.outputs = {TensorSpec{DType::kI64, {options_.max_step}}};
      return meta;
  }
  return internal_error("method '{}' has an unknown kind", name);
}

std::optional<std::int64_t> CpuProgram::constant(std::string_view name) const {
  if (name == program::kVocabSizeConstant) {
    return spec().vocab_size;
  }
  if (name == program::kMaxContextConstant) {
    return spec().max_context;
  }
  if (name == program::kMaxCellsConstant) {
    return kv_cells_;
  }
  if (name == program::kMinSelectedRowsConstant && options_.min_prefill_chunk > 0) {
    return options_.min_prefill_chunk;
  }
  return std::nullopt;
}

program::CacheLayout CpuProgram::cache_layout() const {
  program::CacheLayout layout;
  for (const model::LayerSpec& layer : spec().layers) {
    layout.layer_windows.push_back(layer.window);
  }
  return layout;
}

Status CpuProgram::bind_cache(std::shared_ptr<cache::CellCache> cache) {
  if (cache == nullptr) {
    return invalid_argument("bind_cache: the cache is null");
  }
  const std::int32_t cells = cache->config().max_cells;
  if (cells < 2 || cells > kv_cells_) {
    return invalid_argument(
        "bind_cache: the cache has {} cells; the CPU program holds at most {} "
        "(get_offgraph_kv_max_cells)",
        cells, kv_cells_);
  }
  CELLM_ASSIGN_OR_RETURN(
      kv_, KvStore::create(spec().num_layers, cells, spec().num_kv_heads, spec().head_dim));
  cache_ = std::move(cache);
  return Status::ok();
}

Status CpuProgram::load_method(std::string_view name) {
  auto it = methods_.find(name);
  if (it == methods_.end()) {
    return not_found("load_method: method '{}' is not exported by the CPU program", name);
  }
  const Kind kind = it->second.kind;
  if ((kind == Kind::kStatic || kind == Kind::kDynamic || kind == Kind::kModule) &&
      cache_ == nullptr) {
    return invalid_argument("load_method '{}': bind a CellCache first", name);
  }
  it->second.loaded = true;
  return Status::ok();
}

Result<std::vector<Tensor>> CpuProgram::execute(std::string_view name,
                                                std::span<const Tensor> inputs) {
  auto it = methods_.find(name);
  if (it == methods_.end()) {
    return not_found("execute: method '{}' is not exported by the CPU program", name);
  }
  if (!it->second.loaded) {
    return invalid_argument("execute: method '{}' is not loaded; call load_method first", name);
  }
  switch (it->second.kind) {
    case Kind::kStatic:
    case Kind::kDynamic:
    case Kind::kModule: return run_forward(it->first, it->second, inputs);
    case Kind::kSample:
    case Kind::kArgmax: return run_sampler(it->first, it->second, inputs);
  }
  return internal_error("method '{}' has an unknown kind", name);
}

Result<StepRows> CpuProgram::resolve_step(const std::string& name,
                                          std::span<const std::int64_t> tokens,
                                          std::span<const std::int64_t> positions) const {
  const cache::StepPlacement* step = cache_->current_step();
  if (step == nullptr) {
    return invalid_argument("{}: no step is placed in the bound CellCache; place_step first", name);
  }
  const std::size_t t = tokens.size();
  const std::size_t real = step->cells.size();
  if (real > t || step->positions.size() != real || step->seq_ids.size() != real) {
    return invalid_argument("{}: the placed step has {} tokens but the forward has {} rows", name,
                            real, t);
  }
  StepRows rows;
  rows.tokens = tokens;
  rows.positions = positions;
  rows.write_cells.resize(t, cache::kScratchCell);
  rows.history.resize(t, std::span<const std::int32_t>(kScratchRow));
  for (std::size_t r = 0; r < t; ++r) {
    if (tokens[r] < 0 || tokens[r] >= spec().vocab_size) {
      return invalid_argument("{}: row {} has token id {} outside the vocabulary [0, {})", name, r,
                              tokens[r], spec().vocab_size);
    }
    if (positions[r] < 0) {
      return invalid_argument("{}: row {} has negative position {}", name, r, positions[r]);
    }
  }
  for (std::size_t r = 0; r < real; ++r) {
    const cache::SeqId seq = step->seq_ids[r];
    const std::int32_t pos = step->positions[r];
    if (positions[r] != pos) {
      return invalid_argument(
          "{}: row {} is at position {} but the cache placed sequence {} at position {}", name, r,
          positions[r], seq, pos);
    }
    std::span<const cache::CellId> table = cache_->cell_table(seq);
    const cache::CellId cell = step->cells[r];
    if (pos >= static_cast<std::int32_t>(table.size()) ||
        table[static_cast<std::size_t>(pos)] != cell) {
      return invalid_argument(
          "{}: row {} (sequence {}, position {}) no longer matches its cell table; the "
          "placement is stale",
          name, r, seq, pos);
    }
    if (cell <= cache::kScratchCell || cell >= kv_->cells()) {
      return internal_error("{}: row {} was placed in cell {} outside [1, {})", name, r, cell,
                            kv_->cells());
    }
    rows.write_cells[r] = cell;
    rows.history[r] = table.first(static_cast<std::size_t>(pos) + 1);
  }
  return rows;
}

Result<std::vector<Tensor>> CpuProgram::run_forward(const std::string& name, const Method& method,
                                                    std::span<const Tensor> inputs) {
  if (inputs.size() != 3) {
    return invalid_argument("{}: takes 3 inputs (tokens, positions, selector), got {}", name,
                            inputs.size());
  }
  CELLM_RETURN_IF_ERROR(check_input(name, "tokens", inputs[0], DType::kI64, 2));
  CELLM_RETURN_IF_ERROR(check_input(name, "positions", inputs[1], DType::kI64, 1));
  CELLM_RETURN_IF_ERROR(check_input(name, "selector", inputs[2], DType::kI64, 1));
  const std::int64_t t = inputs[0].dim(1);
  if (inputs[0].dim(0) != 1 || inputs[1].dim(0) != t) {
    return invalid_argument("{}: tokens {} and positions {} must be [1, T] and [T]", name,
                            inputs[0].describe(), inputs[1].describe());
  }
  const bool is_static = method.kind == Kind::kStatic;
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
  std::span<const std::int64_t> selector = inputs[2].span<std::int64_t>();
  for (std::int64_t i = 0; i < r_count; ++i) {
    const std::int64_t row = selector[static_cast<std::size_t>(i)];
    if (row < 0 || row >= t) {
      return invalid_argument("{}: selector entry {} is row {}, outside [0, {})", name, i, row, t);
    }
  }
  CELLM_ASSIGN_OR_RETURN(StepRows rows, resolve_step(name, inputs[0].span<std::int64_t>(),
                                                     inputs[1].span<std::int64_t>()));

  const std::int64_t vocab = spec().vocab_size;
  const std::int64_t d = spec().hidden_size;
  logits_.resize(static_cast<std::size_t>(r_count * vocab));
  if (options_.taps) {
    taps_.resize(static_cast<std::size_t>(t * d));
  }
  forward_->run(rows, selector, *kv_, logits_.data(), options_.taps ? taps_.data() : nullptr);

  std::vector<Tensor> out;
  out.push_back(Tensor::view(logits_.data(), DType::kF32, {r_count, vocab}));
  if (options_.taps) {
    out.push_back(Tensor::view(taps_.data(), DType::kF32, {t, d}));
  }
  return out;
}

}  // namespace cellm::cpu
