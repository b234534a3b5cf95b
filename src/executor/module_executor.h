// ModuleExecutor: the batching executor over a program with one dynamic
// forward method (default "forward"), batching_spec §2.5. A batch is packed
// onto one token axis and run in unpadded slices of at most the method's
// width; tokens are sampled on the host with each session's policy. The
// method either selects rows (tokens, positions, selector) or returns a
// logits row per token (tokens, positions).
//
// Thread-safety: not thread-safe; every call happens on the engine thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cache/cell_cache.h"
#include "cellm/executor.h"
#include "cellm/status.h"
#include "executor/kv_metrics.h"
#include "executor/session_table.h"
#include "program/program.h"

namespace cellm::executor {

class ModuleExecutor final : public Executor {
 public:
  // InvalidArgument for a null program or limits that are not positive, that
  // pass the context or that the published pool (get_offgraph_kv_max_cells,
  // minus the scratch cell) cannot hold; InvalidProgram for a missing,
  // static or malformed method. Without a published pool size the pool is
  // sized to max_sessions x max_session_tokens plus the scratch cell.
  static Result<std::unique_ptr<ModuleExecutor>> create(
      std::shared_ptr<program::Program> program, int max_sessions, int max_session_tokens,
      std::string method = std::string(program::kModuleMethod));

  std::size_t preferred_batch_tokens() const override { return static_cast<std::size_t>(width_); }
  bool initialize() override;
  std::optional<SessionId> open_session() override;
  void close_session(SessionId session) override;
  std::optional<SessionId> clone(SessionId source, Position upto) override;
  void set_sampling(SessionId session, const SamplingParams& params,
                    std::optional<std::uint64_t> seed) override;
  // A session without a policy samples greedily.
  bool execute(const BatchInput& batch, BatchOutput& out) override;

  cache::CellCache& cache_control() { return *cache_; }
  OffGraphKVMetrics kv_metrics() const;
  std::uint64_t forward_calls() const { return calls_; }
  int max_session_tokens() const { return sessions_.max_session_tokens(); }

 private:
  ModuleExecutor(std::shared_ptr<program::Program> program, std::shared_ptr<cache::CellCache> cache,
                 std::string method, std::int64_t width, bool selects_rows, int min_selected_rows,
                 std::int64_t vocab, int max_sessions, int max_session_tokens,
                 std::uint64_t kv_cell_bytes);

  std::shared_ptr<program::Program> program_;
  std::shared_ptr<cache::CellCache> cache_;
  std::string method_;
  std::int64_t width_;
  bool selects_rows_;
  int min_selected_rows_;
  std::int64_t vocab_size_;
  std::uint64_t kv_cell_bytes_;
  SessionTable sessions_;
  std::uint64_t calls_ = 0;
  bool initialized_ = false;
};

}  // namespace cellm::executor
