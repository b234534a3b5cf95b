#include "backend/cpu/cpu_program.h"

#include <algorithm>
#include <utility>

#include "backend/cpu/cpu_weights.h"
#include "cache/cell_cache.h"

namespace cellm::cpu {
namespace {

constexpr std::int32_t kScratchRow[1] = {cache::kScratchCell};

}  // namespace

Result<std::unique_ptr<CpuProgram>> CpuProgram::create(const model::ModelSpec& spec,
                                                       const model::Weights& weights,
                                                       const program::ProgramOptions& options) {
  return create_with(spec, options, [&]() -> Result<std::unique_ptr<ForwardPass>> {
    CELLM_ASSIGN_OR_RETURN(model::Weights f32, to_f32_weights(spec, weights));
    return std::unique_ptr<ForwardPass>(
        std::make_unique<CpuForward>(spec, std::move(f32), options.rope_table_dtype));
  });
}

Result<std::unique_ptr<CpuProgram>> CpuProgram::create_with(
    const model::ModelSpec& spec, const program::ProgramOptions& options,
    const std::function<Result<std::unique_ptr<ForwardPass>>()>& make_forward) {
  CELLM_RETURN_IF_ERROR(check_spec(spec));
  CELLM_ASSIGN_OR_RETURN(program::ForwardMethods methods,
                         program::ForwardMethods::build(options, std::string(kBackendName)));
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
  CELLM_ASSIGN_OR_RETURN(std::unique_ptr<ForwardPass> forward, make_forward());
  return std::unique_ptr<CpuProgram>(
      new CpuProgram(std::move(methods), kv_cells, std::move(forward)));
}

CpuProgram::CpuProgram(program::ForwardMethods methods, std::int32_t kv_cells,
                       std::unique_ptr<ForwardPass> forward)
    : methods_(std::move(methods)), kv_cells_(kv_cells), forward_(std::move(forward)) {}

std::vector<std::string> CpuProgram::method_names() const {
  return methods_.names();
}

Result<program::MethodMeta> CpuProgram::method_meta(std::string_view name) const {
  return methods_.meta(name, spec().vocab_size, spec().hidden_size, Device::kCpu);
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
  if (name == program::kMinSelectedRowsConstant && options().min_prefill_chunk > 0) {
    return options().min_prefill_chunk;
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
  program::MethodEntry* m = methods_.find(name);
  if (m == nullptr) {
    return not_found("load_method: method '{}' is not exported by the CPU program", name);
  }
  if (program::is_forward(m->kind) && cache_ == nullptr) {
    return invalid_argument("load_method '{}': bind a CellCache first", name);
  }
  m->loaded = true;
  return Status::ok();
}

Result<std::vector<Tensor>> CpuProgram::execute(std::string_view name,
                                                std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(const program::MethodEntry* m, methods_.find_loaded(name));
  return program::is_forward(m->kind) ? run_forward(name, *m, inputs)
                                      : run_sampler(name, *m, inputs);
}

// The shared checks matched the placed rows to the cache; what remains is
// the CPU pool's own bound and each row's attention history.
Result<StepRows> CpuProgram::resolve_step(std::string_view name,
                                          const program::ForwardCall& call) const {
  const std::size_t t = call.tokens.size();
  StepRows rows;
  rows.tokens = call.tokens;
  rows.positions = call.positions;
  rows.write_cells.resize(t, cache::kScratchCell);
  rows.history.resize(t, std::span<const std::int32_t>(kScratchRow));
  for (std::size_t r = 0; r < static_cast<std::size_t>(call.placed); ++r) {
    const program::PlacedRow& row = call.rows[r];
    if (row.cell <= cache::kScratchCell || row.cell >= kv_->cells()) {
      return internal_error("{}: row {} was placed in cell {} outside [1, {})", name, r, row.cell,
                            kv_->cells());
    }
    rows.write_cells[r] = row.cell;
    rows.history[r] = cache_->cell_table(row.seq).first(static_cast<std::size_t>(row.position) + 1);
  }
  return rows;
}

Result<std::vector<Tensor>> CpuProgram::run_forward(std::string_view name,
                                                    const program::MethodEntry& method,
                                                    std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(program::ForwardCall call,
                         methods_.check_forward(name, method, inputs, spec().vocab_size, *cache_));
  CELLM_ASSIGN_OR_RETURN(StepRows rows, resolve_step(name, call));

  const auto t = static_cast<std::int64_t>(call.tokens.size());
  const auto r_count = static_cast<std::int64_t>(call.selector.size());
  const std::int64_t vocab = spec().vocab_size;
  const std::int64_t d = spec().hidden_size;
  const bool taps = options().taps;
  logits_.resize(static_cast<std::size_t>(r_count * vocab));
  if (taps) {
    taps_.resize(static_cast<std::size_t>(t * d));
  }
  forward_->run(rows, call.selector, *kv_, logits_.data(), taps ? taps_.data() : nullptr);

  std::vector<Tensor> out;
  out.push_back(Tensor::view(logits_.data(), DType::kF32, {r_count, vocab}));
  if (taps) {
    out.push_back(Tensor::view(taps_.data(), DType::kF32, {t, d}));
  }
  return out;
}

}  // namespace cellm::cpu
