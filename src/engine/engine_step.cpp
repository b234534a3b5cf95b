// One engine step: take a batch, execute it, account for it, interpret the
// outputs (stop tokens, budgets, the pending token) and end generations.
#include <algorithm>
#include <limits>
#include <memory>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/engine_core.h"

namespace cellm::detail {
namespace {

constexpr std::int64_t kMaxPosition = std::numeric_limits<Position>::max();

// The one-token payload of a session's next decode. A decode slot's own
// payload is reused when nothing else holds it any more (the executor kept no
// copy): a decode step then allocates none. Every decode payload is made
// here, as a mutable vector, so writing through the shared const view writes
// that vector.
TokenInputPtr next_decode_payload(InputPayload& used, bool was_decode, Token token) {
  if (auto* p = std::get_if<TokenInputPtr>(&used);
      was_decode && p != nullptr && *p != nullptr && p->use_count() == 1 && (*p)->size() == 1) {
    std::const_pointer_cast<std::vector<Token>>(*p)->front() = token;
    return std::move(*p);
  }
  return std::make_shared<std::vector<Token>>(1, token);
}

}  // namespace

bool EngineCore::step_() {
  std::vector<Task> tasks = scheduler_->get_work();
  if (tasks.empty()) return false;
  ++step_count_;

  std::vector<Slot> slots;
  slots.reserve(tasks.size());
  for (const Task& t : tasks) {
    Slot s;
    s.sid = t.input.sid;
    s.is_decode = t.is_decode;
    s.produce_output = t.input.produce_output;
    s.size = t.input.size;
    s.end = static_cast<Position>(t.input.position + static_cast<std::int64_t>(t.input.offset) +
                                  static_cast<std::int64_t>(t.input.size));
    if (auto it = task_owner_.find(t.tid); it != task_owner_.end()) {
      s.generation = it->second;
      task_owner_.erase(it);
    }
    slots.push_back(s);
  }

  // Measure the step before executing it. A session's slices are adjacent
  // (Scheduler::get_work), so each run of one session's slots is that
  // session's share of the step: no map to build.
  std::size_t decode_tokens = 0, prefill_tokens = 0;
  const auto now = Clock::now();
  std::int64_t decode_sessions = 0, prefill_sessions = 0, context = 0;
  for (std::size_t i = 0; i < slots.size();) {
    const SessionId sid = slots[i].sid;
    bool decode = false, prefill = false;
    Position end = 0;
    for (; i < slots.size() && slots[i].sid == sid; ++i) {
      const Slot& s = slots[i];
      (s.is_decode ? decode : prefill) = true;
      end = std::max(end, s.end);
      (s.is_decode ? decode_tokens : prefill_tokens) += s.size;
    }
    decode_sessions += decode ? 1 : 0;
    prefill_sessions += prefill ? 1 : 0;
    context += end;
    auto it = sessions_.find(sid);
    if (it == sessions_.end() || !it->second.active) continue;
    Generation& gen = *it->second.active;
    if (!stamped(gen.metrics.t_first_step)) gen.metrics.t_first_step = now;
    if (gen.last_counted_step != step_count_) {
      gen.last_counted_step = step_count_;
      ++(decode ? gen.metrics.n_decode_steps : gen.metrics.n_prefill_steps);
    }
  }
  std::int64_t live = 0, ready = 0;
  for (const auto& [sid, rec] : sessions_) {
    if (!rec.active) continue;
    ++live;
    ready += rec.active->first_token ? 1 : 0;
  }
  ++em_.steps;
  em_.decode_sessions_total += decode_sessions;
  em_.prefill_sessions_total += prefill_sessions;
  em_.ready_total += ready;
  em_.peak_concurrent_generations = std::max(em_.peak_concurrent_generations, live);
  em_.context_sum += context;
  em_.context_max = std::max(em_.context_max, context);
  em_.steps_with_decode += decode_sessions > 0 ? 1 : 0;
  em_.steps_with_prefill += prefill_sessions > 0 ? 1 : 0;

  BatchInput batch = to_batch_input(tasks);
  BatchOutput out;
  const auto t0 = Clock::now();
  if (!stamped(em_.t_first_step)) em_.t_first_step = t0;
  bool ok = false;
  try {
    ok = executor_.execute(batch, out);
  } catch (const std::exception& e) {
    CELLM_LOG_ERROR("runner: execute threw: {}", e.what());
  } catch (...) {
    CELLM_LOG_ERROR("runner: execute threw a non-standard exception");
  }
  const auto t1 = Clock::now();
  const std::int64_t latency = us_between(t0, t1);
  em_.t_last_step = t1;
  em_.step_latency_sum_us += latency;
  em_.step_latency_max_us = std::max(em_.step_latency_max_us, latency);
  em_.decode_session_time_sum_us += latency * decode_sessions;
  if (decode_sessions > 0 && prefill_sessions > 0) {
    em_.mixed_latency_sum_us += latency;
  } else if (decode_sessions > 0) {
    em_.decode_only_latency_sum_us += latency;
  } else {
    em_.prefill_only_latency_sum_us += latency;
  }

  if (!ok) {
    fail_batch_(slots, "executor failed to execute the batch");
    return true;
  }
  if (out.outputs.size() != slots.size()) {
    fail_batch_(slots, "executor returned an incomplete batch output");
    return true;
  }
  em_.decode_tokens_total += static_cast<std::int64_t>(decode_tokens);
  em_.prefill_tokens_total += static_cast<std::int64_t>(prefill_tokens);
  if (prefill_sessions == 0) em_.decode_only_tokens += static_cast<std::int64_t>(decode_tokens);
  for (const Slot& s : slots) {
    if (s.is_decode) continue;
    auto it = sessions_.find(s.sid);
    if (it == sessions_.end() || !it->second.active) continue;
    Generation& gen = *it->second.active;
    if (gen.id == s.generation && !gen.first_token) {
      gen.metrics.n_prefilled_tokens += static_cast<std::int64_t>(s.size);
    }
  }

  // A stop that landed during execute() discards the results before they
  // touch any session.
  if (stop_requested_.load()) return true;

  // Every consumed slice moves its session before any callback sees it.
  for (const Slot& s : slots) {
    auto it = sessions_.find(s.sid);
    if (it == sessions_.end()) continue;
    it->second.position = s.end;
    it->second.pending.reset();
    it->second.state->position.store(s.end);
  }
  // The generation of a slot that produced output and goes on (not ended by
  // its output, its callback or anything else): it has a pending token to
  // decode next.
  const auto continued = [this](const Slot& slot) -> Generation* {
    if (!slot.produce_output) return nullptr;
    auto it = sessions_.find(slot.sid);
    if (it == sessions_.end()) return nullptr;
    const SessionRecord& rec = it->second;
    if (!rec.active || rec.active->id != slot.generation || !rec.pending) return nullptr;
    return rec.active.get();
  };
  // Each output is handled in order; the decodes that continue the step's
  // generations are queued together once all are (one scheduler call a step).
  std::vector<Task> next;
  std::vector<TaskId> made;
  next.reserve(slots.size());
  made.reserve(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    handle_output_(slots[i], out.outputs[i]);
    Generation* gen = continued(slots[i]);
    if (gen == nullptr) continue;
    const SessionRecord& rec = sessions_.find(slots[i].sid)->second;
    Input in;
    in.sid = slots[i].sid;
    in.produce_output = true;
    in.size = 1;
    in.payload = next_decode_payload(batch.inputs[i].payload, slots[i].is_decode, *rec.pending);
    in.position = rec.position;
    next.push_back(make_task_(*gen, std::move(in), true));
    made.push_back(next.back().tid);
  }
  if (next.empty()) return true;
  bool queued = false;
  try {
    queued = scheduler_->submit(std::move(next));
  } catch (...) {
    queued = false;
  }
  if (queued) return true;
  // Refused as a whole: each generation tries alone, so only those the
  // scheduler refuses fail.
  for (TaskId tid : made) task_owner_.erase(tid);
  for (const Slot& slot : slots) {
    Generation* gen = continued(slot);
    if (gen == nullptr) continue;
    const SessionRecord& rec = sessions_.find(slot.sid)->second;
    Input in;
    in.sid = slot.sid;
    in.produce_output = true;
    in.size = 1;
    in.payload = std::make_shared<std::vector<Token>>(1, *rec.pending);
    in.position = rec.position;
    std::vector<Task> one;
    one.push_back(make_task_(*gen, std::move(in), true));
    if (!submit_tasks_(*gen, std::move(one))) {
      const std::shared_ptr<Generation> owner = rec.active;  // finish_ resets rec.active
      finish_(owner, FinishReason::kFailed, {}, "scheduler rejected generation tasks");
    }
  }
  return true;
}

void EngineCore::fail_batch_(const std::vector<Slot>& slots, const std::string& message) {
  ++em_.steps_failed;
  std::vector<std::shared_ptr<Generation>> failed;
  for (const Slot& s : slots) {
    auto it = sessions_.find(s.sid);
    if (it == sessions_.end()) continue;
    // The executor's state for this session is unknown now.
    it->second.poisoned = true;
    if (it->second.active &&
        std::find(failed.begin(), failed.end(), it->second.active) == failed.end()) {
      failed.push_back(it->second.active);
    }
  }
  for (const auto& gen : failed) finish_(gen, FinishReason::kFailed, {}, message);
}

void EngineCore::handle_output_(const Slot& slot, const std::optional<Output>& output) {
  auto it = sessions_.find(slot.sid);
  if (it == sessions_.end()) return;
  SessionRecord& rec = it->second;
  const std::shared_ptr<Generation> gen = rec.active;
  if (!gen || gen->id != slot.generation) return;
  if (stop_requested_.load() || gen->state->cancel_requested.load() || rec.state->closed.load()) {
    finish_(gen, FinishReason::kCancelled, {}, "");
    return;
  }
  auto invalid = [&] {
    rec.poisoned = true;
    finish_(gen, FinishReason::kFailed, {}, "executor returned an invalid output");
  };
  if (output.has_value() != slot.produce_output) return invalid();
  if (!output) return;
  const std::vector<Token>& produced = output->tokens;
  if (produced.empty() || output->sid != slot.sid ||
      static_cast<std::int64_t>(produced.size()) - 1 > kMaxPosition - slot.end) {
    return invalid();
  }
  // The mask this draw used was computed during the step (defer_refresh): if
  // it allowed nothing, the grammar ended at the previous token and this
  // draw is void, as if that step had found the dead end itself.
  if (gen->constrained) {
    if (const auto next = gen->constrained->settle();
        next != ConstrainedDecoding::Next::kContinue) {
      if (next == ConstrainedDecoding::Next::kComplete) {
        finish_(gen, FinishReason::kStopToken, {}, "");
      } else {
        finish_(gen, FinishReason::kFailed, {},
                "constrained decoding reached a dead end: the grammar allows no next token");
      }
      return;
    }
  }

  std::vector<Token> emitted;
  std::optional<FinishReason> reason;
  std::optional<StopStringMatch> stop_match;
  const auto& stops = gen->config.stop_tokens;
  for (Token t : produced) {
    emitted.push_back(t);
    --gen->budget_left;
    // The first min_new_tokens tokens never stop the generation.
    const std::int64_t delivered = gen->config.max_new_tokens - gen->budget_left;
    if (delivered > gen->config.min_new_tokens &&
        std::find(stops.begin(), stops.end(), t) != stops.end()) {
      reason = FinishReason::kStopToken;
      break;
    }
    if (gen->stop_strings) {
      StopMatcher& m = *gen->stop_strings;
      const std::vector<std::string>& table = *options_.token_bytes;
      const std::string_view bytes = static_cast<std::size_t>(t) < table.size()
                                         ? std::string_view(table[t])
                                         : std::string_view();
      // As with stop tokens: the first min_new_tokens tokens' text cannot
      // end a match (one may begin there and end later).
      if (delivered <= gen->config.min_new_tokens) {
        m.ignore_matches_ending_by(m.bytes_pushed() + bytes.size());
      }
      if (m.push(bytes).stopped) {
        reason = FinishReason::kStopString;
        stop_match = StopStringMatch{m.stop_index(), static_cast<std::int64_t>(m.match_offset()),
                                     static_cast<std::int64_t>(m.bytes_pushed())};
        break;
      }
    }
    if (gen->constrained && !gen->constrained->advance(t)) {
      finish_(gen, FinishReason::kFailed, {},
              fmt::format("the executor drew token {}, which the grammar does not allow", t));
      return;
    }
    if (gen->budget_left <= 0) {
      reason = FinishReason::kNewTokenLimit;
      break;
    }
  }
  // All but the last delivered token are committed by the executor; the last
  // one is pending until fed back. A run cut short keeps no pending token and
  // the next input rewinds past the dropped suffix.
  const std::size_t committed = std::min(emitted.size(), produced.size() - 1);
  rec.position = static_cast<Position>(slot.end + static_cast<std::int64_t>(committed));
  rec.pending.reset();
  if (emitted.size() == produced.size()) rec.pending = emitted.back();
  rec.state->position.store(rec.position);

  // Every token of a step is stamped with the step's end (set by step_ just
  // after execute): one clock read a step, not one a session, and no skew
  // from the callbacks that ran before this one.
  const auto now = em_.t_last_step;
  GenerationMetrics& m = gen->metrics;
  const auto k = static_cast<std::int64_t>(emitted.size());
  if (!gen->first_token) {
    gen->first_token = true;
    m.t_first_token = now;
    if (k > 1) {
      m.itl_count += k - 1;
      m.itl_min_us = 0;
    }
  } else {
    const std::int64_t gap = us_between(gen->last_delivery, now);
    m.itl_count += k;
    m.itl_sum_us += gap;
    m.itl_min_us = std::min(m.itl_min_us, k > 1 ? std::int64_t{0} : gap);
    m.itl_max_us = std::max(m.itl_max_us, gap);
  }
  gen->last_delivery = now;
  m.n_generated_tokens += k;
  m.n_draft_tokens += output->drafted;
  m.n_accepted_draft_tokens += output->accepted;

  // The prompt's scores (SamplingParams::prompt_logprobs) go out in an
  // update of their own, ahead of the tokens they precede.
  if (!output->prompt_logprobs.empty() && gen->on_update) {
    GenerationUpdate head;
    head.prompt_logprobs = output->prompt_logprobs;
    try {
      gen->on_update(head);
    } catch (const std::exception& e) {
      finish_(gen, FinishReason::kFailed, {}, e.what(), /*notify=*/false);
      return;
    }
  }
  // The logprobs of the delivered tokens (none when the policy asks for none).
  std::vector<TokenLogprobs> logprobs;
  if (!output->logprobs.empty()) {
    const std::size_t n = std::min(emitted.size(), output->logprobs.size());
    logprobs.assign(output->logprobs.begin(),
                    output->logprobs.begin() + static_cast<std::ptrdiff_t>(n));
  }
  if (!reason && gen->constrained) {
    switch (gen->constrained->defer_refresh()) {
      case ConstrainedDecoding::Next::kContinue: break;
      case ConstrainedDecoding::Next::kComplete: reason = FinishReason::kStopToken; break;
      case ConstrainedDecoding::Next::kDeadEnd:
        finish_(gen, FinishReason::kFailed, std::move(emitted),
                "constrained decoding reached a dead end: the grammar allows no next token", true,
                std::move(logprobs));
        return;
    }
  }
  if (reason) {
    finish_(gen, *reason, std::move(emitted), "", true, std::move(logprobs), stop_match);
    return;
  }
  try {
    if (gen->on_update) {
      gen->on_update(GenerationUpdate{std::move(emitted), std::nullopt, "", std::move(logprobs)});
    }
  } catch (const std::exception& e) {
    // The callback already saw this step; it is not called a second time.
    finish_(gen, FinishReason::kFailed, {}, e.what(), /*notify=*/false);
    return;
  } catch (...) {
    finish_(gen, FinishReason::kFailed, {}, "generation callback threw a non-standard exception",
            /*notify=*/false);
    return;
  }
  if (rec.active != gen) return;
  if (gen->suppressing_stops &&
      gen->config.max_new_tokens - gen->budget_left >= gen->config.min_new_tokens) {
    // min_new_tokens are out: the next draw may stop. A seeded run switches
    // to a seed derived from its own (re-installing would restart the coin
    // sequence it already used), so it stays reproducible.
    gen->suppressing_stops = false;
    std::optional<std::uint64_t> seed = gen->config.seed;
    if (seed) seed = *seed ^ 0x9e3779b97f4a7c15ULL;
    try {
      executor_.set_sampling(gen->sid, gen->config.sampling, seed);
    } catch (...) {
      finish_(gen, FinishReason::kFailed, {}, "executor failed to install the sampling policy");
      return;
    }
  }
  // The generation goes on: step_ queues its next decode (continued_).
}

void EngineCore::finish_(const std::shared_ptr<Generation>& gen, FinishReason reason,
                         std::vector<Token> tokens, std::string error, bool notify,
                         std::vector<TokenLogprobs> logprobs,
                         std::optional<StopStringMatch> stop_match) {
  CELLM_CHECK(gen != nullptr);
  if (auto it = sessions_.find(gen->sid); it != sessions_.end() && it->second.active == gen) {
    it->second.active.reset();
    for (const Task& t : scheduler_->cancel(gen->sid)) task_owner_.erase(t.tid);
  }
  gen->metrics.t_end = Clock::now();
  if (notify)
    deliver_terminal(gen->on_update, std::move(tokens), reason, error, std::move(logprobs),
                     stop_match);
  count_completion_(*gen, reason);
  gen->state->publish(reason, std::move(error), gen->metrics);
  run_settled(gen->on_settled);
  // Release the captures now rather than whenever the last reference goes.
  GenerationCallback update = std::move(gen->on_update);
  SettledCallback settled = std::move(gen->on_settled);
  gen->on_update = nullptr;
  gen->on_settled = nullptr;
}

void EngineCore::count_completion_(const Generation& gen, FinishReason reason) {
  ++em_.generations_completed;
  switch (reason) {
    case FinishReason::kStopToken: ++em_.finished_stop_token; break;
    case FinishReason::kStopString: ++em_.finished_stop_string; break;
    case FinishReason::kNewTokenLimit: ++em_.finished_token_limit; break;
    case FinishReason::kCancelled: ++em_.finished_cancelled; break;
    case FinishReason::kFailed: ++em_.finished_failed; break;
  }
  const GenerationMetrics& m = gen.metrics;
  em_.total_generated_tokens += m.n_generated_tokens;
  if (gen.first_token) {
    const std::int64_t ttft = m.ttft_us();
    ++em_.ttft_count;
    em_.ttft_sum_us += ttft;
    em_.ttft_min_us = std::min(em_.ttft_min_us, ttft);
    em_.ttft_max_us = std::max(em_.ttft_max_us, ttft);
  }
}

}  // namespace cellm::detail
