// GenerationService: everything the HTTP layer needs from a model — text ↔
// tokens, chat rendering, streaming detokenization and generations of n
// choices — behind one interface, so the server's HTTP, SSE, queueing and
// cancellation logic runs against a fake in unit tests and against the
// Runner (runner_service.h) in production.
//
// Thread-safety: every GenerationService method may be called from any thread
// concurrently. A GenerationJob is driven by one HTTP thread; its EventSink is
// called on the engine thread and must not block.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cellm/runner.h"
#include "cellm/status.h"
#include "cellm/sampling_defaults.h"
#include "cellm/token_constraint.h"
#include "cellm/types.h"
#include "grammar/token_vocab.h"
#include "server/tool_calls.h"

namespace cellm::server {

// One delivery for one choice. A set `finish` marks the choice's last event.
struct ChoiceEvent {
  std::int32_t choice = 0;
  std::vector<Token> tokens;
  std::optional<FinishReason> finish;
  std::string error;  // only with FinishReason::kFailed
  std::chrono::steady_clock::time_point at;
  // One entry per token when the request asked for logprobs, else empty.
  std::vector<TokenLogprobs> logprobs;
  // With finish kStopString: the engine's match, where ChoiceText cuts.
  std::optional<StopStringMatch> stop_string;
  // SamplingParams::prompt_logprobs: the prompt's scores, in an event of
  // their own (no tokens, no finish) ahead of choice 0's first token.
  std::vector<TokenLogprobs> prompt_logprobs;
};
// Called on the engine thread (or inline for early rejections); must only
// queue the event.
using EventSink = std::function<void(ChoiceEvent)>;

struct GenerationSpec {
  std::vector<Token> prompt;  // non-empty
  std::int32_t n = 1;         // choices sharing the prompt
  std::int64_t max_new_tokens = 1;
  // EOS (unless ignore_eos) is not sampled before this many tokens.
  std::int64_t min_new_tokens = 0;
  SamplingParams sampling;
  std::optional<std::uint64_t> seed;  // choice i uses seed + i
  bool ignore_eos = false;
  // Extra ids that end a choice (finish "stop"), honoured with ignore_eos too.
  std::vector<Token> stop_token_ids;
  // End a choice (finish "stop") where one appears in its text; the engine
  // matches them over the tokens' bytes (GenConfig::stop_strings).
  std::vector<std::string> stop_strings;
  // Constrained decoding (structured outputs, forced tool calls); null: none.
  TokenConstraintPtr constraint;
  // Whether the prompt may come from (and go into) the prefix cache; off
  // when its every token must be fed (prompt logprobs).
  bool use_prefix_cache = true;
};

// A running request. Destruction cancels whatever still runs and never
// waits: the engine frees the sessions within one step.
class GenerationJob {
 public:
  virtual ~GenerationJob() = default;
  // Non-blocking; the choice's terminal event follows within one step.
  virtual void cancel_choice(std::int32_t choice) = 0;
  // Prompt tokens that were served from the prefix cache instead of prefilled;
  // known once the first event has arrived.
  virtual std::int64_t cached_tokens() const = 0;
  // Runs `fn` once, when the engine has let go of the request (its sessions
  // are closed): at once if it has, else on the engine thread. It must not
  // block. The admission ticket is released this way, so a new request is
  // admitted only when its sessions are really free.
  virtual void after_release(std::function<void()> fn) = 0;
};

// Token ids in, final UTF-8 text out (see text/detokenizer.h).
class TokenTextStream {
 public:
  virtual ~TokenTextStream() = default;
  virtual std::string push(Token token) = 0;
  virtual std::string finish() = 0;
};

struct ServiceStats {
  std::int64_t kv_cells_used = -1;  // -1: unknown
  std::int64_t kv_cells_total = -1;
  // Sessions held by prefix-cache snapshots (cache entries and running
  // requests' prompt snapshots); -1: unknown.
  std::int64_t snapshot_sessions = -1;
  // Speculative decoding's draft tokens verified and kept; -1: off.
  std::int64_t spec_draft_tokens = -1;
  std::int64_t spec_accepted_tokens = -1;
};

class GenerationService {
 public:
  virtual ~GenerationService() = default;

  virtual std::string model_name() const = 0;
  // The per-session position limit: prompt + completion must fit.
  virtual std::int32_t context_length() const = 0;
  virtual std::int32_t vocab_size() const = 0;
  // Sequences that may generate at once; a request of n choices takes n.
  virtual std::int32_t max_sequences() const = 0;
  // Whether start() looks prompts up in a prefix cache (GenerationJob::
  // cached_tokens() then reports the hits).
  virtual bool prefix_caching() const { return false; }
  // The tokens a generation stops on unless ignore_eos (the model's EOS set).
  // min_tokens suppresses them, so it is refused when they are too many.
  virtual std::vector<Token> stop_tokens() const = 0;
  // Whether the sampler can hold token ids back at all (a device sampler
  // whose method takes no suppressed ids cannot); when false, min_tokens
  // with stop tokens is refused before admission.
  virtual bool can_suppress_tokens() const { return true; }
  // How the model writes tool calls (from its chat template and family);
  // kNone: replies are never parsed for calls.
  virtual ToolFormat tool_format() const { return ToolFormat::kNone; }
  // The bytes of every token, for constrained decoding; null when the
  // service cannot constrain (structured outputs are then refused).
  virtual std::shared_ptr<const grammar::TokenVocabulary> token_vocabulary() const {
    return nullptr;
  }

  virtual Result<std::vector<Token>> tokenize(std::string_view text, bool add_special) const = 0;
  // `messages` is the OpenAI list; `extra` the template variables.
  virtual Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                          const nlohmann::ordered_json& extra,
                                          bool add_generation_prompt) const = 0;
  virtual std::string detokenize(std::span<const Token> tokens) const = 0;
  // The bytes one token stands for in the middle of a text (no start-of-text
  // rules; possibly a partial UTF-8 sequence), for logprobs' `bytes`. The
  // default decodes the token alone.
  virtual std::string token_bytes(Token token) const { return detokenize(std::span(&token, 1)); }
  virtual std::unique_ptr<TokenTextStream> text_stream() const = 0;

  // Starts every choice of `spec` and returns at once (the engine queues the
  // request until its sessions are free). Errors: kInvalidArgument for a spec
  // the engine cannot run, kUnavailable while stopping.
  virtual Result<std::unique_ptr<GenerationJob>> start(const GenerationSpec& spec,
                                                       EventSink sink) = 0;

  virtual ServiceStats stats() const = 0;
  // The model's sampling defaults, for settings a request leaves unset.
  virtual SamplingDefaults sampling_defaults() const { return {}; }
};

}  // namespace cellm::server
