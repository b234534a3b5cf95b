#include "server/runner_service.h"

#include <algorithm>
#include <chrono>
#include <mutex>

namespace cellm::server {
namespace {

// Whatever must wait for the engine to let go of a request (its admission
// ticket): run by on_done on the engine thread, or at once when it came first.
class ReleaseHook {
 public:
  void set(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      if (!released_) {
        fn_ = std::move(fn);
        return;
      }
    }
    if (fn) fn();
  }
  void released() {
    std::function<void()> fn;
    {
      std::lock_guard lock(mu_);
      released_ = true;
      fn.swap(fn_);
    }
    if (fn) fn();
  }

 private:
  std::mutex mu_;
  bool released_ = false;
  std::function<void()> fn_;
};

}  // namespace

class RunnerService::Job final : public GenerationJob {
 public:
  Job(RequestHandle handle, std::shared_ptr<ReleaseHook> hook)
      : handle_(std::move(handle)), hook_(std::move(hook)) {}
  ~Job() override { handle_.cancel(); }

  void cancel_choice(std::int32_t choice) override { handle_.cancel_choice(choice); }
  std::int64_t cached_tokens() const override { return handle_.cached_tokens(); }
  void after_release(std::function<void()> fn) override { hook_->set(std::move(fn)); }

 private:
  RequestHandle handle_;
  std::shared_ptr<ReleaseHook> hook_;
};

RunnerService::RunnerService(Runner& runner, ModelText text, RunnerServiceConfig config)
    : runner_(runner), text_(std::move(text)), config_(std::move(config)) {}

std::int32_t RunnerService::max_sequences() const {
  return std::max<std::int32_t>(1, config_.max_sessions);
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
  out.snapshot_sessions = runner_.prefix_cache_size();
  return out;
}

Result<std::unique_ptr<GenerationJob>> RunnerService::start(const GenerationSpec& spec,
                                                            EventSink sink) {
  Request request;
  request.prompt = spec.prompt;
  request.n = spec.n;
  request.use_prefix_cache = spec.use_prefix_cache;
  GenConfig& c = request.config;
  c.max_new_tokens = spec.max_new_tokens;
  c.min_new_tokens = spec.min_new_tokens;
  c.sampling = spec.sampling;
  c.seed = spec.seed;
  c.constraint = spec.constraint;
  c.stop_strings = spec.stop_strings;
  if (!spec.ignore_eos) c.stop_tokens = config_.stop_tokens;
  for (Token t : spec.stop_token_ids) {
    if (std::find(c.stop_tokens.begin(), c.stop_tokens.end(), t) == c.stop_tokens.end()) {
      c.stop_tokens.push_back(t);
    }
  }
  auto hook = std::make_shared<ReleaseHook>();
  RequestCallbacks callbacks;
  callbacks.on_update = [sink = std::move(sink)](std::int32_t choice, const GenerationUpdate& u) {
    sink(ChoiceEvent{choice, u.tokens, u.finish_reason, u.error_message,
                     std::chrono::steady_clock::now(), u.logprobs, u.stop_string,
                     u.prompt_logprobs});
  };
  callbacks.on_done = [hook](const RequestOutcome&) { hook->released(); };
  CELLM_ASSIGN_OR_RETURN(RequestHandle handle,
                         runner_.submit(std::move(request), std::move(callbacks)));
  return std::unique_ptr<GenerationJob>(new Job(std::move(handle), std::move(hook)));
}

}  // namespace cellm::server
