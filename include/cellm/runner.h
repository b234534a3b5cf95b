// Runner: continuous batching over one Executor. A single engine thread owns
// the executor and the scheduler's consumer side; Sessions and
// GenerationHandles are the caller's view of its work.
//
// Thread-safety: Runner, Session and GenerationHandle methods may be called
// from any thread (a Session object itself must not be used by two threads at
// once). Callbacks of admitted generations run on the engine thread, in order,
// and must not block on runner work (no wait(), no future.get()).
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cellm/executor.h"
#include "cellm/metrics.h"
#include "cellm/scheduler.h"
#include "cellm/status.h"
#include "cellm/token_constraint.h"
#include "cellm/types.h"

namespace cellm {

namespace detail {
class EngineCore;
struct GenerationState;
struct SessionState;
}  // namespace detail

// kStopString: one of GenConfig::stop_strings appeared in the generated text
// (GenerationUpdate::stop_string says which and where).
enum class FinishReason { kStopToken, kNewTokenLimit, kCancelled, kFailed, kStopString };
std::string_view finish_reason_name(FinishReason reason);

// Where a stop string matched, in the generated text: the concatenation of
// the delivered tokens' bytes (RunnerOptions::token_bytes). The token that
// completed the match is delivered; the text from `offset` on is not part of
// the answer, so a text layer cuts there, inside a token if need be.
struct StopStringMatch {
  std::int32_t index = 0;       // into GenConfig::stop_strings
  std::int64_t offset = 0;      // byte where the match begins
  std::int64_t text_bytes = 0;  // the generated text's length, up to the last delivered token
};

// No finish_reason: more updates follow. With one: the last update (its token
// list may be empty after a failure or cancellation). error_message is set
// only for kFailed.
struct GenerationUpdate {
  std::vector<Token> tokens;
  std::optional<FinishReason> finish_reason;
  std::string error_message;
  // One entry per token of `tokens` when the generation's policy asks for
  // logprobs (SamplingParams::logprobs >= 0); empty otherwise.
  std::vector<TokenLogprobs> logprobs;
  // Set exactly on a kStopString terminal update.
  std::optional<StopStringMatch> stop_string;
  // SamplingParams::prompt_logprobs: the prompt's scored tokens (every one
  // but the first, whose predecessor is unknown), delivered once, in an
  // update of their own (no tokens, no finish_reason) just before the
  // generation's first token.
  std::vector<TokenLogprobs> prompt_logprobs;
};
using GenerationCallback = std::function<void(const GenerationUpdate&)>;
using SettledCallback = std::function<void()>;

// Raw tokens, or a prepared backing that only an accepting executor consumes.
using GenerationInput = std::variant<std::vector<Token>, PreparedInputPtr>;

struct GenConfig {
  std::int64_t max_new_tokens = 256;  // must be > 0
  SamplingParams sampling;
  std::vector<Token> stop_tokens;  // the matched token is delivered and kept
  // Until this many tokens are delivered the stop tokens are suppressed in
  // sampling and not honoured (OpenAI's min_tokens). 0 <= min <= max_new_tokens;
  // with min > 0 at most kMaxSuppressedTokens distinct stop tokens, and an
  // executor that can suppress them (Executor::can_suppress_tokens; the
  // engine refuses the generation otherwise).
  std::int64_t min_new_tokens = 0;
  std::optional<std::uint64_t> seed;  // nullopt: nondeterministic
  // The generation ends (kStopString) in the step whose token completes one
  // of these in the generated text, even across token boundaries or inside
  // one token; the earliest match wins (ties: the one listed first). As with
  // stop tokens, nothing within the first min_new_tokens tokens' text stops
  // it: a match must end past those bytes (it may begin within them). Needs
  // the runner's byte table (RunnerOptions::token_bytes). Each is 1 to
  // kMaxStopStringBytes bytes of valid UTF-8, at most kMaxStopStrings.
  std::vector<std::string> stop_strings;
  // Constrained decoding: every draw is limited to the tokens the grammar
  // allows next (stop tokens only where the text is a complete match); a
  // generation whose grammar is complete ends kStopToken without a stop
  // token, one that reaches a dead end ends kFailed. Null: unconstrained.
  TokenConstraintPtr constraint;
};

inline constexpr std::size_t kMaxStopStrings = 16;
inline constexpr std::size_t kMaxStopStringBytes = 256;

// Whether `config` can run at all: InvalidArgument naming the field when
// a stop string is empty, too long or not UTF-8, there are more than
// kMaxStopStrings, max_new_tokens <= 0, min_new_tokens lies outside [0, max_new_tokens], or a
// minimum would need stop tokens suppressed and either they are more than
// kMaxSuppressedTokens distinct ids or the executor cannot suppress any
// (`can_suppress_tokens`, see Runner::can_suppress_tokens). generate_async
// refuses such a config with kFailed and this message before the session,
// the executor or the sampling policy is touched; callers that want to
// refuse a request up front call it themselves.
Status check_gen_config(const GenConfig& config, bool can_suppress_tokens = true);

// A copyable view of one generation's outcome. Dropping it does not cancel;
// it may outlive the runner.
class GenerationHandle {
 public:
  GenerationHandle() = default;

  bool valid() const { return state_ != nullptr; }
  // Takes effect within one engine step; never interrupts a running execute().
  void cancel() const;
  // True once the terminal update has returned (or thrown).
  bool done() const;
  // Blocks until done(). Never call it from a callback of the same runner.
  void wait() const;
  std::optional<FinishReason> finish_reason() const;
  std::string error_message() const;
  // Empty until done().
  GenerationMetrics metrics() const;

 private:
  friend class Session;
  explicit GenerationHandle(std::shared_ptr<detail::GenerationState> state)
      : state_(std::move(state)) {}
  std::shared_ptr<detail::GenerationState> state_;
};

// Sole owner of one executor session. Destruction closes it through the
// engine thread without waiting; an active generation then ends kCancelled.
class Session {
 public:
  Session() = default;
  ~Session();
  Session(Session&& other) noexcept;
  Session& operator=(Session&& other) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // False for default, moved-from and closed sessions.
  bool valid() const;
  // The committed position (a pending, not yet fed token excluded). Updated
  // before each callback; 0 for a default session.
  Position position() const;
  // The executor's id; 0 for a default session.
  SessionId id() const;

  // A new session holding this one's committed [0, upto); nullopt when
  // refused. The future is ready at once when this session is not valid.
  std::future<std::optional<Session>> clone_async(Position upto) const;

  // Starts a generation continuing the session's context with `delta`.
  // Rejections found before the engine admits it call back inline on this
  // thread, possibly before this returns. on_settled runs exactly once, after
  // the outcome is published.
  GenerationHandle generate_async(GenerationInput delta, GenConfig config,
                                  GenerationCallback on_update, SettledCallback on_settled = {});

 private:
  friend class detail::EngineCore;
  friend class PrefixCache;
  friend class PromptCapture;
  Session(std::shared_ptr<detail::EngineCore> core, std::shared_ptr<detail::SessionState> state);
  void release();
  // Clones by identity, so a capture does not depend on a Session object.
  static std::future<std::optional<Session>> clone_of(
      const std::shared_ptr<detail::EngineCore>& core,
      const std::shared_ptr<detail::SessionState>& state, Position upto);

  std::shared_ptr<detail::EngineCore> core_;
  std::shared_ptr<detail::SessionState> state_;
};

// ---- Requests: the engine-owned path the server, the CLI and the benchmark take ----

// One prompt and the choices generated from it. The engine prefills the
// prompt once (after the longest cached prefix, when the runner keeps a
// prefix cache), generates choice 0 on it and, once the prompt is committed,
// clones it for choices 1..n-1 (each feeds the prompt's last token itself).
struct Request {
  std::vector<Token> prompt;  // non-empty
  std::int32_t n = 1;         // choices, >= 1
  // Per choice; choice i uses seed + i when a seed is set.
  GenConfig config;
  // Look the prompt up in the runner's prefix cache and snapshot it there.
  bool use_prefix_cache = true;
};

struct RequestUsage {
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;      // prompt tokens served from the prefix cache
  std::int64_t completion_tokens = 0;  // delivered, over every choice
};

// Every choice's terminal update has been delivered when this is reported.
struct RequestOutcome {
  RequestUsage usage;
  std::vector<FinishReason> finish_reasons;  // per choice
  // Per choice, as the engine measured it (empty for a choice that never
  // started). Choice 0's counts include the prompt it prefilled.
  std::vector<GenerationMetrics> metrics;
};

// Both run on the engine thread, must not block and must not wait for
// runner work. on_update gets every choice's updates in order, ending with
// exactly one terminal update per choice; on_done runs exactly once, last.
struct RequestCallbacks {
  std::function<void(std::int32_t choice, const GenerationUpdate& update)> on_update;
  std::function<void(const RequestOutcome& outcome)> on_done;
};

namespace detail {
struct RequestControl;
}

// The caller's view of a submitted request. Copyable; dropping it does not
// cancel. Every method is non-blocking except wait().
class RequestHandle {
 public:
  RequestHandle() = default;
  bool valid() const { return control_ != nullptr; }
  // Ends every choice (kCancelled) within one engine step.
  void cancel() const;
  void cancel_choice(std::int32_t choice) const;
  // Prompt tokens taken from the prefix cache; set before the first update.
  std::int64_t cached_tokens() const;
  bool done() const;
  // Blocks until on_done has returned. Never from a callback of the runner.
  void wait() const;

 private:
  friend class Runner;
  explicit RequestHandle(std::shared_ptr<detail::RequestControl> control)
      : control_(std::move(control)) {}
  std::shared_ptr<detail::RequestControl> control_;
};

// Whether `request` can run at all (InvalidArgument naming the field): the
// prompt is non-empty, n >= 1, and its config passes check_gen_config.
Status check_request(const Request& request, bool can_suppress_tokens = true);

// token_bytes[id]: the bytes token `id` adds to generated text in the middle
// of a stream (empty for special tokens and ids without text), the same table
// constrained decoding masks by. Immutable once shared.
using TokenBytesTable = std::shared_ptr<const std::vector<std::string>>;

// (No option for constrained decoding's masks: the engine thread computes a
// generation's next token mask when the executor's sampler reads it, which
// the CUDA executor does after enqueueing the step's forward, so the mask is
// computed while the GPU runs.)
struct RunnerOptions {
  // Snapshots of recent prompts the engine keeps (each holds one executor
  // session and its cells); 0: no prefix cache.
  std::int32_t prefix_cache_entries = 0;
  // What stop strings are matched on; null: a generation with stop strings
  // is refused (submit: InvalidArgument; generate_async: kFailed).
  TokenBytesTable token_bytes;
};

enum class InitializationState { kPending, kReady, kFailed };
enum class AcceptanceError { kUnavailable, kFailed };
using AcceptanceResult = std::variant<bool, AcceptanceError>;

class Runner {
 public:
  // The executor is borrowed and must outlive shutdown(); the scheduler is
  // owned. Starts the engine thread, which initializes the executor first.
  Runner(Executor& executor, std::unique_ptr<Scheduler> scheduler, RunnerOptions options = {});
  ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  InitializationState initialization_state() const;
  // Queues `request` for the engine thread and returns at once. Refused here
  // (nothing queued, no callback run) with InvalidArgument when
  // check_request fails and Unavailable when the engine has stopped or
  // failed to start. A request waits in the engine, in arrival order, until
  // its sessions are free; cancelling it there ends it without running.
  // A request with stop strings needs RunnerOptions::token_bytes.
  Result<RequestHandle> submit(Request request, RequestCallbacks callbacks);
  // Entries in the prefix cache, as of the last engine step.
  std::int64_t prefix_cache_size() const;
  // nullopt at capacity, while stopping, or after a failed initialization.
  std::future<std::optional<Session>> open_session_async();
  // Whether the executor consumes this kind of prepared input. Reserves nothing.
  std::future<AcceptanceResult> accepts_async(PreparedInputPtr input);
  // Whether the executor can suppress token ids, so that a GenConfig with
  // min_new_tokens and stop tokens can run (Executor::can_suppress_tokens;
  // a throw counts as false). Asked once, in the constructor before the
  // engine thread starts, so reading it never waits for or races a step;
  // the executor's answer must therefore be fixed from construction on (the
  // CUDA executor's comes from the program's metadata). generate_async still
  // asks the executor itself and refuses with kFailed; this lets callers
  // refuse up front instead.
  bool can_suppress_tokens() const { return can_suppress_tokens_; }
  // Idempotent. Blocks until the engine has stopped, live generations ended
  // kCancelled and every session closed; from a callback it only requests
  // the stop.
  void shutdown();
  // Consistent per engine step; final after shutdown().
  EngineMetrics metrics() const;

 private:
  std::shared_ptr<detail::EngineCore> core_;
  bool can_suppress_tokens_ = true;
};

}  // namespace cellm
