#include "server/runner_service.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>

namespace cellm::server {
namespace {

// Set by choice 0's first update: from then on its prompt is committed and
// can be cloned for the other choices.
struct FirstUpdate {
  std::mutex mu;
  std::condition_variable cv;
  bool seen = false;

  void mark() {
    {
      std::lock_guard lock(mu);
      if (seen) return;
      seen = true;
    }
    cv.notify_all();
  }
};

GenerationCallback forward_to(EventSink sink, std::int32_t choice,
                              std::shared_ptr<FirstUpdate> first = nullptr) {
  return [sink = std::move(sink), choice, first = std::move(first)](const GenerationUpdate& u) {
    sink(ChoiceEvent{choice, u.tokens, u.finish_reason, u.error_message,
                     std::chrono::steady_clock::now(), u.logprobs});
    if (first) first->mark();
  };
}

}  // namespace

class RunnerService::Job final : public GenerationJob {
 public:
  Job(std::shared_ptr<std::mutex> cache_mu, std::shared_ptr<std::atomic<std::int64_t>> captures,
      std::int32_t n)
      : cache_mu_(std::move(cache_mu)), captures_(std::move(captures)) {
    // Generations keep pointers into their Session objects' state, not to
    // the objects, but reserving keeps references stable while we build.
    sessions_.reserve(static_cast<std::size_t>(n));
    handles_.reserve(static_cast<std::size_t>(n));
  }

  ~Job() override {
    for (const GenerationHandle& h : handles_) h.cancel();
    for (const GenerationHandle& h : handles_) h.wait();
    if (capture_.active()) {
      std::lock_guard lock(*cache_mu_);
      capture_.collect();
      captures_->fetch_sub(1);
    }
    // Destroying the sessions queues their close: the cells are freed at the
    // engine's next command drain.
    sessions_.clear();
  }

  void cancel_choice(std::int32_t choice) override {
    if (choice >= 0 && static_cast<std::size_t>(choice) < handles_.size()) {
      handles_[static_cast<std::size_t>(choice)].cancel();
    }
  }
  std::int64_t cached_tokens() const override { return cached_; }

  std::shared_ptr<std::mutex> cache_mu_;
  std::shared_ptr<std::atomic<std::int64_t>> captures_;
  std::vector<Session> sessions_;
  std::vector<GenerationHandle> handles_;
  PromptCapture capture_;
  std::int64_t cached_ = 0;
};

RunnerService::RunnerService(Runner& runner, PrefixCache* cache, ModelText text,
                             RunnerServiceConfig config)
    : runner_(runner),
      cache_(cache != nullptr && cache->enabled() ? cache : nullptr),
      text_(std::move(text)),
      config_(std::move(config)) {}

std::int32_t RunnerService::max_sequences() const {
  if (config_.snapshots_have_own_sessions) return std::max<std::int32_t>(1, config_.max_sessions);
  const std::int32_t reserved = cache_ ? config_.prefix_cache_entries : 0;
  return std::max<std::int32_t>(1, config_.max_sessions - reserved);
}

std::int32_t RunnerService::sequences_for(std::int32_t n) const {
  if (config_.snapshots_have_own_sessions) return n;
  // The prompt snapshot a PromptCapture takes lives until the request ends.
  return n + (cache_ ? 1 : 0);
}

Result<std::vector<Token>> RunnerService::tokenize(std::string_view text, bool add_special) const {
  return text_.tokenize(text, add_special);
}

Result<std::string> RunnerService::render_chat(const nlohmann::ordered_json& messages,
                                               const nlohmann::ordered_json& extra,
                                               bool add_generation_prompt) const {
  return text_.render_chat(messages, extra, add_generation_prompt);
}

std::string RunnerService::detokenize(std::span<const Token> tokens) const {
  return text_.detokenize(tokens);
}

std::string RunnerService::token_bytes(Token token) const {
  return text_.token_bytes ? text_.token_bytes(token) : GenerationService::token_bytes(token);
}

std::unique_ptr<TokenTextStream> RunnerService::text_stream() const {
  return text_.text_stream();
}

ServiceStats RunnerService::stats() const {
  ServiceStats out = text_.stats ? text_.stats() : ServiceStats{};
  if (cache_ != nullptr) {
    std::lock_guard lock(*cache_mu_);
    out.snapshot_sessions = static_cast<std::int64_t>(cache_->size()) + captures_->load();
  } else {
    out.snapshot_sessions = 0;
  }
  return out;
}

Result<std::unique_ptr<GenerationJob>> RunnerService::start(
    const GenerationSpec& spec, EventSink sink, const std::function<bool()>& abandoned) {
  const std::vector<Token>& prompt = spec.prompt;
  if (prompt.empty() || spec.n < 1 || spec.max_new_tokens < 1) {
    return invalid_argument("a generation needs a non-empty prompt, n >= 1 and max_tokens >= 1");
  }
  auto config_for = [&](std::int32_t choice) {
    GenConfig c;
    c.max_new_tokens = spec.max_new_tokens;
    c.min_new_tokens = spec.min_new_tokens;
    c.sampling = spec.sampling;
    if (!spec.ignore_eos) c.stop_tokens = config_.stop_tokens;
    for (Token t : spec.stop_token_ids) {
      if (std::find(c.stop_tokens.begin(), c.stop_tokens.end(), t) == c.stop_tokens.end()) {
        c.stop_tokens.push_back(t);
      }
    }
    if (spec.seed) c.seed = *spec.seed + static_cast<std::uint64_t>(choice);
    return c;
  };
  // The engine would refuse these too, but only after sessions were taken.
  CELLM_RETURN_IF_ERROR(check_gen_config(config_for(0), runner_.can_suppress_tokens()));

  auto job = std::make_unique<Job>(cache_mu_, captures_, spec.n);
  std::optional<Session> session;
  if (cache_ != nullptr) {
    std::lock_guard lock(*cache_mu_);
    if (std::optional<PrefixMatch> match = cache_->lookup(prompt)) {
      session = std::move(match->session);
      job->cached_ = static_cast<std::int64_t>(match->matched_tokens);
    }
  }
  if (!session) {
    session = runner_.open_session_async().get();
    if (!session) {
      if (runner_.initialization_state() != InitializationState::kReady) {
        return unavailable("the engine is not running");
      }
      return out_of_resources("no free session (the engine holds at most {} sessions); retry later",
                              config_.max_sessions);
    }
  }
  job->sessions_.push_back(std::move(*session));
  Session& source = job->sessions_.back();

  if (cache_ != nullptr) {
    std::lock_guard lock(*cache_mu_);
    job->capture_ = cache_->capture_prompt(source, prompt);
    if (job->capture_.active()) captures_->fetch_add(1);
  }
  auto first = std::make_shared<FirstUpdate>();
  GenerationCallback cb0 = forward_to(sink, 0, spec.n > 1 ? first : nullptr);
  if (job->capture_.active()) cb0 = job->capture_.wrap(std::move(cb0));
  std::vector<Token> delta(prompt.begin() + job->cached_, prompt.end());
  job->handles_.push_back(source.generate_async(std::move(delta), config_for(0), std::move(cb0)));
  if (spec.n == 1) return std::unique_ptr<GenerationJob>(std::move(job));

  // The other choices share choice 0's prefill: once it has produced, the
  // prompt is committed and a clone up to its last token costs no compute;
  // each clone then feeds that last token itself to sample its own first.
  {
    std::unique_lock lock(first->mu);
    while (!first->seen) {
      lock.unlock();
      if (abandoned && abandoned()) {
        return cancelled("the client went away during the prompt's prefill");
      }
      lock.lock();
      first->cv.wait_for(lock, std::chrono::milliseconds(50));
    }
  }
  const auto upto = static_cast<Position>(prompt.size() - 1);
  for (std::int32_t i = 1; i < spec.n; ++i) {
    std::optional<Session> clone = source.clone_async(upto).get();
    if (!clone) {
      return out_of_resources("could not clone the prompt for choice {} of {}: no free session", i,
                              spec.n);
    }
    job->sessions_.push_back(std::move(*clone));
    job->handles_.push_back(job->sessions_.back().generate_async(
        std::vector<Token>{prompt.back()}, config_for(i), forward_to(sink, i)));
  }
  return std::unique_ptr<GenerationJob>(std::move(job));
}

}  // namespace cellm::server
