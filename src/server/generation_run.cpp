#include "server/generation_run.h"

#include <algorithm>
#include <utility>

#include "core/utf8.h"

namespace cellm::server {
namespace {

constexpr std::chrono::milliseconds kPollInterval(50);

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

const char* finish_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopToken: return "stop";
    case FinishReason::kStopString: return "stop";
    case FinishReason::kNewTokenLimit: return "length";
    case FinishReason::kCancelled: return "abort";
    case FinishReason::kFailed: return "abort";
  }
  return "abort";
}

}  // namespace

void EventChannel::push(ChoiceEvent event) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(event));
  }
  cv_.notify_one();
}

void EventChannel::wait(std::vector<ChoiceEvent>* out, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return !events_.empty() || woken_; });
  woken_ = false;
  for (ChoiceEvent& e : events_) out->push_back(std::move(e));
  events_.clear();
}

void EventChannel::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_one();
}

Result<std::shared_ptr<GenerationRun>> GenerationRun::create(RunSetup setup,
                                                             const GenerationService& service,
                                                             ServerMetrics& metrics) {
  std::shared_ptr<GenerationRun> run(new GenerationRun(std::move(setup), service, metrics));
  run->choices_.resize(static_cast<std::size_t>(run->setup_.n));
  for (ChoiceState& c : run->choices_) {
    c.text.emplace(service.text_stream(), run->setup_.stop);
    if (run->setup_.tool_format != ToolFormat::kNone) c.tools.emplace(run->setup_.tool_format);
  }
  return run;
}

GenerationRun::GenerationRun(RunSetup setup, const GenerationService& service,
                             ServerMetrics& metrics)
    : setup_(std::move(setup)), service_(service), metrics_(metrics) {}

void GenerationRun::describe_logprobs(ChoiceState& c, std::span<const TokenLogprobs> entries,
                                      std::vector<TokenLogprobsText>* out) {
  const auto shown = [this](Token id, float logprob) {
    TokenText t;
    t.bytes = service_.token_bytes(id);
    t.token = utf8::repair(t.bytes);
    t.logprob = logprob;
    return t;
  };
  for (const TokenLogprobs& e : entries) {
    TokenText chosen = shown(e.token, e.logprob);
    TokenLogprobsText t;
    t.token = std::move(chosen.token);
    t.bytes = std::move(chosen.bytes);
    t.logprob = e.logprob;
    t.text_offset = c.text_offset;
    for (const TokenLogprob& alt : e.top) t.top.push_back(shown(alt.token, alt.logprob));
    // Code points: every byte that does not continue a UTF-8 sequence.
    for (char ch : t.token) {
      if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++c.text_offset;
    }
    out->push_back(std::move(t));
  }
}

void GenerationRun::echo_prompt(ChoiceState& c, Delta& d) {
  c.echoed = true;
  d.text = setup_.echo_text;
  if (setup_.logprobs >= 0 && !setup_.echo_tokens.empty()) {
    // The first token: nothing before it to predict it.
    TokenLogprobsText first;
    first.bytes = service_.token_bytes(setup_.echo_tokens.front());
    first.token = utf8::repair(first.bytes);
    first.scored = false;
    first.text_offset = 0;
    for (char ch : first.token) {
      if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++c.text_offset;
    }
    d.logprobs.push_back(std::move(first));
    describe_logprobs(c, prompt_scores_, &d.logprobs);
  }
  // The generated text starts after the echoed one.
  c.text_offset = 0;
  for (char ch : setup_.echo_text) {
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++c.text_offset;
  }
}

GenerationRun::~GenerationRun() {
  finish();
}

EventSink GenerationRun::sink() const {
  // The channel, not the run, is captured: the job holding this sink is owned
  // by the run, so capturing the run would make a cycle.
  std::shared_ptr<EventChannel> channel = channel_;
  return [channel](ChoiceEvent event) { channel->push(std::move(event)); };
}

void GenerationRun::attach(std::unique_ptr<GenerationJob> job, AdmissionQueue::Ticket ticket) {
  job_ = std::move(job);
  ticket_ = std::move(ticket);
}

void GenerationRun::note_cached_tokens() {
  if (cached_read_ || !job_) return;
  // The engine sets it when it admits the request, before the first event.
  cached_read_ = true;
  cached_tokens_ = job_->cached_tokens();
  if (setup_.record_prefix_lookup) metrics_.record_prefix_lookup(cached_tokens_);
}

void GenerationRun::abort() {
  aborted_.store(true);
  channel_->wake();
}

bool GenerationRun::all_finished() const {
  for (const ChoiceState& c : choices_) {
    if (!c.finish_reason) return false;
  }
  return true;
}

void GenerationRun::cancel_unfinished(const char* reason) {
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    if (choices_[i].finish_reason) continue;
    choices_[i].finish_reason = reason;
    if (job_) job_->cancel_choice(static_cast<std::int32_t>(i));
  }
}

void GenerationRun::apply(ChoiceEvent& event, std::vector<Delta>* deltas) {
  if (event.choice < 0 || event.choice >= setup_.n) return;
  note_cached_tokens();
  ChoiceState& c = choices_[static_cast<std::size_t>(event.choice)];
  if (!event.prompt_logprobs.empty()) prompt_scores_ = std::move(event.prompt_logprobs);
  if (c.finish_reason) return;  // late output of a choice we already ended
  // echo with max_tokens 0: the drawn token is not shown or counted.
  if (setup_.prompt_only) {
    event.tokens.clear();
    event.logprobs.clear();
    if (event.finish && *event.finish != FinishReason::kFailed) {
      event.finish = FinishReason::kNewTokenLimit;
    }
  }
  if (!event.tokens.empty()) {
    if (!first_token_at_) {
      first_token_at_ = event.at;
      metrics_.observe_ttft(seconds(event.at - setup_.arrival));
    }
    // A burst of k tokens: the gap since the last delivery, then k-1 zeros.
    std::size_t zeros = event.tokens.size() - 1;
    if (c.last_token_at) {
      metrics_.observe_itl(seconds(event.at - *c.last_token_at));
    }
    for (std::size_t i = 0; i < zeros; ++i) metrics_.observe_itl(0.0);
    c.last_token_at = event.at;
  }
  Delta d;
  d.choice = event.choice;
  // Choice 0's first event is its prompt scores when it has any, so every
  // choice's echo (its first event) comes after them.
  if (setup_.echo && !c.echoed) echo_prompt(c, d);
  if (setup_.logprobs >= 0) {
    // Every delivered token reaches the client (the engine ends a choice on
    // the token that completes a stop string); each carries its entry.
    describe_logprobs(c, event.logprobs, &d.logprobs);
  }
  if (!event.finish) {
    d.text += c.text->push(event.tokens);
  } else {
    // A stop string's match (the engine's) is cut away here.
    d.text += c.text->finish(event.tokens, event.stop_string);
    d.finish_reason = finish_name(*event.finish);
    if (*event.finish == FinishReason::kFailed && failure_.empty()) {
      failure_ = event.error.empty() ? std::string("the generation failed") : event.error;
    }
  }
  if (c.tools) {
    ToolParse parsed = c.tools->push(d.text);
    if (d.finish_reason) {
      ToolParse rest = c.tools->finish();
      for (ToolEvent& e : rest.events) parsed.events.push_back(std::move(e));
      // OpenAI's reason when the model ended its turn to have tools run; a
      // call left unfinished or malformed keeps the run's own reason.
      if (*d.finish_reason == "stop" && c.tools->all_calls_complete()) {
        d.finish_reason = "tool_calls";
      }
    }
    d.text.clear();
    d.tool_events = std::move(parsed.events);
  }
  if (d.finish_reason) c.finish_reason = d.finish_reason;
  if (!d.text.empty() || d.finish_reason || !d.tool_events.empty() || !d.logprobs.empty()) {
    deltas->push_back(std::move(d));
  }
}

bool GenerationRun::next(std::vector<Delta>* deltas, const std::function<bool()>& client_gone) {
  if (aborted_.load()) {
    for (std::size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i].finish_reason) continue;
      deltas->push_back({static_cast<std::int32_t>(i), {}, "abort", {}, {}});
      abort_applied_ = true;
    }
    cancel_unfinished("abort");
    return true;
  }
  if (client_gone && client_gone()) {
    client_gone_ = true;
    cancel_unfinished("abort");
    return false;
  }
  std::vector<ChoiceEvent> events;
  channel_->wait(&events, kPollInterval);
  for (ChoiceEvent& e : events) apply(e, deltas);
  return true;
}

Usage GenerationRun::usage() const {
  Usage u;
  u.prompt_tokens = setup_.prompt_tokens;
  u.cached_tokens = cached_tokens_;
  for (const ChoiceState& c : choices_) u.completion_tokens += c.text->tokens();
  return u;
}

void GenerationRun::stream(const Writer& write, const std::function<bool()>& client_gone) {
  bool writable = true;
  auto send = [&](const nlohmann::json& payload) {
    if (writable && !write(sse_event(payload))) writable = false;
  };
  auto chunk = [&](const Choice& choice, bool first) {
    nlohmann::json body = chunk_json(setup_.kind, setup_.ids, choice, first);
    if (setup_.include_usage) body["usage"] = nullptr;
    send(body);
  };
  if (setup_.kind == RequestKind::kChat) {
    for (std::int32_t i = 0; i < setup_.n; ++i) chunk(Choice{i, {}, std::nullopt, {}}, true);
  }
  std::vector<Delta> deltas;
  // A chunk's logprobs: null unless the request asked for them.
  const auto logprobs_of = [this](Delta& d) -> std::optional<std::vector<TokenLogprobsText>> {
    if (setup_.logprobs < 0 || d.logprobs.empty()) return std::nullopt;
    return std::move(d.logprobs);
  };
  while (writable && !all_finished()) {
    deltas.clear();
    if (!next(&deltas, client_gone)) break;
    for (Delta& d : deltas) {
      const bool calls = std::any_of(d.tool_events.begin(), d.tool_events.end(),
                                     [](auto& e) { return e.kind != ToolEvent::Kind::kContent; });
      if (!calls) {
        for (ToolEvent& e : d.tool_events) d.text += e.text;
        chunk(Choice{d.choice, std::move(d.text), d.finish_reason, {}, logprobs_of(d)}, false);
        continue;
      }
      // In the parser's order: content, each call's header, then its
      // argument pieces as they were written; the finish reason on a chunk
      // of its own, as OpenAI streams them. The logprobs ride on the first
      // content chunk, or on one of their own before a call.
      std::optional<std::vector<TokenLogprobsText>> logprobs = logprobs_of(d);
      if (logprobs && d.tool_events.front().kind != ToolEvent::Kind::kContent) {
        chunk(Choice{d.choice, {}, std::nullopt, {}, std::exchange(logprobs, std::nullopt)}, false);
      }
      for (ToolEvent& e : d.tool_events) {
        if (e.kind == ToolEvent::Kind::kContent) {
          chunk(Choice{d.choice,
                       std::move(e.text),
                       std::nullopt,
                       {},
                       std::exchange(logprobs, std::nullopt)},
                false);
          continue;
        }
        nlohmann::json body = tool_event_chunk_json(setup_.ids, d.choice, e);
        if (setup_.include_usage) body["usage"] = nullptr;
        send(body);
      }
      if (d.finish_reason) chunk(Choice{d.choice, {}, d.finish_reason, {}}, false);
    }
  }
  if (!writable) {
    client_gone_ = true;
    cancel_unfinished("abort");
  }
  if (writable && !client_gone_) {
    if (!failure_.empty()) send(error_json(internal_error("{}", failure_)));
    if (setup_.include_usage) send(usage_chunk_json(setup_.kind, setup_.ids, usage()));
    if (writable) write(kSseDone);
  }
  finish();
}

std::pair<int, nlohmann::json> GenerationRun::collect(const std::function<bool()>& client_gone) {
  std::vector<Choice> result(static_cast<std::size_t>(setup_.n));
  for (std::int32_t i = 0; i < setup_.n; ++i) result[static_cast<std::size_t>(i)].index = i;
  std::vector<Delta> deltas;
  while (!all_finished()) {
    deltas.clear();
    if (!next(&deltas, client_gone)) break;
    for (Delta& d : deltas) {
      Choice& c = result[static_cast<std::size_t>(d.choice)];
      c.text += d.text;
      // Tool calls as the stream shows them (an unfinished call keeps what it got).
      add_tool_events(&c, &d.tool_events);
      if (setup_.logprobs >= 0) {
        if (!c.logprobs) c.logprobs.emplace();
        for (TokenLogprobsText& t : d.logprobs) c.logprobs->push_back(std::move(t));
      }
      if (d.finish_reason) c.finish_reason = d.finish_reason;
    }
  }
  for (std::size_t i = 0; i < result.size(); ++i) {
    if (!result[i].finish_reason) result[i].finish_reason = choices_[i].finish_reason;
    // Asked for: an empty list rather than null, even for a choice with no token.
    if (setup_.logprobs >= 0 && !result[i].logprobs) result[i].logprobs.emplace();
  }
  std::pair<int, nlohmann::json> answer;
  if (client_gone_) {
    const Status s = cancelled("the client closed the connection");
    answer = {http_status(s.code()), error_json(s)};
  } else if (!failure_.empty()) {
    const Status s = internal_error("generation failed: {}", failure_);
    answer = {http_status(s.code()), error_json(s)};
  } else {
    answer = {200, response_json(setup_.kind, setup_.ids, result, usage())};
  }
  finish();
  return answer;
}

int GenerationRun::stop_string_index(std::int32_t choice) const {
  if (choice < 0 || choice >= setup_.n) return -1;
  const ChoiceState& c = choices_[static_cast<std::size_t>(choice)];
  return c.text ? c.text->stop_index() : -1;
}

void GenerationRun::finish() {
  if (finished_) return;
  finished_ = true;
  const bool started = job_ != nullptr;
  if (job_) {
    cancel_unfinished("abort");
    // The ticket goes when the engine has closed the request's sessions, so
    // the next request admitted finds them free; nothing here waits for it.
    auto ticket = std::make_shared<AdmissionQueue::Ticket>(std::move(ticket_));
    job_->after_release([ticket] { ticket->release(); });
    job_.reset();
  }
  ticket_.release();
  if (!started) return;
  const Endpoint endpoint =
      setup_.kind == RequestKind::kChat ? Endpoint::kChat : Endpoint::kCompletions;
  Outcome outcome = Outcome::kOk;
  if (client_gone_ || abort_applied_) {
    outcome = Outcome::kCancelled;
  } else if (!failure_.empty()) {
    outcome = Outcome::kFailed;
  }
  metrics_.record_request(endpoint, outcome);
  metrics_.observe_e2e(seconds(std::chrono::steady_clock::now() - setup_.arrival));
  metrics_.add_tokens(setup_.prompt_tokens, usage().completion_tokens);
}

}  // namespace cellm::server
