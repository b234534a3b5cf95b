// CudaProgram's declaration (cuda_program.cpp: loading, forwards, samplers).
// Internal to the backend: everyone else reaches the program through
// cuda_program.h.
//
// Thread-safety: not thread-safe; one engine thread binds, loads, executes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/cuda_program.h"
#include "backend/cuda/resources.h"
#include "program/forward_methods.h"

namespace cellm::cuda::detail {

using program::MethodKind;

inline constexpr std::string_view kBackend = "cuda";
// Static widths up to kMaxDecodeWidth use the split-KV attention kernel
// (decode-heavy batches); wider steps run eagerly and split their rows
// between the two kernels (attention_rows.h).
// Device memory kept out of the K/V pool for the cell tables and the
// runtime's own needs.
inline constexpr std::size_t kReserveBytes = std::size_t{1} << 30;
// A padding step's arrays (StepArrays up to kAttentionRows) for `width`
// rows, each array `pitch` entries after the one before: rows that touch
// nothing but the scratch cell.
void stage_padding(std::int32_t* arrays, std::size_t pitch, std::int32_t width);

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

  const CudaProgramKnobs& knobs() const { return knobs_; }
  const CudaProgramStats& stats() const { return stats_; }
  std::string weight_blocks() const { return forward_->weight_blocks(); }
  std::size_t weight_bytes_read() const { return forward_->weight_bytes_read(); }
  CudaKvPool kv_pool() const {
    return {forward_->kv_cells(), forward_->kv_dtype(), forward_->kv_bytes()};
  }

 private:
  CudaProgram(program::ForwardMethods methods, std::unique_ptr<CudaForward> forward,
              CudaProgramKnobs knobs)
      : methods_(std::move(methods)), forward_(std::move(forward)), knobs_(knobs) {}
  const model::ModelSpec& spec() const { return forward_->spec(); }
  std::int32_t max_step() const { return forward_->max_step(); }
  std::int32_t* staging(StepArrays::Index which) const {
    return staging_.data() + static_cast<std::size_t>(which) * static_cast<std::size_t>(max_step());
  }
  static bool uses_decode_kernel(const program::MethodEntry& m) {
    return m.kind == MethodKind::kStatic && m.width <= kMaxDecodeWidth;
  }

  // A captured step, and whether its lm_head GEMV also writes the argmax of
  // its logits row into tokens_mapped_.
  struct CapturedStep {
    GraphExec graph;
    bool argmax = false;
  };

  // A static method's step whose longest row attends `keys` keys.
  ForwardShape static_shape(const program::MethodEntry& method, std::int32_t keys) const;
  // The graph that replays `shape` of a static method (graphs_'s key: its
  // width and decode split), or null: graphs off, or not captured.
  const CapturedStep* replayable(const ForwardShape& shape) const;
  // Captures one graph for each decode split the method's steps can take
  // (CudaForward::key_spans).
  Status capture(const std::string& name, const program::MethodEntry& method);
  // Copies `arrays` step arrays of `width` entries, `pitch` entries apart in
  // `src`, into the forward's step arrays.
  void upload_step(const std::int32_t* src, std::size_t pitch, std::int32_t width, int arrays);
  Status sync_tables(std::span<const program::PlacedRow> rows);
  Result<std::vector<Tensor>> run_forward(std::string_view name, const program::MethodEntry& method,
                                          std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> run_sampler(std::string_view name, const program::MethodEntry& method,
                                          std::span<const Tensor> inputs);
  // sample_penalize (program.h): the rows, offsets and entries to the
  // device, then the kernel over the logits in place.
  Result<std::vector<Tensor>> run_penalize(std::span<const Tensor> inputs);
  // sample_mask (program.h): the rows' mask words to the device, then the
  // kernel over the logits in place (rows of all ones are skipped).
  Result<std::vector<Tensor>> run_mask(std::span<const Tensor> inputs);
  // sample_logprobs (program.h; cuda_program_logprobs.cpp): params, drawn
  // ids and suppressed ids to the device, the kernel, the results back.
  Result<std::vector<Tensor>> run_logprobs(std::span<const Tensor> inputs);
  // Sizes logprobs_ for `steps` rows (at creation, with device sampling).
  Status allocate_logprobs(std::size_t steps);
  // Launches the device argmax of `rows` rows of `logits` (ids into
  // tokens_mapped_).
  void launch_argmax(const float* logits, std::int32_t rows);

  program::ForwardMethods methods_;
  std::unique_ptr<CudaForward> forward_;
  const CudaProgramKnobs knobs_;  // from the options, fixed at creation
  std::shared_ptr<cache::CellCache> cache_;
  Stream stream_;
  PinnedBuffer<std::int32_t> staging_;     // [StepArrays::kCount, max_step], as on the device
  std::vector<std::int32_t> row_scratch_;  // attention_rows.h's per-slot counts
  // Static methods' graphs by width and how they cut the keys.
  std::map<std::pair<std::int32_t, DecodeSplit>, CapturedStep> graphs_;
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
  // sample_penalize's staging: row params [max_step, 3], offsets
  // [max_step + 1] and entries [kPenalizeMaxEntries, 4], page-locked and on
  // the device, sized at creation. A second call before the step's wait
  // waits first: the page-locked copies may still be in flight.
  PinnedBuffer<float> penalize_rows_host_;
  DeviceBuffer<float> penalize_rows_device_;
  PinnedBuffer<std::int32_t> penalize_offsets_host_;
  DeviceBuffer<std::int32_t> penalize_offsets_device_;
  PinnedBuffer<std::int32_t> penalize_entries_host_;
  DeviceBuffer<std::int32_t> penalize_entries_device_;
  bool penalize_in_flight_ = false;
  // sample_mask's staging: the mask words [kMaskMaxRows, ceil(V / 32)] and a
  // per-row active flag, page-locked and on the device, sized at creation
  // (262,144 ids: 8 MiB each way). Reused like penalize's.
  PinnedBuffer<std::uint32_t> mask_words_host_;
  DeviceBuffer<std::uint32_t> mask_words_device_;
  PinnedBuffer<std::int32_t> mask_active_host_;
  DeviceBuffer<std::int32_t> mask_active_device_;
  bool mask_in_flight_ = false;
  // sample_logprobs's staging and results, [max_step] rows, page-locked and
  // on the device, sized at creation.
  struct LogprobsBuffers {
    PinnedBuffer<float> params_host;  // [rows, 2]
    DeviceBuffer<float> params_device;
    PinnedBuffer<std::int32_t> tokens_host;  // [rows]
    DeviceBuffer<std::int32_t> tokens_device;
    PinnedBuffer<std::int32_t> suppressed_host;  // [rows, 8]
    DeviceBuffer<std::int32_t> suppressed_device;
    PinnedBuffer<float> values_host;  // [rows, 1 + 20]
    DeviceBuffer<float> values_device;
    PinnedBuffer<std::int32_t> ids_host;  // [rows, 20]
    DeviceBuffer<std::int32_t> ids_device;
    std::vector<float> values;  // the method's outputs
    std::vector<std::int64_t> ids;
  } logprobs_;
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

}  // namespace cellm::cuda::detail
