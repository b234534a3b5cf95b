#include "app/step_budget.h"

#include <algorithm>

namespace cellm::app {

Result<StepBudget> step_budget(std::int64_t prefill_chunk, std::int64_t max_batch_tokens,
                               std::int64_t decodes, std::int64_t widest) {
  if (prefill_chunk < 0) {
    return invalid_argument("the prefill chunk must be 0 (the default, {}) or a number of tokens, "
                            "got {}",
                            kDefaultPrefillChunk, prefill_chunk);
  }
  if (max_batch_tokens < 0) {
    return invalid_argument(
        "the tokens per step must be 0 (the decodes plus two prefill chunks) or positive, got {}",
        max_batch_tokens);
  }
  if (decodes <= 0 || widest <= 0) {
    return invalid_argument("a step needs room for a decode ({} sessions, widest forward {})",
                            decodes, widest);
  }
  const std::int64_t chunk =
      std::min(prefill_chunk > 0 ? prefill_chunk : kDefaultPrefillChunk, widest);
  const std::int64_t batch = max_batch_tokens > 0 ? max_batch_tokens : decodes + 2 * chunk;
  if (batch < decodes + chunk) {
    return invalid_argument(
        "{} tokens per step leave no room for a prefill chunk of {} beside {} decodes: give at "
        "least {} (or 0 to derive it)",
        batch, chunk, decodes, decodes + chunk);
  }
  StepBudget b;
  b.decodes = static_cast<std::size_t>(decodes);
  b.chunk = static_cast<std::size_t>(chunk);
  b.batch = static_cast<std::size_t>(batch);
  return b;
}

std::unique_ptr<DecodeFirstScheduler> make_scheduler(const StepBudget& budget) {
  return DecodeFirstScheduler::create(budget.batch, budget.decodes, budget.chunk);
}

}  // namespace cellm::app
