// How many tokens one engine step takes: the prefill chunk, the step's token
// budget and the widest forward the program must hold. `cellm serve` (through
// app::Engine) and `cellm bench serve` (its in-process Runner and its
// in-process server) all size their DecodeFirstScheduler here, so that the
// benchmark runs the steps a user's server runs.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

#include "cellm/decode_first_scheduler.h"
#include "cellm/status.h"

namespace cellm::app {

// Prompt tokens a session prefills per step when none are asked for. Small
// chunks keep the steps that carry prefill close to decode-only ones (the
// inter-token latency of the running sessions); larger ones trade that for
// fewer, wider steps.
inline constexpr std::int64_t kDefaultPrefillChunk = 256;

struct StepBudget {
  std::size_t decodes = 0;  // sessions that decode in one step
  std::size_t chunk = 0;    // prompt tokens of one session per step
  std::size_t batch = 0;    // tokens of one step
};

// prefill_chunk 0 takes kDefaultPrefillChunk, capped at `widest` (the
// executor's widest forward); max_batch_tokens 0 takes the decodes plus two
// chunks. Negative values, and an explicit max_batch_tokens that leaves no
// room for a chunk beside the decodes, are errors that name the least value.
Result<StepBudget> step_budget(std::int64_t prefill_chunk, std::int64_t max_batch_tokens,
                               std::int64_t decodes,
                               std::int64_t widest = std::numeric_limits<std::int64_t>::max());

// The scheduler of a budget (never null for a budget step_budget returned).
std::unique_ptr<DecodeFirstScheduler> make_scheduler(const StepBudget& budget);

}  // namespace cellm::app
