#include "executor/speculation.h"

#include <algorithm>
#include <utility>

namespace cellm::executor {

Speculation::Speculation(SpeculationOptions options) : options_(std::move(options)) {
  options_.max_drafts = std::clamp<std::size_t>(options_.max_drafts, 1, 16);
}

std::size_t Speculation::drafts_for(SessionId sid) const {
  const auto it = k_.find(sid);
  return it == k_.end() ? options_.max_drafts : it->second;
}

void Speculation::record(SessionId sid, std::size_t proposed, std::size_t accepted) {
  rounds_.fetch_add(1, std::memory_order_relaxed);
  proposed_.fetch_add(proposed, std::memory_order_relaxed);
  accepted_.fetch_add(accepted, std::memory_order_relaxed);
  const std::size_t k = drafts_for(sid);
  // All kept: try one more next time. Otherwise ask for one more than were
  // kept, so a session whose guesses fail falls back to a single draft.
  const std::size_t next =
      accepted >= proposed ? std::min(k + 1, options_.max_drafts) : std::max<std::size_t>(accepted + 1, 1);
  if (next == options_.max_drafts) {
    k_.erase(sid);
  } else {
    k_[sid] = next;
  }
}

void Speculation::forget(SessionId sid) {
  k_.erase(sid);
  failed_.erase(sid);
  if (options_.proposer) options_.proposer->forget(sid);
}

SpeculationCounters Speculation::counters() const {
  return {rounds_.load(std::memory_order_relaxed), proposed_.load(std::memory_order_relaxed),
          accepted_.load(std::memory_order_relaxed)};
}

}  // namespace cellm::executor
