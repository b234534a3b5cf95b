// The caller-facing objects: Runner, Session and GenerationHandle. Each call
// either queues a command for the engine thread or, when the engine cannot
// take it, settles inline on the calling thread.
#include "cellm/runner.h"

#include <utility>

#include "core/check.h"
#include "core/clock.h"
#include "core/utf8.h"
#include "engine/engine_core.h"

namespace cellm {
namespace {

template <typename T>
std::future<T> ready_future(T value) {
  std::promise<T> p;
  p.set_value(std::move(value));
  return p.get_future();
}

// Settles a generation the engine never saw, on the caller's thread.
void settle_inline(detail::GenerationState& state, GenerationMetrics metrics, FinishReason reason,
                   std::string error, GenerationCallback on_update, SettledCallback on_settled) {
  metrics.t_end = Clock::now();
  detail::deliver_terminal(on_update, {}, reason, error);
  state.publish(reason, std::move(error), metrics);
  detail::run_settled(on_settled);
  // on_update and on_settled are released when this returns.
}

}  // namespace

Status check_gen_config(const GenConfig& config, bool can_suppress_tokens) {
  if (config.stop_strings.size() > kMaxStopStrings) {
    return invalid_argument("stop_strings holds {} strings; at most {} are allowed",
                            config.stop_strings.size(), kMaxStopStrings);
  }
  for (std::size_t i = 0; i < config.stop_strings.size(); ++i) {
    const std::string& s = config.stop_strings[i];
    if (s.empty() || s.size() > kMaxStopStringBytes) {
      return invalid_argument("stop_strings[{}] holds {} bytes; a stop string must hold 1 to {}",
                              i, s.size(), kMaxStopStringBytes);
    }
    if (!utf8::is_valid(s)) {
      return invalid_argument("stop_strings[{}] is not valid UTF-8", i);
    }
  }
  if (config.max_new_tokens <= 0) {
    return invalid_argument("max_new_tokens must be greater than zero");
  }
  if (config.min_new_tokens < 0 || config.min_new_tokens > config.max_new_tokens) {
    return invalid_argument("min_new_tokens {} must be within [0, max_new_tokens = {}]",
                            config.min_new_tokens, config.max_new_tokens);
  }
  if (config.min_new_tokens > 0 && !config.stop_tokens.empty() && !can_suppress_tokens) {
    return invalid_argument(
        "min_new_tokens {} needs the stop tokens suppressed until it is reached, but the "
        "executor's device sampler takes no suppressed ids; drop min_new_tokens (OpenAI "
        "min_tokens) or serve a program whose sample method takes them",
        config.min_new_tokens);
  }
  if (config.min_new_tokens > 0) {
    // Until the minimum every stop token is suppressed in sampling, and a
    // policy has room for kMaxSuppressedTokens ids (repeats take none).
    SamplingParams probe;
    std::size_t distinct = 0;
    for (Token t : config.stop_tokens) {
      if (probe.suppresses(t)) continue;
      ++distinct;
      (void)probe.suppress(t);
    }
    if (distinct > kMaxSuppressedTokens) {
      return invalid_argument(
          "min_new_tokens {} needs every stop token suppressed until it is reached, but at most "
          "{} distinct ids can be and the config has {}; drop min_new_tokens or stop tokens",
          config.min_new_tokens, kMaxSuppressedTokens, distinct);
    }
  }
  return Status::ok();
}

Status check_request(const Request& request, bool can_suppress_tokens) {
  if (request.prompt.empty()) return invalid_argument("the prompt must not be empty");
  if (request.n < 1) return invalid_argument("n must be at least 1, not {}", request.n);
  return check_gen_config(request.config, can_suppress_tokens);
}

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kNewTokenLimit: return "new_token_limit";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kFailed: return "failed";
    case FinishReason::kStopString: return "stop_string";
  }
  return "unknown";
}

// ---- GenerationHandle ----

void GenerationHandle::cancel() const {
  if (state_) state_->cancel_requested.store(true);
}

bool GenerationHandle::done() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->done;
}

void GenerationHandle::wait() const {
  if (!state_) return;
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [this] { return state_->done; });
}

std::optional<FinishReason> GenerationHandle::finish_reason() const {
  if (!state_) return std::nullopt;
  std::lock_guard lock(state_->mu);
  return state_->done ? state_->reason : std::nullopt;
}

std::string GenerationHandle::error_message() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mu);
  return state_->done ? state_->error : std::string();
}

GenerationMetrics GenerationHandle::metrics() const {
  if (!state_) return {};
  std::lock_guard lock(state_->mu);
  return state_->done ? state_->metrics : GenerationMetrics{};
}

// ---- RequestHandle ----

void RequestHandle::cancel() const {
  if (control_) control_->cancel_all.store(true);
}

void RequestHandle::cancel_choice(std::int32_t choice) const {
  if (control_ && choice >= 0 && choice < control_->n) {
    control_->cancel_choice[static_cast<std::size_t>(choice)].store(true);
  }
}

std::int64_t RequestHandle::cached_tokens() const {
  return control_ ? control_->cached_tokens.load() : 0;
}

bool RequestHandle::done() const {
  if (!control_) return false;
  std::lock_guard lock(control_->mu);
  return control_->done;
}

void RequestHandle::wait() const {
  if (!control_) return;
  std::unique_lock lock(control_->mu);
  control_->cv.wait(lock, [this] { return control_->done; });
}

// ---- Session ----

Session::Session(std::shared_ptr<detail::EngineCore> core,
                 std::shared_ptr<detail::SessionState> state)
    : core_(std::move(core)), state_(std::move(state)) {}

Session::~Session() {
  release();
}

Session::Session(Session&& other) noexcept
    : core_(std::move(other.core_)), state_(std::move(other.state_)) {}

Session& Session::operator=(Session&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::move(other.core_);
    state_ = std::move(other.state_);
  }
  return *this;
}

void Session::release() {
  if (core_ && state_ && !state_->closed.exchange(true)) {
    // Never waits: a stopped engine has closed every session already.
    (void)core_->push(detail::CloseCommand{state_->sid});
  }
  core_.reset();
  state_.reset();
}

bool Session::valid() const {
  return core_ && state_ && !state_->closed.load();
}

Position Session::position() const {
  return state_ ? state_->position.load() : 0;
}

SessionId Session::id() const {
  return state_ ? state_->sid : 0;
}

std::future<std::optional<Session>> Session::clone_async(Position upto) const {
  return clone_of(core_, state_, upto);
}

std::future<std::optional<Session>> Session::clone_of(
    const std::shared_ptr<detail::EngineCore>& core,
    const std::shared_ptr<detail::SessionState>& state, Position upto) {
  if (!core || !state || state->closed.load()) {
    return ready_future<std::optional<Session>>(std::nullopt);
  }
  detail::CloneCommand cmd;
  cmd.sid = state->sid;
  cmd.upto = upto;
  auto future = cmd.reply.get_future();
  detail::Command command{std::move(cmd)};
  if (!core->push(std::move(command))) return ready_future<std::optional<Session>>(std::nullopt);
  return future;
}

GenerationHandle Session::generate_async(GenerationInput delta, GenConfig config,
                                         GenerationCallback on_update, SettledCallback on_settled) {
  auto state = std::make_shared<detail::GenerationState>();
  GenerationHandle handle(state);
  GenerationMetrics metrics;
  metrics.t_submit = Clock::now();
  metrics.sid = id();
  if (const auto* raw = std::get_if<std::vector<Token>>(&delta)) {
    metrics.n_prompt_tokens = static_cast<std::int64_t>(raw->size());
  } else if (const auto& prepared = std::get<PreparedInputPtr>(delta)) {
    metrics.n_prompt_tokens = static_cast<std::int64_t>(prepared->size());
  }
  if (!core_ || !state_) {
    settle_inline(*state, metrics, FinishReason::kFailed, "session is not initialized",
                  std::move(on_update), std::move(on_settled));
    return handle;
  }
  if (state_->closed.load()) {
    settle_inline(*state, metrics, FinishReason::kCancelled, "", std::move(on_update),
                  std::move(on_settled));
    return handle;
  }
  detail::Command command{detail::StartCommand{state, state_, std::move(delta), std::move(config),
                                               std::move(on_update), std::move(on_settled),
                                               metrics}};
  if (!core_->push(std::move(command))) {
    // push() leaves a refused command untouched, so its callbacks are still here.
    auto& cmd = std::get<detail::StartCommand>(command);
    settle_inline(*state, metrics, FinishReason::kCancelled, "", std::move(cmd.on_update),
                  std::move(cmd.on_settled));
  }
  return handle;
}

// ---- Runner ----

Runner::Runner(Executor& executor, std::unique_ptr<Scheduler> scheduler, RunnerOptions options)
    : core_(std::make_shared<detail::EngineCore>(executor, std::move(scheduler), options)) {
  // Before start(): from then on only the engine thread may call the executor.
  try {
    can_suppress_tokens_ = executor.can_suppress_tokens();
  } catch (...) {
    can_suppress_tokens_ = false;  // as the engine treats a throw
  }
  core_->start();
}

Runner::~Runner() {
  shutdown();
}

InitializationState Runner::initialization_state() const {
  return core_->initialization_state();
}

Result<RequestHandle> Runner::submit(Request request, RequestCallbacks callbacks) {
  CELLM_RETURN_IF_ERROR(check_request(request, can_suppress_tokens_));
  if (!request.config.stop_strings.empty() && !core_->token_bytes()) {
    return invalid_argument(
        "the request has stop strings but this runner has no token byte table to match them "
        "on; construct it with RunnerOptions::token_bytes");
  }
  if (initialization_state() == InitializationState::kFailed) {
    return unavailable("the engine failed to start");
  }
  auto control = std::make_shared<detail::RequestControl>(request.n);
  detail::Command command{
      detail::RequestCommand{control, std::move(request), std::move(callbacks), Clock::now()}};
  if (!core_->push(std::move(command))) return unavailable("the engine is stopping");
  return RequestHandle(std::move(control));
}

std::int64_t Runner::prefix_cache_size() const {
  return core_->prefix_cache_size();
}

std::future<std::optional<Session>> Runner::open_session_async() {
  detail::OpenCommand cmd;
  auto future = cmd.reply.get_future();
  detail::Command command{std::move(cmd)};
  if (!core_->push(std::move(command))) return ready_future<std::optional<Session>>(std::nullopt);
  return future;
}

std::future<AcceptanceResult> Runner::accepts_async(PreparedInputPtr input) {
  detail::AcceptsCommand cmd;
  cmd.input = std::move(input);
  auto future = cmd.reply.get_future();
  detail::Command command{std::move(cmd)};
  if (!core_->push(std::move(command))) {
    return ready_future<AcceptanceResult>(AcceptanceError::kUnavailable);
  }
  return future;
}

void Runner::shutdown() {
  core_->request_stop();
  if (core_->on_engine_thread()) return;  // a callback: the engine stops after this step
  core_->join();
}

EngineMetrics Runner::metrics() const {
  return core_->metrics();
}

}  // namespace cellm
