#include "backend/cuda/cuda_program.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "backend/cuda/attention_rows.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/cuda_program_impl.h"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/kernels/sample_mask.cuh"
#include "backend/cuda/kernels/sample_penalize.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/resources.h"
#include "cache/cell_cache.h"
#include "core/log.h"
#include "program/forward_methods.h"

namespace cellm::cuda {
namespace detail {

Result<std::unique_ptr<CudaProgram>> CudaProgram::create(const model::ModelSpec& spec,
                                                         DeviceWeights weights,
                                                         const program::ProgramOptions& options) {
  CELLM_RETURN_IF_ERROR(spec.validate());
  if (options.taps) {
    return not_supported(
        "the CUDA program does not export taps yet; use the CPU program for "
        "execute_raw taps");
  }
  CELLM_ASSIGN_OR_RETURN(program::ForwardMethods methods,
                         program::ForwardMethods::build(options, std::string(kBackend)));
  CELLM_ASSIGN_OR_RETURN(const KvDtype kv_dtype, kv_dtype_of(options.kv_dtype));
  std::int64_t cells = options.kv_cells;
  if (cells == 0) {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    CELLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double keep = (1.0 - options.kv_memory_fraction) * static_cast<double>(total_bytes);
    const double budget = static_cast<double>(free_bytes) - keep -
                          static_cast<double>(CudaForward::activation_bytes(spec, options.max_step,
                                                                            weights.quantized())) -
                          static_cast<double>(kReserveBytes);
    cells = kv_cells_for_memory(spec, budget, kv_dtype);
    if (cells < 2) {
      return out_of_resources(
          "the device has no room for a KV pool after the weights ({} MiB free); "
          "use a smaller model or raise kv_memory_fraction",
          free_bytes >> 20);
    }
  }
  CELLM_ASSIGN_OR_RETURN(auto forward,
                         CudaForward::create(spec, std::move(weights), options.max_step,
                                             static_cast<std::int32_t>(cells), kv_dtype));
  const CudaProgramKnobs chosen{.use_graphs = options.cuda_graphs,
                                .kernels = options.cuda_kernels.value_or(cellm::knobs().kernels)};
  if (chosen.kernels != KernelChoice{}) {
    CELLM_LOG_INFO("cuda kernel choices: {}", describe(chosen.kernels));
  }
  auto p =
      std::unique_ptr<CudaProgram>(new CudaProgram(std::move(methods), std::move(forward), chosen));
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
    const auto entries = static_cast<std::size_t>(program::kPenalizeMaxEntries) * 4;
    const auto row_params = steps * static_cast<std::size_t>(kPenalizeRowParams);
    CELLM_ASSIGN_OR_RETURN(p->penalize_rows_host_, PinnedBuffer<float>::allocate(row_params));
    CELLM_ASSIGN_OR_RETURN(p->penalize_rows_device_, DeviceBuffer<float>::allocate(row_params));
    CELLM_ASSIGN_OR_RETURN(p->penalize_offsets_host_,
                           PinnedBuffer<std::int32_t>::allocate(steps + 1));
    CELLM_ASSIGN_OR_RETURN(p->penalize_offsets_device_,
                           DeviceBuffer<std::int32_t>::allocate(steps + 1));
    CELLM_ASSIGN_OR_RETURN(p->penalize_entries_host_,
                           PinnedBuffer<std::int32_t>::allocate(entries));
    CELLM_ASSIGN_OR_RETURN(p->penalize_entries_device_,
                           DeviceBuffer<std::int32_t>::allocate(entries));
    const auto mask_rows = static_cast<std::size_t>(program::kMaskMaxRows);
    const auto mask_words = mask_rows * static_cast<std::size_t>((spec.vocab_size + 31) / 32);
    CELLM_ASSIGN_OR_RETURN(p->mask_words_host_, PinnedBuffer<std::uint32_t>::allocate(mask_words));
    CELLM_ASSIGN_OR_RETURN(p->mask_words_device_,
                           DeviceBuffer<std::uint32_t>::allocate(mask_words));
    CELLM_ASSIGN_OR_RETURN(p->mask_active_host_, PinnedBuffer<std::int32_t>::allocate(mask_rows));
    CELLM_ASSIGN_OR_RETURN(p->mask_active_device_, DeviceBuffer<std::int32_t>::allocate(mask_rows));
  }
  if (options.device_sampling) CELLM_RETURN_IF_ERROR(p->allocate_logprobs(steps));
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
  CELLM_LOG_INFO("cuda: weights {} MiB, workspace {} MiB, KV pool {} cells of {} ({} MiB)",
                 p->forward_->weight_bytes() >> 20, p->forward_->workspace_bytes() >> 20, cells,
                 kv_dtype == KvDtype::kFp8 ? "fp8 e4m3" : "bf16", p->forward_->kv_bytes() >> 20);
  return p;
}

std::optional<std::int64_t> CudaProgram::constant(std::string_view name) const {
  if (name == program::kVocabSizeConstant) return spec().vocab_size;
  if (name == program::kMaxContextConstant) return spec().max_context;
  if (name == program::kMaxCellsConstant) return forward_->kv_cells();
  if (name == program::kKvCellBytesConstant) {
    return static_cast<std::int64_t>(CudaForward::kv_bytes_per_cell(spec(), forward_->kv_dtype()));
  }
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
  cache_ = std::move(cache);
  return Status::ok();
}

void stage_padding(std::int32_t* arrays, std::size_t pitch, std::int32_t width) {
  for (int a = 0; a < StepArrays::kAttentionRows; ++a) {
    const auto which = static_cast<StepArrays::Index>(a);
    const std::int32_t fill = which == StepArrays::kSlots   ? -1
                              : which == StepArrays::kCells ? cache::kScratchCell
                                                            : 0;
    std::fill_n(arrays + static_cast<std::size_t>(a) * pitch, width, fill);
  }
}

ForwardShape CudaProgram::static_shape(const program::MethodEntry& method,
                                       std::int32_t keys) const {
  ForwardShape shape{method.width, method.width, uses_decode_kernel(method), knobs_.kernels};
  shape.key_span = forward_->key_span(keys);
  return shape;
}

const CudaProgram::CapturedStep* CudaProgram::replayable(const ForwardShape& shape) const {
  if (!knobs_.use_graphs) return nullptr;
  auto graph = graphs_.find({shape.width, forward_->decode_split(shape)});
  return graph == graphs_.end() ? nullptr : &graph->second;
}

Status CudaProgram::capture(const std::string& name, const program::MethodEntry& method) {
  // A padding-only step touches nothing but the scratch cell; each graph's
  // step runs eagerly once so every GEMM plan exists, then the same
  // launches are captured.
  stage_padding(staging_.data(), static_cast<std::size_t>(max_step()), method.width);
  upload_step(staging_.data(), static_cast<std::size_t>(max_step()), method.width,
              StepArrays::kAttentionRows);
  // One graph per decode split: the split count is baked into the
  // attention's grid, and a short session's step wants few splits
  // (ForwardShape::key_span). Wide methods take one split at every span, so
  // one graph.
  for (const std::int32_t span : forward_->key_spans()) {
    const ForwardShape shape = static_shape(method, span);
    const std::pair<std::int32_t, DecodeSplit> key{method.width, forward_->decode_split(shape)};
    if (graphs_.contains(key)) continue;
    CELLM_RETURN_IF_ERROR(forward_->enqueue(shape, stream_.get()));
    stream_.synchronize();
    argmax_ready_ = nullptr;  // the warm-up above rewrote the logits
    GraphExec::begin_capture(stream_.get());
    // The step's upload stays outside the graph. (Sessions 16-19 captured it
    // as the first node; a separate copy measured within the spread, H200 1B
    // batch 1 0.856 / 0.848 against 0.848 / 0.851 ms/step. A kernel reading
    // the staging buffer through its device mapping measured no faster
    // either: bench/results/README.md, session 17.)
    ForwardShape captured = shape;
    // A greedy one-token step then finds its token written with the logits.
    if (methods_.options().device_sampling) captured.argmax_to = tokens_mapped_;
    Status enqueued = forward_->enqueue(captured, stream_.get());
    auto graph = GraphExec::end_capture(stream_.get());
    CELLM_RETURN_IF_ERROR(enqueued.with_context(name));
    if (!graph.ok()) return graph.status().with_context(name);
    graphs_[key] = CapturedStep{std::move(graph).value(), forward_->takes_argmax(captured)};
    ++stats_.graphs_captured;
  }
  return Status::ok();
}

// Only what a step reads travels: the first `width` entries of the first
// `arrays` arrays (the row order only when split), not max_step of them; at
// batch 1 that is 24 bytes instead of 48 KB. The source must stay as written
// until the copy runs on the stream, which the step's wait for its tokens
// (or logits) ensures.
void CudaProgram::upload_step(const std::int32_t* src, std::size_t pitch, std::int32_t width,
                              int arrays) {
  const std::size_t row = sizeof(std::int32_t);
  CELLM_CUDA_CHECK(
      cudaMemcpy2DAsync(forward_->step_device(), static_cast<std::size_t>(max_step()) * row, src,
                        pitch * row, static_cast<std::size_t>(width) * row,
                        static_cast<std::size_t>(arrays), cudaMemcpyHostToDevice, stream_.get()));
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
  // Any graph of the width: capture() takes every split at once.
  const auto first = graphs_.lower_bound({m->width, DecodeSplit{.splits = 0}});
  const bool captured = first != graphs_.end() && first->first.first == m->width;
  if (m->kind == MethodKind::kStatic && knobs_.use_graphs && !captured) {
    CELLM_RETURN_IF_ERROR(capture(std::string(name), *m));
  }
  m->loaded = true;
  return Status::ok();
}

Status CudaProgram::sync_tables(std::span<const program::PlacedRow> rows) {
  const std::int32_t stride = forward_->table_stride();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const program::PlacedRow& row = rows[r];
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
  CELLM_RETURN_IF_ERROR(sync_tables({call.rows.data(), static_cast<std::size_t>(call.placed)}));
  std::int32_t keys = 1;  // the longest row's keys (its window aside)
  for (std::int32_t i = 0; i < width; ++i) {
    const program::PlacedRow& row = call.rows[static_cast<std::size_t>(i)];
    staging(StepArrays::kTokens)[i] =
        static_cast<std::int32_t>(call.tokens[static_cast<std::size_t>(i)]);
    staging(StepArrays::kPositions)[i] =
        static_cast<std::int32_t>(call.positions[static_cast<std::size_t>(i)]);
    staging(StepArrays::kSlots)[i] = i < call.placed ? row.seq : -1;
    staging(StepArrays::kCells)[i] = i < call.placed ? row.cell : cache::kScratchCell;
    if (i < call.placed) keys = std::max(keys, row.position + 1);
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
  const CapturedStep* graph = is_static ? replayable(static_shape(method, keys)) : nullptr;
  ForwardShape shape{width, computed, uses_decode_kernel(method), knobs_.kernels};
  shape.key_span = forward_->key_span(keys);
  if (!shape.decode_attention) {
    shape.decode_rows =
        split_attention_rows({staging(StepArrays::kSlots), w}, width,
                             {staging(StepArrays::kAttentionRows), w}, row_scratch_);
  }
  argmax_ready_ = graph != nullptr && graph->argmax ? forward_->logits() : nullptr;
  upload_step(staging_.data(), static_cast<std::size_t>(max_step()), width,
              shape.decode_rows >= 0 ? StepArrays::kCount : StepArrays::kAttentionRows);
  if (graph != nullptr) {
    graph->graph.launch(stream_.get());
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
    p.cluster = static_cast<std::int64_t>(rows) * kSampleClusterBlocks <= multiprocessor_count();
    // The top-k / top-p passes over the compacted candidates (the same
    // tokens as over the row, faster: bench/results, session 12).
    p.candidates = true;
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
  penalize_in_flight_ = false;  // the wait below covers its copies too
  mask_in_flight_ = false;
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
  p.logits_stride = spec().vocab_size;
  p.rows = rows;
  p.vocab = static_cast<std::int32_t>(spec().vocab_size);
  // The split argmax is the settled choice (kernel_choice.h).
  p.argmax_partials = argmax_partials_.data();
  p.argmax_counters = argmax_counters_.data();
  launch_sample_argmax(p, stream_.get());
}

Result<std::vector<Tensor>> CudaProgram::run_penalize(std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(program::PenalizeCall call,
                         methods_.check_penalize(inputs, spec().vocab_size, Device::kCuda));
  // Another group of this step's rows: its staged inputs may still be copying.
  if (penalize_in_flight_) stream_.synchronize();
  const auto rows = static_cast<std::size_t>(call.rows);
  std::memcpy(penalize_rows_host_.data(), call.row_params.data(),
              rows * kPenalizeRowParams * sizeof(float));
  std::memcpy(penalize_offsets_host_.data(), call.offsets.data(),
              (rows + 1) * sizeof(std::int32_t));
  CELLM_CUDA_CHECK(cudaMemcpyAsync(penalize_rows_device_.data(), penalize_rows_host_.data(),
                                   rows * kPenalizeRowParams * sizeof(float),
                                   cudaMemcpyHostToDevice, stream_.get()));
  CELLM_CUDA_CHECK(cudaMemcpyAsync(penalize_offsets_device_.data(), penalize_offsets_host_.data(),
                                   (rows + 1) * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                   stream_.get()));
  if (!call.entries.empty()) {
    std::memcpy(penalize_entries_host_.data(), call.entries.data(),
                call.entries.size() * sizeof(std::int32_t));
    CELLM_CUDA_CHECK(cudaMemcpyAsync(penalize_entries_device_.data(), penalize_entries_host_.data(),
                                     call.entries.size() * sizeof(std::int32_t),
                                     cudaMemcpyHostToDevice, stream_.get()));
  }
  PenalizeParams p;
  // The method's contract: the logits are adjusted where they lie.
  p.logits = const_cast<float*>(static_cast<const float*>(inputs[0].data()));
  p.row_params = penalize_rows_device_.data();
  p.offsets = penalize_offsets_device_.data();
  p.entries = penalize_entries_device_.data();
  p.logits_stride = spec().vocab_size;
  p.rows = call.rows;
  p.vocab = static_cast<std::int32_t>(spec().vocab_size);
  CELLM_RETURN_IF_ERROR(p.validate());
  launch_sample_penalize(p, stream_.get());
  penalize_in_flight_ = true;
  // Any argmax the step's graph took is stale now.
  argmax_ready_ = nullptr;
  return std::vector<Tensor>{};
}

Result<std::vector<Tensor>> CudaProgram::run_mask(std::span<const Tensor> inputs) {
  CELLM_ASSIGN_OR_RETURN(program::MaskCall call,
                         methods_.check_mask(inputs, spec().vocab_size, Device::kCuda));
  // Another group of this step's rows: its staged words may still be copying.
  if (mask_in_flight_) stream_.synchronize();
  const auto rows = static_cast<std::size_t>(call.rows);
  const auto per_row = static_cast<std::size_t>(call.words_per_row);
  bool any = false;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::span<const std::uint32_t> row = call.words.subspan(r * per_row, per_row);
    const bool active =
        std::any_of(row.begin(), row.end(), [](std::uint32_t w) { return w != ~0u; });
    mask_active_host_.data()[r] = active ? 1 : 0;
    any = any || active;
  }
  if (!any) return std::vector<Tensor>{};
  std::memcpy(mask_words_host_.data(), call.words.data(), rows * per_row * sizeof(std::uint32_t));
  CELLM_CUDA_CHECK(cudaMemcpyAsync(mask_words_device_.data(), mask_words_host_.data(),
                                   rows * per_row * sizeof(std::uint32_t), cudaMemcpyHostToDevice,
                                   stream_.get()));
  CELLM_CUDA_CHECK(cudaMemcpyAsync(mask_active_device_.data(), mask_active_host_.data(),
                                   rows * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                   stream_.get()));
  MaskParams p;
  // The method's contract: the logits are masked where they lie.
  p.logits = const_cast<float*>(static_cast<const float*>(inputs[0].data()));
  p.words = mask_words_device_.data();
  p.active = mask_active_device_.data();
  p.logits_stride = spec().vocab_size;
  p.words_per_row = call.words_per_row;
  p.rows = call.rows;
  p.vocab = static_cast<std::int32_t>(spec().vocab_size);
  CELLM_RETURN_IF_ERROR(p.validate());
  launch_sample_mask(p, stream_.get());
  mask_in_flight_ = true;
  // Any argmax the step's graph took is stale now.
  argmax_ready_ = nullptr;
  return std::vector<Tensor>{};
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
    case MethodKind::kPenalize: return run_penalize(inputs);
    case MethodKind::kMask: return run_mask(inputs);
    case MethodKind::kLogprobs: return run_logprobs(inputs);
  }
  return internal_error("method '{}' has an unknown kind", name);
}

}  // namespace detail

using detail::CudaProgram;

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
                                                       const program::ProgramOptions& options,
                                                       const format::GgufFile* gguf) {
  CELLM_RETURN_IF_ERROR(spec.validate());
  CELLM_ASSIGN_OR_RETURN(DeviceWeights w,
                         upload_weights(spec, weights, gguf, options.keep_quantized));
  if (w.quantized()) {
    CELLM_LOG_INFO("weights on the GPU: {:.0f} MiB; projections kept quantized: {} (the rest bf16)",
                   static_cast<double>(w.bytes()) / (1 << 20), w.quant.summary);
  }
  return make_program(spec, std::move(w), options);
}

Result<std::unique_ptr<program::Program>> load_random_program(
    const model::ModelSpec& spec, std::uint64_t seed, const program::ProgramOptions& options,
    bool fp8) {
  CELLM_RETURN_IF_ERROR(spec.validate());
  CELLM_ASSIGN_OR_RETURN(DeviceWeights w, random_weights(spec, seed, fp8));
  return make_program(spec, std::move(w), options);
}

Result<Tensor> copy_to_host(const Tensor& tensor) {
  if (tensor.device() == Device::kCpu) return tensor.clone();
  Tensor host = Tensor::empty(tensor.dtype(), tensor.shape());
  CELLM_CUDA_CHECK(cudaDeviceSynchronize());
  CELLM_CUDA_CHECK(cudaMemcpy(host.data(), tensor.data(), tensor.nbytes(), cudaMemcpyDeviceToHost));
  return host;
}

Result<KvDtype> kv_dtype_of(DType dtype) {
  if (dtype == DType::kBF16) return KvDtype::kBF16;
  if (dtype == DType::kF8E4M3) return KvDtype::kFp8;
  return not_supported("kv_dtype {}: the CUDA program keeps K/V in bf16 or fp8 (E4M3)",
                       dtype_name(dtype));
}

std::int64_t kv_cells_for_memory(const model::ModelSpec& spec, double budget_bytes,
                                 KvDtype kv_dtype) {
  if (!(budget_bytes > 0.0)) return 0;
  const auto cells = static_cast<std::int64_t>(
      budget_bytes / static_cast<double>(CudaForward::kv_bytes_per_cell(spec, kv_dtype)));
  return std::min<std::int64_t>(cells, std::numeric_limits<std::int32_t>::max() / 2);
}

CudaKvPool cuda_kv_pool(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? CudaKvPool{} : p->kv_pool();
}

const CudaProgramKnobs* cuda_program_knobs(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? nullptr : &p->knobs();
}

std::string cuda_weight_blocks(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? std::string() : p->weight_blocks();
}

std::size_t cuda_weight_bytes_read(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? 0 : p->weight_bytes_read();
}

const CudaProgramStats* cuda_program_stats(program::Program& program) {
  auto* p = dynamic_cast<CudaProgram*>(&program);
  return p == nullptr ? nullptr : &p->stats();
}

}  // namespace cellm::cuda
