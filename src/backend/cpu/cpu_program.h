// CpuProgram: the float32 reference Program (DESIGN §2). It exports the same
// method family as the CUDA program — static forward_N, dynamic
// forward_others and forward, sample, sample_argmax, sample_penalize,
// sample_mask and sample_logprobs,
// and the constants — so every executor path runs without a GPU. It owns
// the KV storage (per layer [cells, kv_heads, head_dim] f32 for K and V),
// sized by the bound CellCache; the cache's current step says which cells
// each row writes.
//
// Forward outputs: logits f32 [R, V] for the selector's rows and, with
// ProgramOptions::taps, taps f32 [T, D] — each row's final hidden state
// after the final norm, i.e. exactly what the LM head multiplies.
//
// Thread-safety: not thread-safe; one thread binds, loads and executes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_forward.h"
#include "program/forward_methods.h"
#include "program/program.h"
#include "program/program_options.h"

namespace cellm::cpu {

inline constexpr std::string_view kBackendName = "cpu";

class CpuProgram final : public program::Program {
 public:
  // Checks the spec, the weights' shapes and the options; converts weights to f32.
  static Result<std::unique_ptr<CpuProgram>> create(const model::ModelSpec& spec,
                                                    const model::Weights& weights,
                                                    const program::ProgramOptions& options);

  std::string backend_name() const override { return std::string(kBackendName); }
  std::vector<std::string> method_names() const override;
  Result<program::MethodMeta> method_meta(std::string_view name) const override;
  std::optional<std::int64_t> constant(std::string_view name) const override;
  program::CacheLayout cache_layout() const override;

  // The cache's max_cells must not exceed get_offgraph_kv_max_cells. Binding
  // (re)allocates zeroed K/V storage for max_cells cells.
  Status bind_cache(std::shared_ptr<cache::CellCache> cache) override;
  Status load_method(std::string_view name) override;
  // Forwards validate everything (shapes, token ids, selector rows, positions
  // against the cache's current placement) before touching the KV storage; a
  // refused call changes nothing. Dynamic methods take T in [1, max_step].
  Result<std::vector<Tensor>> execute(std::string_view name,
                                      std::span<const Tensor> inputs) override;

  // The same program over another forward pass (the fast CPU program's):
  // the spec and options are checked as in create; `make_forward` runs after.
  static Result<std::unique_ptr<CpuProgram>> create_with(
      const model::ModelSpec& spec, const program::ProgramOptions& options,
      const std::function<Result<std::unique_ptr<ForwardPass>>()>& make_forward);

  const model::ModelSpec& spec() const { return forward_->spec(); }
  std::int32_t kv_cells() const { return kv_cells_; }
  // Bytes of K/V storage currently allocated (0 before bind_cache).
  std::size_t kv_bytes() const { return kv_ ? kv_->bytes() : 0; }

 private:
  CpuProgram(program::ForwardMethods methods, std::int32_t kv_cells,
             std::unique_ptr<ForwardPass> forward);

  const program::ProgramOptions& options() const { return methods_.options(); }
  Result<std::vector<Tensor>> run_forward(std::string_view name, const program::MethodEntry& method,
                                          std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> run_sampler(std::string_view name, const program::MethodEntry& method,
                                          std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> run_penalize(std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> run_mask(std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> run_logprobs(std::span<const Tensor> inputs);
  Result<StepRows> resolve_step(std::string_view name, const program::ForwardCall& call) const;

  program::ForwardMethods methods_;
  std::int32_t kv_cells_;
  std::unique_ptr<ForwardPass> forward_;
  std::shared_ptr<cache::CellCache> cache_;
  std::unique_ptr<KvStore> kv_;
  std::vector<float> logits_;
  std::vector<float> taps_;
  std::vector<std::int64_t> sampled_;
  // sample_logprobs's outputs: [R, 1 + kLogprobsMaxTop] and [R, kLogprobsMaxTop].
  std::vector<float> logprob_values_;
  std::vector<std::int64_t> logprob_ids_;
};

}  // namespace cellm::cpu
