// decode_greedy on the CUDA program (program.h): greedy steps chained on the
// device, and the argmax launches they share with the samplers.
#include <algorithm>
#include <vector>

#include "backend/cuda/attention_rows.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_program_impl.h"
#include "backend/cuda/kernels/sample.cuh"
#include "cache/cell_cache.h"

namespace cellm::cuda::detail {

void CudaProgram::launch_argmax(const float* logits, std::int32_t rows) {
  SampleParams p;
  p.logits = logits;
  p.out = tokens_mapped_;
  p.feedback = forward_->feedback_ids();
  p.logits_stride = spec().vocab_size;
  p.rows = rows;
  p.vocab = static_cast<std::int32_t>(spec().vocab_size);
  // The split argmax: a few rows spread over up to 64 blocks each.
  p.argmax_partials = argmax_partials_.data();
  p.argmax_counters = argmax_counters_.data();
  launch_sample_argmax(p, stream_.get());
}

Status CudaProgram::launch_static(const ForwardShape& shape, std::int32_t rows, bool argmax) {
  if (const CapturedStep* graph = replayable(shape)) {
    graph->graph.launch(stream_.get());
    if (argmax && !graph->argmax) launch_argmax(forward_->logits(), rows);
    return Status::ok();
  }
  ForwardShape with_argmax = shape;
  with_argmax.argmax_to = tokens_mapped_;
  const bool head_argmax = argmax && forward_->takes_argmax(with_argmax);
  CELLM_RETURN_IF_ERROR(forward_->enqueue(head_argmax ? with_argmax : shape, stream_.get()));
  if (argmax && !head_argmax) launch_argmax(forward_->logits(), rows);
  return Status::ok();
}

// decode_greedy (program.h). Every step is staged in a host slot of its own
// and launched without waiting for the one before; its token rows hold
// -1 - h from step 1 on, so its embedding reads the ids the previous step's
// argmax left in the forward's feedback buffer and records them at h. Runs
// of kChainGraphSizes steps that cut their keys alike (DecodeSplit, from
// ForwardShape::key_span) replay one graph of that many steps, whose steps
// follow each other by programmatic launch with one upload before it; the
// rest go one graph (or eager forward) a step. Every step thus cuts its keys
// as it would alone, and draws what it would. The host waits once.
Result<std::vector<Tensor>> CudaProgram::run_decode_greedy(std::span<const Tensor> inputs) {
  constexpr std::string_view name = program::kDecodeGreedyMethod;
  if (cache_ == nullptr) return invalid_argument("{}: bind a CellCache first", name);
  CELLM_ASSIGN_OR_RETURN(program::DecodeGreedyCall call,
                         methods_.check_decode_greedy(inputs, spec().vocab_size, *cache_));
  const std::int32_t t = call.width;
  const program::MethodEntry* method = methods_.narrowest_static(t);
  if (method == nullptr || !method->loaded) {
    return invalid_argument(
        "{}: the static method for {} rows is not loaded; load forward_{} first", name, t,
        method == nullptr ? t : method->width);
  }
  if (!uses_decode_kernel(*method)) {
    return invalid_argument("{}: takes at most {} rows on the CUDA program, got {}", name,
                            kMaxDecodeWidth, t);
  }
  const std::int32_t w = method->width;
  // Step s as a single step would run it: its longest row sets its split.
  const auto step_shape = [&](std::int32_t s) {
    std::int32_t keys = 1;
    for (std::int32_t i = 0; i < t; ++i) {
      const auto row =
          static_cast<std::size_t>(s) * static_cast<std::size_t>(t) + static_cast<std::size_t>(i);
      keys = std::max(keys, call.rows[row].position + 1);
    }
    return static_shape(*method, keys);
  };
  const bool graphs = replayable(step_shape(0)) != nullptr;
  // The runs: kChainGraphSizes steps that cut their keys alike in one graph
  // (so each step splits them as it would alone), else one step.
  struct Run {
    std::int32_t first;
    std::int32_t steps;
    ForwardShape shape;
    DecodeSplit split;
  };
  std::vector<Run> runs;
  for (std::int32_t s = 0; s < call.steps;) {
    const ForwardShape shape = step_shape(s);
    Run run{s, 1, shape, forward_->decode_split(shape)};
    for (const std::int32_t size : kChainGraphSizes) {
      // Spans only grow, so the last step's split is the run's odd one out.
      if (graphs && call.steps - s >= size &&
          forward_->decode_split(step_shape(s + size - 1)) == run.split) {
        run.steps = size;
        break;
      }
    }
    runs.push_back(run);
    s += run.steps;
  }
  // The graphs first: a capture stages padding steps in the host slots,
  // which the runs' uploads read.
  for (const Run& run : runs) {
    if (run.steps > 1 && !chain_graphs_.contains({w, run.steps, run.split})) {
      CELLM_RETURN_IF_ERROR(capture_chain(run.shape, run.steps).with_context(name));
    }
  }
  const std::size_t slot_ints = StepArrays::kAttentionRows * static_cast<std::size_t>(w);
  // Each run is staged and launched before the next is staged, so the GPU
  // starts while the host stages the rest.
  for (const Run& run : runs) {
    const std::int32_t s = run.first;
    for (std::int32_t i = s; i < s + run.steps; ++i) {
      CELLM_RETURN_IF_ERROR(stage_chain_step(call, i, w));
    }
    if (run.steps > 1) {
      CELLM_CUDA_CHECK(
          cudaMemcpyAsync(forward_->chain_steps_device(), chain_staging(s, StepArrays::kTokens, w),
                          static_cast<std::size_t>(run.steps) * slot_ints * sizeof(std::int32_t),
                          cudaMemcpyHostToDevice, stream_.get()));
      chain_graphs_.at({w, run.steps, run.split}).launch(stream_.get());
    } else {
      upload_step(chain_staging(s, StepArrays::kTokens, w), static_cast<std::size_t>(w), w,
                  StepArrays::kAttentionRows);
      CELLM_RETURN_IF_ERROR(launch_static(run.shape, t, /*argmax=*/true).with_context(name));
    }
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
  CELLM_RETURN_IF_ERROR(
      sync_tables(std::span<const program::PlacedRow>(call.rows).subspan(first, t)));
  for (std::int32_t i = 0; i < width; ++i) {
    const bool real = i < t;
    const program::PlacedRow& row = call.rows[first + static_cast<std::size_t>(real ? i : 0)];
    chain_staging(s, StepArrays::kTokens, width)[i] =
        !real    ? 0
        : s == 0 ? static_cast<std::int32_t>(call.tokens[static_cast<std::size_t>(i)])
                 : -1 - ((s - 1) * t + i);
    chain_staging(s, StepArrays::kPositions, width)[i] = real ? row.position : 0;
    chain_staging(s, StepArrays::kSlots, width)[i] = real ? row.seq : -1;
    chain_staging(s, StepArrays::kCells, width)[i] = real ? row.cell : cache::kScratchCell;
    chain_staging(s, StepArrays::kSelector, width)[i] = std::min(i, t - 1);
  }
  const auto wide = static_cast<std::size_t>(width);
  first_step_positions({chain_staging(s, StepArrays::kSlots, width), wide},
                       {chain_staging(s, StepArrays::kPositions, width), wide},
                       {chain_staging(s, StepArrays::kFreshFrom, width), wide}, row_scratch_);
  return Status::ok();
}

// `steps` steps of `step`'s shape in one graph, each reading its chain
// slot; its argmax as the single-step graph takes it (the lm_head's, or the
// argmax kernel over every row). Captured over padding-only slots after one
// eager run of its first two steps, the two kinds of step it holds (the
// first alone starts without a programmatic launch); the single-step graph
// of this shape already ran every other kernel once.
Status CudaProgram::capture_chain(const ForwardShape& step, std::int32_t steps) {
  const std::int32_t w = step.width;
  for (std::int32_t s = 0; s < steps; ++s) {
    stage_padding(chain_staging(s, StepArrays::kTokens, w), static_cast<std::size_t>(w), w);
  }
  const std::size_t bytes = static_cast<std::size_t>(steps) * StepArrays::kAttentionRows *
                            static_cast<std::size_t>(w) * sizeof(std::int32_t);
  CELLM_CUDA_CHECK(cudaMemcpyAsync(forward_->chain_steps_device(),
                                   chain_staging(0, StepArrays::kTokens, w), bytes,
                                   cudaMemcpyHostToDevice, stream_.get()));
  // Every step writes its ids to tokens_mapped_ as a single step does; only
  // the last step's are read there. (Keeping the others on the device
  // measured equal, H200 session 21: 1B batch 1 0.797-0.803 against
  // 0.796-0.799 ms/step, 8B 4.004 against 4.001.)
  const auto enqueue_steps = [&](std::int32_t count) -> Status {
    for (std::int32_t s = 0; s < count; ++s) {
      ForwardShape shape = step;
      shape.argmax_to = tokens_mapped_;
      shape.chain_slot = s;
      const bool head = forward_->takes_argmax(shape);
      if (!head) shape.argmax_to = nullptr;
      CELLM_RETURN_IF_ERROR(forward_->enqueue(shape, stream_.get()));
      if (!head) launch_argmax(forward_->logits(), w);
    }
    return Status::ok();
  };
  CELLM_RETURN_IF_ERROR(enqueue_steps(std::min(steps, 2)));
  stream_.synchronize();
  GraphExec::begin_capture(stream_.get());
  Status enqueued = enqueue_steps(steps);
  auto graph = GraphExec::end_capture(stream_.get());
  CELLM_RETURN_IF_ERROR(enqueued);
  if (!graph.ok()) return graph.status();
  chain_graphs_.emplace(std::make_tuple(w, steps, forward_->decode_split(step)),
                        std::move(graph).value());
  return Status::ok();
}

}  // namespace cellm::cuda::detail
