// ToyProgram: a deterministic test double of a program, exporting forward_N
// methods, forward_others, an optional module "forward" and optional
// samplers (sample honours its optional suppressed ids; sample_penalize
// applies the reference logit adjustments; sample_logprobs reports the
// reference logprobs). Its "model" keeps
// one (token, position) record per cell and layer in its own KV pool, written
// through the cells the executor placed; each selected row's logits peak at a
// token hashed from every record the query attends through the cache's cell
// table (full history on window-0 layers, the last w positions otherwise). So
// padding that leaks into real cells, a wrong placement or a stale cell
// changes the output, and toy_next_token() predicts the right answer from
// token history alone.
//
// Thread-safety: not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "cache/cell_cache.h"
#include "executor/cuda_executor.h"
#include "program/program.h"

namespace cellm::executor::testing {

struct ToyConfig {
  std::int64_t vocab = 32;
  std::int64_t max_context = 64;
  std::int64_t max_cells = 256;
  std::vector<std::int32_t> static_widths = {1, 2, 4, 8};
  std::int32_t dynamic_width = 32;  // 0: no forward_others
  std::optional<std::int64_t> min_prefill_chunk;
  std::vector<std::int32_t> windows = {0, 4};
  bool device_logits = false;      // logits come back flagged Device::kCuda
  bool samplers = false;           // export sample and sample_argmax
  std::int64_t sampler_rows = 64;  // the samplers' row bound
  bool taps = false;               // forwards also return [T, 2] (token, position) per row
  std::int32_t module_width = 0;   // > 0: export a dynamic "forward" of this width
  bool module_selects_rows = true;
};

// The next token after `history` (the last entry is the query's token).
std::int64_t toy_next_token(std::span<const std::int64_t> history,
                            const std::vector<std::int32_t>& windows, std::int64_t vocab);
// The logits row the toy returns for a query predicting `next`.
std::vector<float> toy_logits(std::int64_t next, std::int64_t vocab);
// Greedy continuation of `prompt` by `steps` tokens.
std::vector<std::int64_t> toy_greedy(std::vector<std::int64_t> prompt, int steps,
                                     const std::vector<std::int32_t>& windows, std::int64_t vocab);

class ToyProgram : public program::Program {
 public:
  explicit ToyProgram(ToyConfig config);

  // Editable by tests that need a malformed program.
  std::map<std::string, program::MethodMeta, std::less<>> metas;
  std::map<std::string, std::int64_t, std::less<>> constants;
  program::CacheLayout layout;
  std::string fail_method;  // execute() of this method fails

  struct Call {
    std::string method;
    std::int64_t width = 0;  // token rows
    std::int64_t real = 0;   // placed (real) rows
    std::vector<std::int64_t> selector;
    std::size_t inputs = 0;                // samplers: how many inputs the call passed
    std::vector<std::int64_t> suppressed;  // sample: its suppressed ids, row-major
    std::int64_t entries = 0;              // sample_penalize: its entry count
  };
  std::vector<Call> calls;
  std::set<std::string, std::less<>> loaded;
  const ToyConfig& config() const { return config_; }

  std::string backend_name() const override { return "toy"; }
  std::vector<std::string> method_names() const override;
  Result<program::MethodMeta> method_meta(std::string_view method) const override;
  std::optional<std::int64_t> constant(std::string_view name) const override;
  program::CacheLayout cache_layout() const override { return layout; }
  Status bind_cache(std::shared_ptr<cache::CellCache> cache) override;
  Status load_method(std::string_view method) override;
  Result<std::vector<Tensor>> execute(std::string_view method,
                                      std::span<const Tensor> inputs) override;

 private:
  struct Record {
    std::int64_t token = -1;
    std::int64_t position = -1;
  };
  Result<std::vector<Tensor>> forward(std::string_view method, std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> sample(std::string_view method, std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> penalize(std::span<const Tensor> inputs);
  Result<std::vector<Tensor>> logprobs(std::span<const Tensor> inputs);
  // The toy model's next token for a query of `seq` at position `p`.
  Result<std::int64_t> next_token(cache::SeqId seq, std::int64_t p) const;

  ToyConfig config_;
  std::shared_ptr<cache::CellCache> cache_;
  std::vector<std::vector<Record>> kv_;  // [layer][cell]
  std::uint64_t placements_seen_ = 0;
  std::vector<float> logits_;
  std::vector<float> taps_;
  std::vector<std::int64_t> tokens_;
  std::vector<float> logprob_values_;  // sample_logprobs's outputs
  std::vector<std::int64_t> logprob_ids_;
};

// A CudaExecutor over `program` for four sessions, initialised; null if
// either step fails (the reason is logged).
std::unique_ptr<CudaExecutor> make_toy_executor(std::shared_ptr<ToyProgram> program);

}  // namespace cellm::executor::testing
