// Requests on the engine thread: admission in arrival order, the prefix
// snapshot cache, the single prefill of a prompt, fan-out of the other
// choices by clone, and the end of a request once every choice has ended.
// Everything here runs on the engine thread, so a request never makes a
// caller's thread wait and no thread polls.
#include <algorithm>
#include <limits>
#include <utility>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/engine_core.h"

namespace cellm::detail {
namespace {

std::size_t common_prefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  std::size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

GenConfig config_for(const Request& request, std::int32_t choice) {
  GenConfig c = request.config;
  if (c.seed) c.seed = *c.seed + static_cast<std::uint64_t>(choice);
  return c;
}

}  // namespace

RequestControl::RequestControl(std::int32_t choices)
    : n(choices), cancel_choice(new std::atomic<bool>[static_cast<std::size_t>(choices)]) {
  for (std::int32_t i = 0; i < n; ++i) cancel_choice[static_cast<std::size_t>(i)].store(false);
}

void RequestControl::mark_done() {
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
}

void EngineCore::handle_(RequestCommand& c, bool running) {
  auto run = std::make_shared<RequestRun>();
  run->control = std::move(c.control);
  run->request = std::move(c.request);
  run->callbacks = std::move(c.callbacks);
  run->t_submit = c.t_submit;
  run->choices.resize(static_cast<std::size_t>(run->request.n));
  run->usage.prompt_tokens = static_cast<std::int64_t>(run->request.prompt.size());
  if (!running) {
    for (std::int32_t i = 0; i < run->request.n; ++i) {
      end_unstarted_(*run, i, FinishReason::kCancelled, "");
    }
    report_done_(*run);
    return;
  }
  waiting_requests_.push_back(std::move(run));
}

void EngineCore::admit_requests_() {
  while (!waiting_requests_.empty()) {
    RequestRun& run = *waiting_requests_.front();
    if (run.control->cancel_all.load() || run.control->cancelled(0)) {
      // Ended before it ran: nothing was taken.
      for (std::int32_t i = 0; i < run.request.n; ++i) {
        end_unstarted_(run, i, FinishReason::kCancelled, "");
      }
      report_done_(run);
      waiting_requests_.pop_front();
      continue;
    }
    std::size_t matched = 0;
    std::optional<SessionId> sid;
    if (run.request.use_prefix_cache) sid = cache_lookup_(run.request.prompt, &matched);
    if (!sid) {
      matched = 0;
      sid = open_session_();
      // Snapshots give way to requests: evict the oldest until one opens.
      while (!sid && cache_evict_one_()) sid = open_session_();
    }
    if (!sid) return;  // the oldest waits for a session; later ones wait behind it
    run.usage.cached_tokens = static_cast<std::int64_t>(matched);
    run.control->cached_tokens.store(run.usage.cached_tokens);
    std::shared_ptr<RequestRun> admitted = std::move(waiting_requests_.front());
    waiting_requests_.pop_front();
    active_requests_.push_back(admitted);
    const auto& prompt = admitted->request.prompt;
    start_choice_(*admitted, 0, *sid,
                  std::vector<Token>(prompt.begin() + static_cast<std::ptrdiff_t>(matched),
                                     prompt.end()));
  }
}

void EngineCore::start_choice_(RequestRun& run, std::int32_t choice, SessionId sid,
                               std::vector<Token> delta) {
  ChoiceRun& ch = run.choices[static_cast<std::size_t>(choice)];
  ch.sid = sid;
  ch.started = true;
  ch.state = std::make_shared<GenerationState>();
  // The generation may outlive nothing: the run is held by active_requests_
  // until every choice has ended, and the callback only runs before that.
  RequestRun* r = &run;
  auto on_update = [r, choice](const GenerationUpdate& u) {
    ChoiceRun& c = r->choices[static_cast<std::size_t>(choice)];
    r->usage.completion_tokens += static_cast<std::int64_t>(u.tokens.size());
    if (choice == 0 && (!u.tokens.empty() || u.finish_reason)) {
      // A first token means the prompt is committed; an end without one
      // means it never will be.
      if (!u.tokens.empty()) r->committed = true;
      if (!r->committed && u.finish_reason) {
        r->failure = u.error_message.empty() ? "the prompt's prefill did not complete"
                                             : u.error_message;
      }
    }
    if (u.finish_reason) {
      c.finished = true;
      c.reason = *u.finish_reason;
    }
    if (r->callbacks.on_update) r->callbacks.on_update(choice, u);
  };
  GenerationMetrics metrics;
  metrics.t_submit = run.t_submit;
  metrics.sid = sid;
  metrics.n_prompt_tokens = static_cast<std::int64_t>(delta.size());
  StartCommand start{ch.state,
                     sessions_.at(sid).state,
                     GenerationInput(std::move(delta)),
                     config_for(run.request, choice),
                     std::move(on_update),
                     {},
                     metrics};
  if (run.control->cancelled(choice)) ch.state->cancel_requested.store(true);
  handle_(start, true);
}

void EngineCore::end_unstarted_(RequestRun& run, std::int32_t choice, FinishReason reason,
                                const std::string& error) {
  ChoiceRun& ch = run.choices[static_cast<std::size_t>(choice)];
  if (ch.finished) return;
  ch.finished = true;
  FinishReason r = reason;
  std::string e = error;
  if (run.callbacks.on_update) {
    auto forward = [&](const GenerationUpdate& u) { run.callbacks.on_update(choice, u); };
    deliver_terminal(forward, {}, r, e);
  }
  ch.reason = r;
}

void EngineCore::report_done_(RequestRun& run) {
  RequestOutcome outcome;
  outcome.usage = run.usage;
  outcome.finish_reasons.reserve(run.choices.size());
  for (const ChoiceRun& ch : run.choices) outcome.finish_reasons.push_back(ch.reason);
  if (run.callbacks.on_done) {
    try {
      run.callbacks.on_done(outcome);
    } catch (...) {
      CELLM_LOG_WARN("runner: a request's on_done threw; ignored");
    }
  }
  run.control->mark_done();
}

void EngineCore::advance_requests_() {
  if (active_requests_.empty()) return;
  std::vector<std::shared_ptr<RequestRun>> still;
  still.reserve(active_requests_.size());
  for (auto& run : active_requests_) {
    if (advance_(*run)) {
      report_done_(*run);
    } else {
      still.push_back(std::move(run));
    }
  }
  active_requests_.swap(still);
}

// True once the request has ended and let go of every session.
bool EngineCore::advance_(RequestRun& run) {
  const std::int32_t n = run.request.n;
  const auto& prompt = run.request.prompt;
  ChoiceRun& root = run.choices[0];
  // Cancellation reaches started choices through their generation state.
  for (std::int32_t i = 0; i < n; ++i) {
    ChoiceRun& ch = run.choices[static_cast<std::size_t>(i)];
    if (ch.started && !ch.finished && run.control->cancelled(i)) {
      ch.state->cancel_requested.store(true);
    }
  }
  if (run.committed && !run.captured) {
    run.captured = true;
    // The prompt stays committed in the root session until it is closed,
    // whatever the root generates meanwhile: a clone takes [0, size).
    if (options_.prefix_cache_entries > 0 && run.request.use_prefix_cache && root.sid != 0 &&
        static_cast<std::int64_t>(prompt.size()) > run.usage.cached_tokens) {
      std::optional<SessionId> snap =
          clone_session_(root.sid, static_cast<Position>(prompt.size()));
      if (!snap && cache_evict_one_()) {
        snap = clone_session_(root.sid, static_cast<Position>(prompt.size()));
      }
      if (snap) cache_insert_(prompt, *snap);
    }
  }
  // Choices 1..n-1 start from a clone of the committed prompt (minus its last
  // token, which each feeds itself to sample its own first token).
  while (run.next_clone < n) {
    const std::int32_t i = run.next_clone;
    if (!run.committed) {
      if (!root.finished) break;  // the prefill is still running
      end_unstarted_(run, i, root.reason == FinishReason::kCancelled ? FinishReason::kCancelled
                                                                     : FinishReason::kFailed,
                     root.reason == FinishReason::kCancelled ? "" : run.failure);
      ++run.next_clone;
      continue;
    }
    if (run.control->cancelled(i)) {
      end_unstarted_(run, i, FinishReason::kCancelled, "");
      ++run.next_clone;
      continue;
    }
    std::optional<SessionId> child =
        clone_session_(root.sid, static_cast<Position>(prompt.size() - 1));
    while (!child && cache_evict_one_()) {
      child = clone_session_(root.sid, static_cast<Position>(prompt.size() - 1));
    }
    if (!child) break;  // retried after the next step frees a session
    start_choice_(run, i, *child, std::vector<Token>{prompt.back()});
    ++run.next_clone;
  }
  // Sessions of ended choices are closed at once (the root only once every
  // choice has its clone), so their cells return within this step.
  bool all_ended = true;
  for (std::int32_t i = 0; i < n; ++i) {
    ChoiceRun& ch = run.choices[static_cast<std::size_t>(i)];
    if (!ch.finished) {
      all_ended = false;
      continue;
    }
    if (ch.sid != 0 && (i != 0 || run.next_clone >= n)) {
      close_session_(ch.sid);
      ch.sid = 0;
    }
  }
  return all_ended && root.sid == 0;
}

void EngineCore::abandon_requests_() {
  // Sessions are gone (the stop path retired them, ending started choices).
  for (auto& run : active_requests_) {
    for (std::int32_t i = 0; i < run->request.n; ++i) {
      ChoiceRun& ch = run->choices[static_cast<std::size_t>(i)];
      ch.sid = 0;
      if (!ch.finished) end_unstarted_(*run, i, FinishReason::kCancelled, "");
    }
    report_done_(*run);
  }
  active_requests_.clear();
  for (auto& run : waiting_requests_) {
    for (std::int32_t i = 0; i < run->request.n; ++i) {
      end_unstarted_(*run, i, FinishReason::kCancelled, "");
    }
    report_done_(*run);
  }
  waiting_requests_.clear();
}

std::optional<SessionId> EngineCore::cache_lookup_(const std::vector<Token>& prompt,
                                                   std::size_t* matched) {
  if (prompt.size() < 2 || snapshots_.empty()) return std::nullopt;
  // Longest match first, then the most recent; the prompt's last token is
  // always left for a forward to predict from.
  auto best = snapshots_.end();
  std::size_t best_match = 0;
  for (auto it = snapshots_.begin(); it != snapshots_.end(); ++it) {
    const std::size_t m = std::min(common_prefix(it->tokens, prompt), prompt.size() - 1);
    if (m > best_match) {
      best_match = m;
      best = it;
    }
  }
  if (best == snapshots_.end()) return std::nullopt;
  std::optional<SessionId> child = clone_session_(best->sid, static_cast<Position>(best_match));
  if (!child) return std::nullopt;
  snapshots_.splice(snapshots_.begin(), snapshots_, best);
  *matched = best_match;
  return child;
}

void EngineCore::cache_insert_(std::vector<Token> tokens, SessionId sid) {
  for (auto it = snapshots_.begin(); it != snapshots_.end(); ++it) {
    if (it->tokens == tokens) {
      // The same prompt again: keep the older snapshot, refresh its rank.
      snapshots_.splice(snapshots_.begin(), snapshots_, it);
      close_session_(sid);
      return;
    }
  }
  snapshots_.push_front(Snapshot{std::move(tokens), sid});
  while (snapshots_.size() > static_cast<std::size_t>(options_.prefix_cache_entries)) {
    cache_evict_one_();
  }
  cache_size_.store(static_cast<std::int64_t>(snapshots_.size()));
}

bool EngineCore::cache_evict_one_() {
  if (snapshots_.empty()) return false;
  const SessionId sid = snapshots_.back().sid;
  snapshots_.pop_back();
  close_session_(sid);
  cache_size_.store(static_cast<std::int64_t>(snapshots_.size()));
  return true;
}

}  // namespace cellm::detail
