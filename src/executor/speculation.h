// Speculation: the executor's bookkeeping for speculative decoding.
//
// For a decoding session the executor feeds its real token followed by k
// proposed ones (DraftProposer) in the same forward and samples the k + 1
// rows in order with the session's own policy and generator, keeping draws
// while each equals the proposal it checks. Because a proposal is a single
// token (not a distribution), drawing from the target's row and keeping the
// draw when it matches is exactly rejection sampling: the output has the
// target's distribution, and with a seed it is the same token sequence plain
// decoding draws, coin for coin (rejected rows give their coins back).
// Rejected positions are rewound in the cell cache in the same step.
//
// Speculation is for small batches, where a step is bound by reading the
// weights and k extra rows cost almost nothing; it is skipped for a step
// with more than `max_batch` outputs, for sessions whose policy adjusts
// logits, masks tokens or suppresses ids (their per-row state would have to
// advance inside the step), and for steps the extra rows would split into
// several forwards. k adapts per session: it grows after a fully accepted
// round and shrinks to what the last round accepted otherwise.
//
// Thread-safety: owned by one executor, on the engine thread; counters()
// may be read from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cellm/types.h"
#include "executor/draft_proposer.h"

namespace cellm::executor {

struct SpeculationOptions {
  std::shared_ptr<DraftProposer> proposer;  // null: no speculation
  std::size_t max_drafts = 4;               // k's upper bound, 1..16
  std::size_t max_batch = 4;                // steps with more outputs run plain
};

// Totals since creation (proposed and accepted tokens, verification rounds).
struct SpeculationCounters {
  std::uint64_t rounds = 0;
  std::uint64_t proposed = 0;
  std::uint64_t accepted = 0;
};

// A session's drafted input of one step.
struct DraftedInput {
  std::size_t input = 0;        // index in the batch
  SessionId sid = 0;
  std::int64_t position = 0;    // of the real token
  std::int64_t token_row = 0;   // the real token's index in the packed step
  std::int64_t first_draft_row = 0;  // the first draft's index there; the rest follow
  std::vector<Token> drafts;    // fed at position + 1, + 2, ...
};

class Speculation {
 public:
  explicit Speculation(SpeculationOptions options);

  const SpeculationOptions& options() const { return options_; }
  // How many drafts to ask for this session's next round.
  std::size_t drafts_for(SessionId sid) const;
  // A round ended: `proposed` drafts fed, `accepted` of them kept.
  void record(SessionId sid, std::size_t proposed, std::size_t accepted);
  void forget(SessionId sid);
  // True the first time a session's proposer fails, so it is logged once.
  bool first_failure(SessionId sid) { return failed_.insert(sid).second; }
  SpeculationCounters counters() const;

 private:
  SpeculationOptions options_;
  std::unordered_map<SessionId, std::size_t> k_;  // sessions with a non-default k
  std::unordered_set<SessionId> failed_;          // sessions whose proposer failed
  std::atomic<std::uint64_t> rounds_{0};
  std::atomic<std::uint64_t> proposed_{0};
  std::atomic<std::uint64_t> accepted_{0};
};

}  // namespace cellm::executor
