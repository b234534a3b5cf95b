#include "backend/cuda/cuda_program.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "backend/cuda/attention_rows.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/resources.h"
#include "cache/cell_cache.h"
#include "core/log.h"
#include "program/forward_methods.h"

namespace cellm::cuda {
namespace {

using program::MethodKind;

constexpr std::string_view kBackend = "cuda";
// Static widths up to kMaxDecodeWidth use the split-KV attention kernel
// (decode-heavy batches); wider steps run eagerly and split their rows
// between the two kernels (attention_rows.h).
// Device memory kept out of the K/V pool for the cell tables and the
// runtime's own needs.
constexpr std::size_t kReserveBytes = std::size_t{1} << 30;
// decode_greedy replays graphs of this many steps (one upload and one launch
// for all of them; H200, 1B batch 1: one graph a step ran 0.815 ms/step
// chained, as fast as one step at a time).
constexpr std::int32_t kChainGraphSteps = 8;

class CudaProgram final : public program::Program {
 public:
  static Result<std::unique_ptr<CudaProgram>> create(const model::ModelSpec& spec,
                                                     DeviceWeights weights,
                                                     const program::ProgramOptions& options);

  std::string backend_name() const override { return std::string(kBackend); }
  std::vector<std::string> method_names() const override { return methods_.names(); }
  Result<program::MethodMeta> method_meta(std::string_view name) const override {
    return methods_.meta(name, spec().vocab_size, spec().hidden_size, Device::kCuda);
  }
  std::optional<std::int64_t> constant(std::string_view name) const override;
  program::CacheLayout cache_layout() const override;
  Status bind_cache(std::shared_ptr<cache::CellCache> cache) override;
  Status load_method(std::string_view name) override;
  Result<std::vector<Tensor>> execute(std::string_view name,
                                      std::span<const Tensor> inputs) override;

  CudaProgramKnobs knobs;
  const char* decode_stream_unavailable() const { return forward_->stream_unavailable(); }
  const char* decode_fused_o_unavailable() const { return forward_->fused_o_unavailable(); }
  const CudaProgramStats& stats() const { return stats_; }

 private:
  CudaProgram(program::ForwardMethods methods, std::unique_ptr<CudaForward> forward)
      : methods_(std::move(methods)), forward_(std::move(forward)) {}
  const model::ModelSpec& spec() const { return forward_->spec(); }
  std::int32_t max_step() const { return forward_->max_step(); }
  std::int32_t* staging(StepArrays::Index which) const {
    return staging_.data() + static_cast<std::size_t>(which) * static_cast<std::size_t>(max_step());
  }
  // decode_greedy's step s: its arrays, [StepArrays::kAttentionRows, chain
  // width], in a slot of its own, so a step's upload never reads what the
  // host writes for a later one.
  std::int32_t* chain_staging(std::int32_t s, StepArrays::Index which) const {
    const auto width = static_cast<std::size_t>(methods_.decode_greedy_width());
    return chain_staging_.data() +
           (static_cast<std::size_t>(s) * StepArrays::kAttentionRows + which) * width;
  }
  static bool uses_decode_kernel(const program::MethodEntry& m) {
    return m.kind == MethodKind::kStatic && m.width <= kMaxDecodeWidth;
  }

  Status capture(const std::string& name, const program::MethodEntry& method);
  void upload_step(std::int32_t width, int arrays);
  // A static method's forward of the arrays already on the device: its graph
  // or its launches, and the argmax of its first `rows` logits rows into
  // tokens_mapped_ and the forward's feedback ids unless its lm_head took it.
  Status launch_static(const program::MethodEntry& method, std::int32_t rows, bool argmax);
  void stage_padding_step(std::int32_t width);
  Status sync_tables(const program::ForwardCall& call);
  Result<std::vector<Tensor>> run_forward(std::string_view name, const program::MethodEntry& method,
                                          std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> run_sampler(std::string_view name, const program::MethodEntry& method,
                                          std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> run_decode_greedy(std::span<const Tensor> inputs);
  Status stage_chain_step(const program::DecodeGreedyCall& call, std::int32_t s,
                          std::int32_t width);
  Status capture_chain(const program::MethodEntry& method);
  // Launches the device argmax of `rows` rows of `logits` (ids into
  // tokens_mapped_ and the forward's feedback ids).
  void launch_argmax(const float* logits, std::int32_t rows);

  program::ForwardMethods methods_;
  std::unique_ptr<CudaForward> forward_;
  std::shared_ptr<cache::CellCache> cache_;
  Stream stream_;
  PinnedBuffer<std::int32_t> staging_;  // [StepArrays::kCount, max_step], as on the device
  // decode_greedy: kDecodeGreedyMaxSteps slots (chain_staging), and the ids
  // the steps' embeddings recorded, copied back at the end of a call.
  PinnedBuffer<std::int32_t> chain_staging_;
  PinnedBuffer<std::int32_t> chain_ids_;
  std::vector<std::int32_t> row_scratch_;  // attention_rows.h's per-slot counts
  // A captured step, and whether its lm_head GEMV also writes the argmax of
  // its logits row into tokens_mapped_.
  struct CapturedStep {
    GraphExec graph;
    bool argmax = false;
  };
  std::map<std::int32_t, CapturedStep> graphs_;
  // decode_greedy's graphs of kChainGraphSteps steps, by width; captured on
  // first use, dropped with graphs_.
  std::map<std::int32_t, GraphExec> chain_graphs_;
  KernelChoice graph_kernels_;  // what graphs_ were captured with
  // Device mirror of the cell tables: per slot, the epoch it was loaded for
  // and how many leading entries are current on the device.
  std::vector<std::uint64_t> table_epoch_;
  std::vector<std::int32_t> table_valid_;
  // Sampler staging.
  PinnedBuffer<float> params_host_;    // [max_step, 4]
  DeviceBuffer<float> params_device_;  // [max_step, 4]
  // The sample method's optional suppressed ids, [max_step, kSampleMaxSuppressed].
  PinnedBuffer<std::int32_t> suppressed_host_;
  DeviceBuffer<std::int32_t> suppressed_device_;
  // The sampled ids: the sampler kernels write them straight into this
  // page-locked buffer through its device mapping (tokens_mapped_), so the
  // step's wait returns without a copy after the kernel (H200, 1B batch 1:
  // 0.851-0.853 -> 0.845-0.848 ms/step).
  PinnedBuffer<std::int32_t> tokens_host_;
  std::int32_t* tokens_mapped_ = nullptr;
  // The logits of the last forward when its graph also wrote their argmax
  // into tokens_mapped_ and no sampler has launched since; else null.
  const float* argmax_ready_ = nullptr;
  CudaProgramStats stats_;
  // The split argmax's partials and per-row counters (sample.cuh).
  DeviceBuffer<std::int64_t> argmax_partials_;
  DeviceBuffer<std::int32_t> argmax_counters_;
  std::vector<std::int64_t> sampled_;
  std::vector<float> host_logits_;  // only without device sampling
};

Result<std::unique_ptr<CudaProgram>> CudaProgram::create(const model::ModelSpec& spec,
                                                         DeviceWeights weights,
                                                         const program::ProgramOptions& options) {
  CELLM_RETURN_IF_ERROR(spec.validate());
  if (options.taps) {
    return not_supported(
        "the CUDA program does not export taps yet; use the CPU program for "
        "execute_raw taps");
  }
  CELLM_ASSIGN_OR_RETURN(
      program::ForwardMethods methods,
      program::ForwardMethods::build(options, std::string(kBackend), /*decode_greedy=*/true));
  std::int64_t cells = options.kv_cells;
  if (cells == 0) {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    CELLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double keep = (1.0 - options.kv_memory_fraction) * static_cast<double>(total_bytes);
    const double budget =
        static_cast<double>(free_bytes) - keep -
        static_cast<double>(CudaForward::activation_bytes(spec, options.max_step)) -
        static_cast<double>(kReserveBytes);
    cells = static_cast<std::int64_t>(budget /
                                      static_cast<double>(CudaForward::kv_bytes_per_cell(spec)));
    cells = std::min<std::int64_t>(cells, std::numeric_limits<std::int32_t>::max() / 2);
    if (cells < 2) {
      return out_of_resources(
          "the device has no room for a KV pool after the weights ({} MiB free); "
          "use a smaller model or raise kv_memory_fraction",
          free_bytes >> 20);
    }
  }
  CELLM_ASSIGN_OR_RETURN(auto forward,
                         CudaForward::create(spec, std::move(weights), options.max_step,
                                             static_cast<std::int32_t>(cells)));
  auto p = std::unique_ptr<CudaProgram>(new CudaProgram(std::move(methods), std::move(forward)));
  CELLM_ASSIGN_OR_RETURN(p->stream_, Stream::create());
  const auto steps = static_cast<std::size_t>(options.max_step);
  CELLM_ASSIGN_OR_RETURN(p->staging_,
                         PinnedBuffer<std::int32_t>::allocate(steps * StepArrays::kCount));
  std::memset(p->staging_.data(), 0, p->staging_.bytes());
  CELLM_ASSIGN_OR_RETURN(p->params_host_, PinnedBuffer<float>::allocate(steps * 4));
  CELLM_ASSIGN_OR_RETURN(p->params_device_, DeviceBuffer<float>::allocate(steps * 4));
  CELLM_ASSIGN_OR_RETURN(p->suppressed_host_,
                         PinnedBuffer<std::int32_t>::allocate(steps * kSampleMaxSuppressed));
  CELLM_ASSIGN_OR_RETURN(p->suppressed_device_,
                         DeviceBuffer<std::int32_t>::allocate(steps * kSampleMaxSuppressed));
  CELLM_ASSIGN_OR_RETURN(p->tokens_host_, PinnedBuffer<std::int32_t>::allocate(steps));
  if (options.device_sampling) {
    const auto chain_width = static_cast<std::size_t>(p->methods_.decode_greedy_width());
    const auto chain_steps = static_cast<std::size_t>(program::kDecodeGreedyMaxSteps);
    CELLM_ASSIGN_OR_RETURN(p->chain_staging_,
                           PinnedBuffer<std::int32_t>::allocate(chain_steps * chain_width *
                                                                StepArrays::kAttentionRows));
    CELLM_ASSIGN_OR_RETURN(p->chain_ids_,
                           PinnedBuffer<std::int32_t>::allocate((chain_steps - 1) * chain_width));
    CELLM_RETURN_IF_ERROR(
        p->forward_->reserve_chain(static_cast<std::int32_t>((chain_steps - 1) * chain_width),
                                   kChainGraphSteps, static_cast<std::int32_t>(chain_width)));
  }
  void* mapped = nullptr;
  if (const cudaError_t e = cudaHostGetDevicePointer(&mapped, p->tokens_host_.data(), 0);
      e != cudaSuccess) {
    return internal_error("cuda: the device cannot write page-locked host memory ({})",
                          cudaGetErrorString(e));
  }
  p->tokens_mapped_ = static_cast<std::int32_t*>(mapped);
  static_assert(argmax_partials_bytes(1) % sizeof(std::int64_t) == 0);
  CELLM_ASSIGN_OR_RETURN(
      p->argmax_partials_,
      DeviceBuffer<std::int64_t>::allocate(argmax_partials_bytes(static_cast<std::int32_t>(steps)) /
                                           sizeof(std::int64_t)));
  CELLM_ASSIGN_OR_RETURN(p->argmax_counters_, DeviceBuffer<std::int32_t>::allocate(steps));
  CELLM_CUDA_CHECK(cudaMemset(p->argmax_counters_.data(), 0, p->argmax_counters_.bytes()));
  CELLM_LOG_INFO("cuda: weights {} MiB, workspace {} MiB, KV pool {} cells ({} MiB)",
                 p->forward_->weight_bytes() >> 20, p->forward_->workspace_bytes() >> 20, cells,
                 p->forward_->kv_bytes() >> 20);
  return p;
}

std::optional<std::int64_t> CudaProgram::constant(std::string_view name) const {
  if (name == program::kVocabSizeConstant) return spec().vocab_size;
  if (name == program::kMaxContextConstant) return spec().max_context;
  if (name == program::kMaxCellsConstant) return forward_->kv_cells();
  if (name == program::kMinSelectedRowsConstant && methods_.options().min_prefill_chunk > 0) {
    return methods_.options().min_prefill_chunk;
  }
  return std::nullopt;
}

program::CacheLayout CudaProgram::cache_layout() const {
  program::CacheLayout layout;
  for (const model::LayerSpec& layer : spec().layers) layout.layer_windows.push_back(layer.window);
  return layout;
}

Status CudaProgram::bind_cache(std::shared_ptr<cache::CellCache> cache) {
  if (cache == nullptr) return invalid_argument("bind_cache: the cache is null");
  const cache::CellCacheConfig& c = cache->config();
  if (c.max_cells < 2 || c.max_cells > forward_->kv_cells()) {
    return invalid_argument(
        "bind_cache: the cache has {} cells; the CUDA program's pool holds {} "
        "(get_offgraph_kv_max_cells)",
        c.max_cells, forward_->kv_cells());
  }
  CELLM_RETURN_IF_ERROR(forward_->bind_tables(c.max_sequences, c.max_seq_len));
  table_epoch_.assign(static_cast<std::size_t>(c.max_sequences), 0);
  table_valid_.assign(static_cast<std::size_t>(c.max_sequences), 0);
  graphs_.clear();  // captured against the previous tables
  chain_graphs_.clear();
  cache_ = std::move(cache);
  return Status::ok();
}

void CudaProgram::stage_padding_step(std::int32_t width) {
  for (std::int32_t i = 0; i < width; ++i) {
    staging(StepArrays::kTokens)[i] = 0;
    staging(StepArrays::kPositions)[i] = 0;
    staging(StepArrays::kSlots)[i] = -1;
    staging(StepArrays::kCells)[i] = cache::kScratchCell;
    staging(StepArrays::kSelector)[i] = 0;
    staging(StepArrays::kFreshFrom)[i] = 0;
  }
}

Status CudaProgram::capture(const std::string& name, const program::MethodEntry& method) {
  // A padding-only step touches nothing but the scratch cell; run it eagerly
  // once so every GEMM plan exists, then capture the same launches.
  stage_padding_step(method.width);
  CELLM_CUDA_CHECK(cudaMemcpyAsync(forward_->step_device(), staging_.data(), staging_.bytes(),
                                   cudaMemcpyHostToDevice, stream_.get()));
  if (graph_kernels_ != knobs.kernels) {
    graphs_.clear();
    chain_graphs_.clear();
    graph_kernels_ = knobs.kernels;
  }
  const ForwardShape shape{method.width, method.width, uses_decode_kernel(method), knobs.kernels};
  CELLM_RETURN_IF_ERROR(forward_->enqueue(shape, stream_.get()));
  stream_.synchronize();
  argmax_ready_ = nullptr;  // the warm-up above rewrote the logits
  GraphExec::begin_capture(stream_.get());
  // The step's upload stays outside the graph: decode_greedy uploads each
  // step from a slot of its own before replaying the same graph. (Sessions
  // 16-19 captured it as the first node; a separate copy measured within the
  // spread then, H200 1B batch 1 0.856 / 0.848 against 0.848 / 0.851
  // ms/step. A kernel reading the staging buffer through its device mapping
  // measured no faster either: bench/results/README.md, session 17.)
  ForwardShape captured = shape;
  // A greedy one-token step then finds its token written with the logits.
  if (methods_.options().device_sampling) captured.argmax_to = tokens_mapped_;
  Status enqueued = forward_->enqueue(captured, stream_.get());
  auto graph = GraphExec::end_capture(stream_.get());
  CELLM_RETURN_IF_ERROR(enqueued.with_context(name));
  if (!graph.ok()) return graph.status().with_context(name);
  graphs_[method.width] = CapturedStep{std::move(graph).value(), forward_->takes_argmax(captured)};
  return Status::ok();
}

// Only what a step reads travels: the first `width` entries of the first
// `arrays` arrays (the row order only when split), not max_step of them; at
// batch 1 that is 24 bytes instead of 48 KB. The staging buffer must stay
// as written until the copy runs on the stream, which the step's wait for
// its tokens (or logits) ensures.
void CudaProgram::upload_step(std::int32_t width, int arrays) {
  const std::size_t pitch = static_cast<std::size_t>(max_step()) * sizeof(std::int32_t);
  CELLM_CUDA_CHECK(cudaMemcpy2DAsync(forward_->step_device(), pitch, staging_.data(), pitch,
                                     static_cast<std::size_t>(width) * sizeof(std::int32_t),
                                     static_cast<std::size_t>(arrays), cudaMemcpyHostToDevice,
                                     stream_.get()));
}

Status CudaProgram::load_method(std::string_view name) {
  program::MethodEntry* m = methods_.find(name);
  if (m == nullptr)
    return not_found("load_method: method '{}' is not exported by the CUDA program", name);
  const bool forward = m->kind == MethodKind::kStatic || m->kind == MethodKind::kDynamic ||
                       m->kind == MethodKind::kModule;
  if (forward && cache_ == nullptr) {
    return invalid_argument("load_method '{}': bind a CellCache first", name);
  }
  if (m->kind == MethodKind::kStatic && knobs.use_graphs &&
      (!graphs_.contains(m->width) || graph_kernels_ != knobs.kernels)) {
    CELLM_RETURN_IF_ERROR(capture(std::string(name), *m));
  }
  m->loaded = true;
  return Status::ok();
}

Status CudaProgram::sync_tables(const program::ForwardCall& call) {
  const std::int32_t stride = forward_->table_stride();
  for (std::int32_t r = 0; r < call.placed; ++r) {
    const program::PlacedRow& row = call.rows[static_cast<std::size_t>(r)];
    const auto slot = static_cast<std::size_t>(row.seq);
    if (row.position >= stride) {
      return invalid_argument("row {} is at position {}, past the cell table's {} entries", r,
                              row.position, stride);
    }
    const std::uint64_t epoch = cache_->seq_epoch(row.seq);
    if (table_epoch_[slot] != epoch) {
      table_epoch_[slot] = epoch;
      table_valid_[slot] = 0;
    }
    if (table_valid_[slot] < row.position) {
      // The slot holds a clone (or a fresh reuse): load the prefix the step
      // does not write itself.
      std::span<const cache::CellId> host = cache_->cell_table(row.seq);
      const std::int32_t from = table_valid_[slot];
      CELLM_CUDA_CHECK(cudaMemcpyAsync(
          forward_->table_device() + slot * static_cast<std::size_t>(stride) + from,
          host.data() + from, static_cast<std::size_t>(row.position - from) * sizeof(std::int32_t),
          cudaMemcpyHostToDevice, stream_.get()));
    }
    // The forward writes this row's entry.
    table_valid_[slot] = row.position + 1;
  }
  return Status::ok();
}

Result<std::vector<Tensor>> CudaProgram::run_forward(std::string_view name,
                                                     const program::MethodEntry& method,
                                                     std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(program::ForwardCall call,
                         methods_.check_forward(name, method, inputs, spec().vocab_size, *cache_));
  const auto width = static_cast<std::int32_t>(call.tokens.size());
  const auto rows = static_cast<std::int32_t>(call.selector.size());
  const bool is_static = method.kind == MethodKind::kStatic;
  CELLM_RETURN_IF_ERROR(sync_tables(call));
  for (std::int32_t i = 0; i < width; ++i) {
    const program::PlacedRow& row = call.rows[static_cast<std::size_t>(i)];
    staging(StepArrays::kTokens)[i] =
        static_cast<std::int32_t>(call.tokens[static_cast<std::size_t>(i)]);
    staging(StepArrays::kPositions)[i] =
        static_cast<std::int32_t>(call.positions[static_cast<std::size_t>(i)]);
    staging(StepArrays::kSlots)[i] = i < call.placed ? row.seq : -1;
    staging(StepArrays::kCells)[i] = i < call.placed ? row.cell : cache::kScratchCell;
  }
  // A captured graph computes `width` selected rows: pad by repeating the last.
  const std::int32_t computed = is_static ? width : rows;
  for (std::int32_t i = 0; i < computed; ++i) {
    staging(StepArrays::kSelector)[i] =
        static_cast<std::int32_t>(call.selector[static_cast<std::size_t>(std::min(i, rows - 1))]);
  }
  const auto w = static_cast<std::size_t>(width);
  first_step_positions({staging(StepArrays::kSlots), w}, {staging(StepArrays::kPositions), w},
                       {staging(StepArrays::kFreshFrom), w}, row_scratch_);
  ForwardShape shape{width, computed, uses_decode_kernel(method), knobs.kernels};
  if (!shape.decode_attention && knobs.kernels.decode_attention == DecodeAttention::kV2) {
    shape.decode_rows =
        split_attention_rows({staging(StepArrays::kSlots), w}, width,
                             {staging(StepArrays::kAttentionRows), w}, row_scratch_);
  }
  auto graph = graphs_.find(width);
  const bool replay =
      is_static && knobs.use_graphs && graph != graphs_.end() && graph_kernels_ == knobs.kernels;
  argmax_ready_ = replay && graph->second.argmax ? forward_->logits() : nullptr;
  upload_step(width, shape.decode_rows >= 0 ? StepArrays::kCount : StepArrays::kAttentionRows);
  if (replay) {
    graph->second.graph.launch(stream_.get());
  } else {
    CELLM_RETURN_IF_ERROR(forward_->enqueue(shape, stream_.get()));
  }
  const std::int64_t vocab = spec().vocab_size;
  std::vector<Tensor> out;
  if (methods_.options().device_sampling) {
    out.push_back(Tensor::view(forward_->logits(), DType::kF32, {rows, vocab}, Device::kCuda));
    return out;
  }
  host_logits_.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab));
  CELLM_CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), forward_->logits(),
                                   host_logits_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream_.get()));
  stream_.synchronize();  // SYNC POINT (host sampling): the step's only wait
  out.push_back(Tensor::view(host_logits_.data(), DType::kF32, {rows, vocab}));
  return out;
}

Result<std::vector<Tensor>> CudaProgram::run_sampler(std::string_view name,
                                                     const program::MethodEntry& method,
                                                     std::span<const Tensor> inputs) {
  const bool argmax = method.kind == MethodKind::kArgmax;
  // sample: logits, params and optionally the suppressed ids.
  if (argmax ? inputs.size() != 1 : (inputs.size() != 2 && inputs.size() != 3)) {
    return invalid_argument("{}: takes {} inputs, got {}", name,
                            argmax ? "1 (logits)" : "2 or 3 (logits, params[, suppressed])",
                            inputs.size());
  }
  const Tensor& logits = inputs[0];
  const std::int64_t vocab = spec().vocab_size;
  if (logits.device() != Device::kCuda || logits.dtype() != DType::kF32 || logits.rank() != 2 ||
      logits.dim(1) != vocab || logits.dim(0) < 1 || logits.dim(0) > max_step()) {
    return invalid_argument("{}: logits must be device f32 [1..{}, {}], got {}", name, max_step(),
                            vocab, logits.describe());
  }
  const auto rows = static_cast<std::int32_t>(logits.dim(0));
  SampleParams p;
  p.logits = static_cast<const float*>(logits.data());
  p.out = tokens_mapped_;
  p.logits_stride = vocab;
  p.rows = rows;
  p.vocab = static_cast<std::int32_t>(vocab);
  // The step's graph wrote the argmax of these logits with them (its lm_head
  // GEMV took it, CudaForward::takes_argmax): nothing to launch.
  const bool argmax_written = argmax && rows == 1 && argmax_ready_ == logits.data();
  argmax_ready_ = nullptr;  // a sampler launch below overwrites the ids
  if (argmax_written) {
    ++stats_.argmax_from_lm_head;  // the wait below is for the graph
  } else if (argmax) {
    ++stats_.argmax_launched;
    launch_argmax(p.logits, rows);
  } else {
    CELLM_RETURN_IF_ERROR(program::check_host_input(name, "params", inputs[1], DType::kF32, 2));
    if (inputs[1].dim(0) != rows || inputs[1].dim(1) != 4) {
      return invalid_argument("{}: params must be [{}, 4], got {}", name, rows,
                              inputs[1].describe());
    }
    std::memcpy(params_host_.data(), inputs[1].data(),
                static_cast<std::size_t>(rows) * 4 * sizeof(float));
    CELLM_CUDA_CHECK(cudaMemcpyAsync(params_device_.data(), params_host_.data(),
                                     static_cast<std::size_t>(rows) * 4 * sizeof(float),
                                     cudaMemcpyHostToDevice, stream_.get()));
    p.params = params_device_.data();
    // Clusters while every row's blocks fit on the SMs at once (1024-thread
    // blocks, one an SM). H200, 128K ids, 1 and 8 rows: 28-31 us
    // (temperature), 46-48 (top-k 40) and 67-95 (top-p 0.95) against
    // 104-146, 107-111 and 145-178 us on one block a row. Forced onto 64
    // rows (512 blocks for 132 SMs, so teams queue), they drew
    // temperature rows in 135 us against 150 and top-p rows in 1.22 ms
    // against 1.07 (before the final candidate sets); wider steps keep one
    // block a row until that is measured again.
    p.cluster = knobs.kernels.cluster_sampler &&
                static_cast<std::int64_t>(rows) * kSampleClusterBlocks <= multiprocessor_count();
    p.candidates = knobs.kernels.sample_candidates;
    if (inputs.size() == 3) {
      const Tensor& ids = inputs[2];
      CELLM_RETURN_IF_ERROR(program::check_host_input(name, "suppressed", ids, DType::kI64, 2));
      if (ids.dim(0) != rows || ids.dim(1) != kSampleMaxSuppressed) {
        return invalid_argument("{}: suppressed ids must be i64 [{}, {}] (-1: empty), got {}", name,
                                rows, kSampleMaxSuppressed, ids.describe());
      }
      const std::span<const std::int64_t> src = ids.span<const std::int64_t>();
      for (std::size_t i = 0; i < src.size(); ++i) {
        // Anything outside the vocabulary suppresses nothing.
        suppressed_host_.data()[i] =
            src[i] >= 0 && src[i] < vocab ? static_cast<std::int32_t>(src[i]) : -1;
      }
      CELLM_CUDA_CHECK(cudaMemcpyAsync(suppressed_device_.data(), suppressed_host_.data(),
                                       src.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                       stream_.get()));
      p.suppressed = suppressed_device_.data();
    }
    launch_sample(p, stream_.get());
  }
  // The kernel's writes to the mapped buffer are visible once it completes.
  // (Watching the ids themselves instead, where the step has one writer of
  // them, measured within the spread: H200, 1B batch 1, 0.851-0.863 against
  // 0.854-0.860 ms/step; bench/results/README.md, session 17.)
  stream_.synchronize();  // SYNC POINT: the step's only wait, for its tokens
  sampled_.assign(tokens_host_.data(), tokens_host_.data() + rows);
  std::vector<Tensor> out;
  out.push_back(Tensor::view(sampled_.data(), DType::kI64, {rows}));
  return out;
}

void CudaProgram::launch_argmax(const float* logits, std::int32_t rows) {
  SampleParams p;
  p.logits = logits;
  p.out = tokens_mapped_;
  p.feedback = forward_->feedback_ids();
  p.logits_stride = spec().vocab_size;
  p.rows = rows;
  p.vocab = static_cast<std::int32_t>(spec().vocab_size);
  if (knobs.kernels.split_argmax) {
    p.argmax_partials = argmax_partials_.data();
    p.argmax_counters = argmax_counters_.data();
  }
  launch_sample_argmax(p, stream_.get());
}

Status CudaProgram::launch_static(const program::MethodEntry& method, std::int32_t rows,
                                  bool argmax) {
  auto graph = graphs_.find(method.width);
  const ForwardShape shape{method.width, method.width, uses_decode_kernel(method), knobs.kernels};
  ForwardShape with_argmax = shape;
  with_argmax.argmax_to = tokens_mapped_;
  const bool head_argmax = argmax && forward_->takes_argmax(with_argmax);
  if (knobs.use_graphs && graph != graphs_.end() && graph_kernels_ == knobs.kernels) {
    graph->second.graph.launch(stream_.get());
    if (argmax && !graph->second.argmax) launch_argmax(forward_->logits(), rows);
    return Status::ok();
  }
  CELLM_RETURN_IF_ERROR(forward_->enqueue(head_argmax ? with_argmax : shape, stream_.get()));
  if (argmax && !head_argmax) launch_argmax(forward_->logits(), rows);
  return Status::ok();
}

// decode_greedy (program.h). Every step is staged in a host slot of its own
// and launched without waiting for the one before; its token rows hold
// -1 - h from step 1 on, so its embedding reads the ids the previous step's
// argmax left in the forward's feedback buffer and records them at h. Runs
// of kChainGraphSteps steps replay one graph of that many steps, whose
// steps follow each other by programmatic launch with one upload before it;
// the rest go one graph (or eager forward) a step. The host waits once.
Result<std::vector<Tensor>> CudaProgram::run_decode_greedy(std::span<const Tensor> inputs) {
  constexpr std::string_view name = program::kDecodeGreedyMethod;
  if (cache_ == nullptr) return invalid_argument("{}: bind a CellCache first", name);
  CELLM_ASSIGN_OR_RETURN(program::DecodeGreedyCall call,
                         methods_.check_decode_greedy(inputs, spec().vocab_size, *cache_));
  const std::int32_t t = call.width;
  // The narrowest static method holding the rows, loaded.
  const program::MethodEntry* method = nullptr;
  for (const std::string& n : methods_.names()) {
    const program::MethodEntry* m = methods_.find(n);
    if (m->kind == MethodKind::kStatic && m->width >= t &&
        (method == nullptr || m->width < method->width)) {
      method = m;
    }
  }
  if (method == nullptr || !method->loaded) {
    return invalid_argument(
        "{}: the static method for {} rows is not loaded; load forward_{} first", name, t,
        method == nullptr ? t : method->width);
  }
  if (!uses_decode_kernel(*method)) {
    return invalid_argument("{}: takes at most {} rows on the CUDA program, got {}", name,
                            kMaxDecodeWidth, t);
  }
  const bool graphs = knobs.use_graphs && graphs_.contains(method->width) &&
                      graph_kernels_ == knobs.kernels && call.steps >= kChainGraphSteps;
  // Before the staging: the capture runs on padding in the same slots.
  if (graphs && !chain_graphs_.contains(method->width)) {
    CELLM_RETURN_IF_ERROR(capture_chain(*method).with_context(name));
  }
  for (std::int32_t s = 0; s < call.steps; ++s) {
    CELLM_RETURN_IF_ERROR(stage_chain_step(call, s, method->width));
  }
  const std::size_t slot_ints = static_cast<std::size_t>(StepArrays::kAttentionRows) *
                                static_cast<std::size_t>(methods_.decode_greedy_width());
  for (std::int32_t s = 0; s < call.steps;) {
    if (graphs && call.steps - s >= kChainGraphSteps) {
      CELLM_CUDA_CHECK(cudaMemcpyAsync(forward_->chain_steps_device(),
                                       chain_staging(s, StepArrays::kTokens),
                                       kChainGraphSteps * slot_ints * sizeof(std::int32_t),
                                       cudaMemcpyHostToDevice, stream_.get()));
      chain_graphs_.at(method->width).launch(stream_.get());
      s += kChainGraphSteps;
      continue;
    }
    const std::size_t pitch_in =
        static_cast<std::size_t>(methods_.decode_greedy_width()) * sizeof(std::int32_t);
    const std::size_t pitch_out = static_cast<std::size_t>(max_step()) * sizeof(std::int32_t);
    CELLM_CUDA_CHECK(
        cudaMemcpy2DAsync(forward_->step_device(), pitch_out, chain_staging(s, StepArrays::kTokens),
                          pitch_in, static_cast<std::size_t>(method->width) * sizeof(std::int32_t),
                          static_cast<std::size_t>(StepArrays::kAttentionRows),
                          cudaMemcpyHostToDevice, stream_.get()));
    CELLM_RETURN_IF_ERROR(launch_static(*method, t, /*argmax=*/true).with_context(name));
    ++s;
  }
  argmax_ready_ = nullptr;
  const auto recorded = static_cast<std::size_t>(call.steps - 1) * static_cast<std::size_t>(t);
  if (recorded > 0) {
    CELLM_CUDA_CHECK(cudaMemcpyAsync(chain_ids_.data(), forward_->recorded_ids(),
                                     recorded * sizeof(std::int32_t), cudaMemcpyDeviceToHost,
                                     stream_.get()));
  }
  stream_.synchronize();  // SYNC POINT: the call's only wait
  sampled_.resize(recorded + static_cast<std::size_t>(t));
  std::copy(chain_ids_.data(), chain_ids_.data() + recorded, sampled_.begin());
  std::copy(tokens_host_.data(), tokens_host_.data() + t,
            sampled_.begin() + static_cast<std::ptrdiff_t>(recorded));
  std::vector<Tensor> out;
  out.push_back(Tensor::view(sampled_.data(), DType::kI64, {call.steps, t}));
  return out;
}

// Step s's arrays into its host slot, `width` rows (padding past the call's),
// and its rows' cell tables onto the device.
Status CudaProgram::stage_chain_step(const program::DecodeGreedyCall& call, std::int32_t s,
                                     std::int32_t width) {
  const std::int32_t t = call.width;
  const auto first = static_cast<std::size_t>(s) * static_cast<std::size_t>(t);
  program::ForwardCall step;
  step.rows.assign(call.rows.begin() + static_cast<std::ptrdiff_t>(first),
                   call.rows.begin() + static_cast<std::ptrdiff_t>(first + t));
  step.placed = t;
  CELLM_RETURN_IF_ERROR(sync_tables(step));
  for (std::int32_t i = 0; i < width; ++i) {
    const bool real = i < t;
    const program::PlacedRow& row = call.rows[first + static_cast<std::size_t>(real ? i : 0)];
    chain_staging(s, StepArrays::kTokens)[i] =
        !real    ? 0
        : s == 0 ? static_cast<std::int32_t>(call.tokens[static_cast<std::size_t>(i)])
                 : -1 - ((s - 1) * t + i);
    chain_staging(s, StepArrays::kPositions)[i] = real ? row.position : 0;
    chain_staging(s, StepArrays::kSlots)[i] = real ? row.seq : -1;
    chain_staging(s, StepArrays::kCells)[i] = real ? row.cell : cache::kScratchCell;
    chain_staging(s, StepArrays::kSelector)[i] = std::min(i, t - 1);
  }
  const auto wide = static_cast<std::size_t>(width);
  first_step_positions({chain_staging(s, StepArrays::kSlots), wide},
                       {chain_staging(s, StepArrays::kPositions), wide},
                       {chain_staging(s, StepArrays::kFreshFrom), wide}, row_scratch_);
  return Status::ok();
}

// kChainGraphSteps steps of `method`'s width in one graph, each reading its
// chain slot; its argmax as the single-step graph takes it (the lm_head's,
// or the argmax kernel over every row). Captured over padding-only slots
// after one eager run of them.
Status CudaProgram::capture_chain(const program::MethodEntry& method) {
  const std::int32_t w = method.width;
  for (std::int32_t s = 0; s < kChainGraphSteps; ++s) {
    for (int a = 0; a < StepArrays::kAttentionRows; ++a) {
      const auto which = static_cast<StepArrays::Index>(a);
      const std::int32_t fill = which == StepArrays::kSlots   ? -1
                                : which == StepArrays::kCells ? cache::kScratchCell
                                                              : 0;
      std::fill_n(chain_staging(s, which), methods_.decode_greedy_width(), fill);
    }
  }
  const std::size_t bytes =
      static_cast<std::size_t>(kChainGraphSteps) * StepArrays::kAttentionRows *
      static_cast<std::size_t>(methods_.decode_greedy_width()) * sizeof(std::int32_t);
  CELLM_CUDA_CHECK(cudaMemcpyAsync(forward_->chain_steps_device(),
                                   chain_staging(0, StepArrays::kTokens), bytes,
                                   cudaMemcpyHostToDevice, stream_.get()));
  const auto enqueue_steps = [&]() -> Status {
    for (std::int32_t s = 0; s < kChainGraphSteps; ++s) {
      ForwardShape shape{w, w, true, knobs.kernels};
      shape.argmax_to = tokens_mapped_;
      shape.chain_slot = s;
      const bool head = forward_->takes_argmax(shape);
      if (!head) shape.argmax_to = nullptr;
      CELLM_RETURN_IF_ERROR(forward_->enqueue(shape, stream_.get()));
      if (!head) launch_argmax(forward_->logits(), w);
    }
    return Status::ok();
  };
  CELLM_RETURN_IF_ERROR(enqueue_steps());
  stream_.synchronize();
  GraphExec::begin_capture(stream_.get());
  Status enqueued = enqueue_steps();
  auto graph = GraphExec::end_capture(stream_.get());
  CELLM_RETURN_IF_ERROR(enqueued);
  if (!graph.ok()) return graph.status();
  chain_graphs_.emplace(w, std::move(graph).value());
  return Status::ok();
}

Result<std::vector<Tensor>> CudaProgram::execute(std::string_view name,
                                                 std::span<const Tensor> inputs) {
  program::MethodEntry* m = methods_.find(name);
  if (m == nullptr)
    return not_found("execute: method '{}' is not exported by the CUDA program", name);
  if (!m->loaded) return invalid_argument("execute: method '{}' is not loaded", name);
  switch (m->kind) {
    case MethodKind::kStatic:
    case MethodKind::kDynamic:
    case MethodKind::kModule: return run_forward(name, *m, inputs);
    case MethodKind::kSample:
    case MethodKind::kArgmax: return run_sampler(name, *m, inputs);
    case MethodKind::kDecodeGreedy: return run_decode_greedy(inputs);
  }
  return internal_error("method '{}' has an unknown kind", name);
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

Result<std::unique_ptr<program::Program>> make_program(const model::ModelSpec& spec,
                                                       DeviceWeights weights,
                                                       const program::ProgramOptions& options) {
  CELLM_ASSIGN_OR_RETURN(auto p, CudaProgram::create(spec, std::move(weights), options));
  return std::unique_ptr<program::Program>(std::move(p));
}

Result<std::unique_ptr<program::Program>> load_program(const model::ModelSpec& spec,
                                                       const model::Weights& weights,
                                                       const program::ProgramOptions& options) {
  CELLM_RETURN_IF_ERROR(spec.validate());
  CELLM_ASSIGN_OR_RETURN(DeviceWeights w, upload_weights(spec, weights));
  return make_program(spec, std::move(w), options);
}

Result<std::unique_ptr<program::Program>> load_random_program(
    const model::ModelSpec& spec, std::uint64_t seed, const program::ProgramOptions& options) {
  CELLM_RETURN_IF_ERROR(spec.validate());
  CELLM_ASSIGN_OR_RETURN(DeviceWeights w, random_weights(spec, seed));
  return make_program(spec, std::move(w), options);
}

Result<Tensor> copy_to_host(const Tensor& tensor) {
  if (tensor.device() == Device::kCpu) return tensor.clone();
  Tensor host = Tensor::empty(tensor.dtype(), tensor.shape());
  CELLM_CUDA_CHECK(cudaDeviceSynchronize());
  CELLM_CUDA_CHECK(cudaMemcpy(host.data(), tensor.data(), tensor.nbytes(), cudaMemcpyDeviceToHost));
  return host;
}

CudaProgramKnobs* cuda_program_knobs(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? nullptr : &p->knobs;
}

const char* decode_stream_unavailable(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? nullptr : p->decode_stream_unavailable();
}

const char* decode_fused_o_unavailable(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? nullptr : p->decode_fused_o_unavailable();
}

const CudaProgramStats* cuda_program_stats(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? nullptr : &p->stats();
}

}  // namespace cellm::cuda
