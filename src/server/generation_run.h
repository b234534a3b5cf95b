// GenerationRun: one admitted generation request from start to last byte.
// The engine thread queues ChoiceEvents into it; the request's HTTP thread
// turns them into text (ChoiceText per choice), writes SSE chunks or builds
// the final body (the engine ends choices on their stop strings), cancels everything
// when the client goes away or the server aborts it, and finally drops the
// job, handing it the admission ticket to release once the engine has freed
// the request's sessions, and records metrics.
//
// Thread-safety: sink() events and abort() may come from any thread; every
// other method belongs to the request's HTTP thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/admission.h"
#include "server/choice_text.h"
#include "server/generation_service.h"
#include "server/openai_response.h"
#include "server/server_metrics.h"
#include "server/tool_calls.h"

namespace cellm::server {

using SteadyTime = std::chrono::steady_clock::time_point;

// Engine thread → HTTP thread.
class EventChannel {
 public:
  void push(ChoiceEvent event);
  // Waits up to `timeout` for events (or wake()); appends them to *out.
  void wait(std::vector<ChoiceEvent>* out, std::chrono::milliseconds timeout);
  void wake();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ChoiceEvent> events_;
  bool woken_ = false;
};

struct RunSetup {
  RequestKind kind = RequestKind::kCompletion;
  ResponseIds ids;
  std::int32_t n = 1;
  bool include_usage = false;
  std::int64_t prompt_tokens = 0;
  std::vector<std::string> stop;  // the engine matches them; ChoiceText holds and cuts
  SteadyTime arrival;
  bool record_prefix_lookup = false;
  // Chat with tools: each choice's text goes through a ToolCallParser.
  ToolFormat tool_format = ToolFormat::kNone;
  // The request asked for logprobs (GenerationRequest::logprobs >= 0): every
  // token that reaches the client carries its entry (streamed with the
  // chunk that accounts for it, even while its text is held back).
  std::int32_t logprobs = -1;
  // Completions' echo: every choice's text starts with echo_text (outside
  // stop-string matching); with logprobs its entries start with the prompt's
  // tokens, the first unscored, the rest scored by the event that carries
  // ChoiceEvent::prompt_logprobs. prompt_only (max_tokens 0): generated
  // tokens are dropped and the finish reason is "length".
  bool echo = false;
  bool prompt_only = false;
  std::string echo_text;
  std::vector<Token> echo_tokens;
};

class GenerationRun {
 public:
  // Does not fail today; stop strings are vetted by the engine's check_request.
  static Result<std::shared_ptr<GenerationRun>> create(RunSetup setup,
                                                       const GenerationService& service,
                                                       ServerMetrics& metrics);
  ~GenerationRun();

  // The sink to hand to GenerationService::start.
  EventSink sink() const;
  // Takes ownership of the started job and the ticket that admitted it.
  void attach(std::unique_ptr<GenerationJob> job, AdmissionQueue::Ticket ticket);

  // Any thread: ends every choice with finish_reason "abort" (server stop).
  void abort();

  // Writes the SSE stream until every choice finished, the client went away
  // (`write` failed or `client_gone` answered true) or the run was aborted.
  using Writer = std::function<bool(std::string_view)>;
  void stream(const Writer& write, const std::function<bool()>& client_gone);
  // Waits for every choice; the HTTP status and body to answer.
  std::pair<int, nlohmann::json> collect(const std::function<bool()>& client_gone);

  // Which stop string ended `choice` (its position in RunSetup::stop), -1
  // when none did; lets /v1/messages name the stop_sequence. HTTP thread.
  int stop_string_index(std::int32_t choice) const;

  // Releases the job, then the ticket, and records metrics. Idempotent; runs
  // from the destructor too.
  void finish();

 private:
  struct ChoiceState {
    std::optional<ChoiceText> text;
    std::optional<ToolCallParser> tools;  // set when the run parses tool calls
    std::optional<std::string> finish_reason;
    std::optional<SteadyTime> last_token_at;
    bool role_sent = false;
    std::int64_t text_offset = 0;  // code points of the tokens shown so far
    bool echoed = false;           // RunSetup::echo: the prompt went out
  };
  // Text that one event produced for one choice.
  struct Delta {
    std::int32_t choice = 0;
    std::string text;
    std::optional<std::string> finish_reason;
    // Chat with tools: what the parser released, in order (content, call
    // starts, argument pieces); `text` is then unused.
    std::vector<ToolEvent> tool_events;
    std::vector<TokenLogprobsText> logprobs;  // of the tokens this event counted
  };

  GenerationRun(RunSetup setup, const GenerationService& service, ServerMetrics& metrics);
  // The shown form of `count` entries of an event's logprobs.
  void describe_logprobs(ChoiceState& c, std::span<const TokenLogprobs> entries,
                         std::vector<TokenLogprobsText>* out);
  // RunSetup::echo: the prompt's text and (with logprobs) entries, once per choice.
  void echo_prompt(ChoiceState& c, Delta& d);
  bool all_finished() const;
  void cancel_unfinished(const char* reason);
  // Waits for the next events and turns them into deltas; false when the
  // client went away or the run was aborted (the choices are then ended).
  bool next(std::vector<Delta>* deltas, const std::function<bool()>& client_gone);
  void apply(ChoiceEvent& event, std::vector<Delta>* deltas);
  Usage usage() const;
  // Reads the job's prefix-cache hit once it is known (the first event).
  void note_cached_tokens();

  RunSetup setup_;
  // Choice 0's prompt scores (RunSetup::echo with logprobs), shared by every choice.
  std::vector<TokenLogprobs> prompt_scores_;
  // Decodes the tokens logprobs name; outlives every run (it serves them).
  const GenerationService& service_;
  ServerMetrics& metrics_;
  std::shared_ptr<EventChannel> channel_ = std::make_shared<EventChannel>();
  std::unique_ptr<GenerationJob> job_;
  AdmissionQueue::Ticket ticket_;
  std::vector<ChoiceState> choices_;
  std::atomic<bool> aborted_{false};
  bool client_gone_ = false;
  bool abort_applied_ = false;  // abort() ended at least one choice
  std::string failure_;         // first kFailed message
  std::optional<SteadyTime> first_token_at_;
  std::int64_t cached_tokens_ = 0;
  bool cached_read_ = false;
  bool finished_ = false;
};

}  // namespace cellm::server
