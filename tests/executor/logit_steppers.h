// LogitStepper: one interface over the three executor paths a golden test
// reads every token's logits through — ModuleExecutor::execute and
// CudaExecutor::execute (rows via a RecordingProgram; each greedy token must
// be its row's argmax) and CudaExecutor::execute_raw (all rows, reversed).
// Thread-safety: not thread-safe; one test thread drives a stepper.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "cellm/status.h"
#include "executor/cuda_executor.h"
#include "executor/module_executor.h"
#include "recording_program.h"

namespace cellm::executor::testing {

using Rows = std::vector<std::vector<float>>;
using StreamId = std::int64_t;

struct StreamToken {
  StreamId stream = 0;
  std::int64_t token = 0;
};

class LogitStepper {
 public:
  virtual ~LogitStepper() = default;
  virtual std::string name() const = 0;
  virtual std::optional<StreamId> open() = 0;
  // A new stream holding `source`'s first `upto` positions.
  virtual std::optional<StreamId> clone(StreamId source, std::int32_t upto) = 0;
  virtual void close(StreamId stream) = 0;
  // One batch: each token continues its stream at the stream's next position
  // (tokens of one stream in order). One logits row per token, in order.
  virtual Result<Rows> step(std::span<const StreamToken> tokens) = 0;
  virtual OffGraphKVMetrics kv_metrics() const = 0;
  // The executor's cache (a raw stream is its sequence id).
  virtual cache::CellCache& cache() = 0;
};

enum class StepperKind : std::uint8_t { kModule, kCuda, kRaw };
std::string stepper_kind_name(StepperKind kind);
inline void PrintTo(StepperKind kind, std::ostream* os) {
  *os << stepper_kind_name(kind);
}

// Builds the executor of `kind` over `program` (wrapped in a RecordingProgram)
// and initializes it.
Result<std::unique_ptr<LogitStepper>> make_stepper(StepperKind kind,
                                                   std::shared_ptr<program::Program> program,
                                                   int max_sessions, int max_session_tokens);

}  // namespace cellm::executor::testing
