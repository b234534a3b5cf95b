// Engine thread life cycle and command handling. Batch execution and output
// interpretation live in engine_step.cpp.
#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"

namespace cellm::detail {
namespace {

constexpr auto kIdleWait = std::chrono::milliseconds(20);
constexpr std::int64_t kMaxPosition = std::numeric_limits<Position>::max();

template <typename T>
std::future<T> ready_future(T value) {
  std::promise<T> p;
  p.set_value(std::move(value));
  return p.get_future();
}

}  // namespace

void GenerationState::publish(FinishReason r, std::string e, const GenerationMetrics& m) {
  {
    std::lock_guard lock(mu);
    reason = r;
    error = std::move(e);
    metrics = m;
    done = true;
  }
  cv.notify_all();
}

void deliver_terminal(const GenerationCallback& on_update, std::vector<Token> tokens,
                      FinishReason& reason, std::string& error, std::vector<TokenLogprobs> logprobs,
                      std::optional<StopStringMatch> stop_match) {
  if (!on_update) return;
  GenerationUpdate update{std::move(tokens), reason, error, std::move(logprobs), stop_match};
  try {
    on_update(update);
  } catch (const std::exception& e) {
    reason = FinishReason::kFailed;
    error = e.what();
  } catch (...) {
    reason = FinishReason::kFailed;
    error = "generation callback threw a non-standard exception";
  }
}

void run_settled(const SettledCallback& on_settled) noexcept {
  if (!on_settled) return;
  try {
    on_settled();
  } catch (...) {
    // A settlement callback has nobody left to report to.
  }
}

EngineCore::EngineCore(Executor& executor, std::unique_ptr<Scheduler> scheduler,
                       RunnerOptions options)
    : executor_(executor), scheduler_(std::move(scheduler)), options_(options) {
  CELLM_CHECK(scheduler_ != nullptr, "the runner needs a scheduler");
}

EngineCore::~EngineCore() {
  if (thread_.joinable()) {
    // Only reachable when the engine thread itself drops the last reference.
    if (std::this_thread::get_id() == thread_.get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
}

void EngineCore::start() {
  auto self = shared_from_this();
  thread_ = std::thread([self] { self->run_(); });
}

bool EngineCore::push(Command&& command) {
  {
    std::lock_guard lock(inbox_mu_);
    // Once a stop is requested nothing new is queued; the stop path answers
    // what is already in the inbox.
    if (!accepting_ || stop_requested_.load()) return false;
    inbox_.push_back(std::move(command));
  }
  inbox_cv_.notify_one();
  return true;
}

bool EngineCore::accepting() const {
  std::lock_guard lock(inbox_mu_);
  return accepting_ && !stop_requested_.load();
}

void EngineCore::request_stop() {
  {
    std::lock_guard lock(inbox_mu_);
    stop_requested_.store(true);
  }
  inbox_cv_.notify_all();
}

void EngineCore::join() {
  CELLM_CHECK(!on_engine_thread(), "join() from the engine thread would deadlock");
  std::lock_guard lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

bool EngineCore::on_engine_thread() const {
  return std::this_thread::get_id() == engine_thread_id_.load();
}

EngineMetrics EngineCore::metrics() const {
  std::lock_guard lock(metrics_mu_);
  return published_;
}

void EngineCore::publish_metrics_() {
  std::lock_guard lock(metrics_mu_);
  published_ = em_;
}

Session EngineCore::make_session_(const std::shared_ptr<SessionState>& state) {
  return Session(shared_from_this(), state);
}

void EngineCore::run_() {
  engine_thread_id_.store(std::this_thread::get_id());
  const auto t0 = Clock::now();
  bool ok = false;
  try {
    ok = executor_.initialize();
  } catch (const std::exception& e) {
    CELLM_LOG_ERROR("runner: executor initialization threw: {}", e.what());
  } catch (...) {
    CELLM_LOG_ERROR("runner: executor initialization threw a non-standard exception");
  }
  em_.init_us = us_between(t0, Clock::now());
  publish_metrics_();
  init_state_.store(ok ? InitializationState::kReady : InitializationState::kFailed);

  while (ok && !stop_requested_.load()) {
    drain_commands_(true);
    reap_();
    advance_requests_();
    admit_requests_();
    if (stop_requested_.load()) break;
    const bool worked = step_();
    advance_requests_();
    publish_metrics_();
    if (!worked) {
      std::unique_lock lock(inbox_mu_);
      inbox_cv_.wait_for(lock, kIdleWait, [this] {
        return !inbox_.empty() || stop_requested_.load() || scheduler_->has_work();
      });
    }
  }
  stop_path_();
}

void EngineCore::drain_commands_(bool running) {
  std::deque<Command> batch;
  {
    std::lock_guard lock(inbox_mu_);
    batch.swap(inbox_);
  }
  for (Command& c : batch) {
    std::visit([&](auto& cmd) { handle_(cmd, running); }, c);
  }
}

void EngineCore::handle_(OpenCommand& c, bool running) {
  std::optional<SessionId> sid = running ? open_session_() : std::nullopt;
  if (!sid) {
    c.reply.set_value(std::nullopt);
    return;
  }
  c.reply.set_value(make_session_(sessions_.at(*sid).state));
}

std::optional<SessionId> EngineCore::open_session_() {
  std::optional<SessionId> sid;
  try {
    sid = executor_.open_session();
  } catch (const std::exception& e) {
    CELLM_LOG_WARN("runner: open_session threw: {}", e.what());
  } catch (...) {
    CELLM_LOG_WARN("runner: open_session threw a non-standard exception");
  }
  if (!sid) {
    ++em_.sessions_refused;
    return std::nullopt;
  }
  CELLM_DCHECK(!sessions_.contains(*sid), "executor reused session id {}", *sid);
  auto state = std::make_shared<SessionState>(*sid, 0);
  sessions_[*sid] = SessionRecord{state, 0, std::nullopt, false, nullptr};
  return sid;
}

void EngineCore::handle_(CloseCommand& c, bool /*running*/) {
  close_session_(c.sid);
}

void EngineCore::close_session_(SessionId sid) {
  auto it = sessions_.find(sid);
  if (it == sessions_.end()) return;
  SessionRecord record = std::move(it->second);
  sessions_.erase(it);
  record.state->closed.store(true);
  if (record.active) {
    // finish_ cannot find the record any more, so drop the queued work here.
    for (const Task& t : scheduler_->cancel(sid)) task_owner_.erase(t.tid);
    finish_(record.active, FinishReason::kCancelled, {}, "");
  }
  try {
    executor_.close_session(sid);
  } catch (...) {
    CELLM_LOG_WARN("runner: close_session({}) threw; the session is forgotten", sid);
  }
}

void EngineCore::handle_(CloneCommand& c, bool running) {
  std::optional<SessionId> child = running ? clone_session_(c.sid, c.upto) : std::nullopt;
  if (!child) {
    c.reply.set_value(std::nullopt);
    return;
  }
  c.reply.set_value(make_session_(sessions_.at(*child).state));
}

std::optional<SessionId> EngineCore::clone_session_(SessionId sid, Position upto) {
  auto it = sessions_.find(sid);
  if (it == sessions_.end() || it->second.poisoned || upto < 0 || upto > it->second.position) {
    return std::nullopt;
  }
  std::optional<SessionId> child;
  try {
    child = executor_.clone(sid, upto);
  } catch (const std::exception& e) {
    CELLM_LOG_WARN("runner: clone of session {} at {} threw: {}", sid, upto, e.what());
  } catch (...) {
    CELLM_LOG_WARN("runner: clone of session {} at {} threw", sid, upto);
  }
  if (!child) return std::nullopt;
  CELLM_DCHECK(!sessions_.contains(*child), "executor reused session id {}", *child);
  auto state = std::make_shared<SessionState>(*child, upto);
  sessions_[*child] = SessionRecord{state, upto, std::nullopt, false, nullptr};
  return child;
}

void EngineCore::handle_(AcceptsCommand& c, bool running) {
  if (!running) {
    c.reply.set_value(AcceptanceError::kUnavailable);
    return;
  }
  if (!c.input) {
    c.reply.set_value(false);
    return;
  }
  try {
    c.reply.set_value(executor_.accepts(*c.input));
  } catch (...) {
    c.reply.set_value(AcceptanceError::kFailed);
  }
}

void EngineCore::handle_(StartCommand& c, bool running) {
  ++em_.generations_started;
  auto gen = std::make_shared<Generation>();
  gen->id = next_generation_++;
  gen->state = std::move(c.state);
  gen->sid = c.session->sid;
  gen->config = std::move(c.config);
  gen->on_update = std::move(c.on_update);
  gen->on_settled = std::move(c.on_settled);
  gen->budget_left = gen->config.max_new_tokens;
  gen->metrics = c.metrics;

  auto reject = [&](FinishReason reason, std::string message) {
    finish_(gen, reason, {}, std::move(message));
  };
  auto it = running ? sessions_.find(gen->sid) : sessions_.end();
  if (it == sessions_.end()) return reject(FinishReason::kCancelled, "");
  SessionRecord& rec = it->second;
  // Until min_new_tokens are out, the stop tokens must not even be sampled.
  const bool suppress_stops = gen->config.min_new_tokens > 0 && !gen->config.stop_tokens.empty();
  // A device sampler that cannot suppress is refused here rather than
  // failing the first step, which would poison the session.
  bool can_suppress = true;
  if (suppress_stops) {
    try {
      can_suppress = executor_.can_suppress_tokens();
    } catch (...) {
      can_suppress = false;
    }
  }
  if (Status valid = check_gen_config(gen->config, can_suppress); !valid.is_ok()) {
    return reject(FinishReason::kFailed, std::string(valid.message()));
  }
  if (!gen->config.stop_strings.empty()) {
    if (!options_.token_bytes) {
      return reject(FinishReason::kFailed,
                    "the generation has stop strings but this runner has no token byte table to "
                    "match them on; construct it with RunnerOptions::token_bytes");
    }
    // check_gen_config vetted every string, which is all create() checks.
    Result<StopMatcher> matcher = StopMatcher::create(gen->config.stop_strings);
    CELLM_CHECK(matcher.ok());
    gen->stop_strings.emplace(std::move(matcher).value());
  }
  if (gen->config.constraint) {
    gen->constrained = std::make_unique<ConstrainedDecoding>(
        *gen->config.constraint, gen->config.stop_tokens, gen->config.constraint->vocab_size());
    // In the config too, so that a re-installed policy keeps the mask.
    gen->config.sampling.token_mask = gen->constrained->mask();
    if (gen->constrained->refresh() != ConstrainedDecoding::Next::kContinue) {
      return reject(FinishReason::kFailed, "the grammar allows no token at the start");
    }
  }
  SamplingParams policy = gen->config.sampling;
  if (suppress_stops) {
    for (Token t : gen->config.stop_tokens) {
      // check_gen_config made room for every distinct stop token.
      const bool fits = policy.suppress(t);
      CELLM_CHECK(fits, "stop token {} does not fit the suppressed ids", t);
    }
    gen->suppressing_stops = true;
  }
  const auto* raw = std::get_if<std::vector<Token>>(&c.delta);
  const PreparedInputPtr prepared = raw ? nullptr : std::get<PreparedInputPtr>(c.delta);
  if (!raw && !prepared) return reject(FinishReason::kFailed, "prepared input is null");
  const std::size_t n = raw ? raw->size() : prepared->size();
  if (n == 0) return reject(FinishReason::kFailed, "generation delta must not be empty");
  const std::int64_t carried = rec.pending ? 1 : 0;
  if (n > static_cast<std::size_t>(kMaxPosition) ||
      rec.position + carried + static_cast<std::int64_t>(n) > kMaxPosition) {
    return reject(FinishReason::kFailed,
                  fmt::format("generation input of {} positions does not fit session {} at "
                              "position {}",
                              n, gen->sid, rec.position));
  }
  if (rec.poisoned) {
    return reject(FinishReason::kFailed, "session cannot continue after an executor failure");
  }
  if (rec.active) return reject(FinishReason::kFailed, "session already has an active generation");
  if (prepared) {
    bool accepted = false;
    try {
      accepted = executor_.accepts(*prepared);
    } catch (...) {
      accepted = false;
    }
    if (!accepted) return reject(FinishReason::kFailed, "executor does not accept prepared input");
  }
  try {
    executor_.set_sampling(gen->sid, policy, gen->config.seed);
  } catch (...) {
    return reject(FinishReason::kFailed, "executor failed to install the sampling policy");
  }

  // Chunk the input; only the last chunk asks for a token.
  const std::size_t chunk = scheduler_->max_prefill_chunk_size();
  std::vector<Task> tasks;
  auto add_chunks = [&](InputPayload payload, std::size_t total, Position base) {
    for (std::size_t offset = 0; offset < total; offset += chunk) {
      Input in;
      in.sid = gen->sid;
      in.offset = offset;
      in.size = std::min(chunk, total - offset);
      in.produce_output = offset + in.size == total;
      in.payload = payload;
      in.position = base;
      tasks.push_back(make_task_(*gen, std::move(in), false));
    }
  };
  if (raw) {
    auto tokens = std::make_shared<std::vector<Token>>();
    tokens->reserve(n + carried);
    if (rec.pending) tokens->push_back(*rec.pending);
    tokens->insert(tokens->end(), raw->begin(), raw->end());
    const std::size_t total = tokens->size();
    add_chunks(TokenInputPtr(std::move(tokens)), total, rec.position);
  } else {
    if (rec.pending) {
      // A prepared backing cannot carry the pending token, so it goes first
      // as its own one-token raw slice.
      Input in;
      in.sid = gen->sid;
      in.size = 1;
      in.payload = std::make_shared<const std::vector<Token>>(1, *rec.pending);
      in.position = rec.position;
      tasks.push_back(make_task_(*gen, std::move(in), false));
    }
    add_chunks(prepared, n, static_cast<Position>(rec.position + carried));
  }
  rec.active = gen;
  em_.total_prompt_tokens += gen->metrics.n_prompt_tokens;
  if (!submit_tasks_(*gen, std::move(tasks))) {
    finish_(gen, FinishReason::kFailed, {}, "scheduler rejected generation tasks");
  }
}

Task EngineCore::make_task_(const Generation& gen, Input input, bool is_decode) {
  Task t;
  t.tid = next_tid_++;
  t.is_decode = is_decode;
  t.input = std::move(input);
  task_owner_[t.tid] = gen.id;
  return t;
}

bool EngineCore::submit_tasks_(Generation& /*gen*/, std::vector<Task> tasks) {
  std::vector<TaskId> ids;
  for (const Task& t : tasks) ids.push_back(t.tid);
  bool ok = false;
  try {
    ok = scheduler_->submit(std::move(tasks));
  } catch (...) {
    ok = false;
  }
  if (!ok) {
    for (TaskId tid : ids) task_owner_.erase(tid);
  }
  return ok;
}

void EngineCore::reap_() {
  std::vector<std::shared_ptr<Generation>> ended;
  for (auto& [sid, rec] : sessions_) {
    if (rec.active && (rec.active->state->cancel_requested.load() || rec.state->closed.load())) {
      ended.push_back(rec.active);
    }
  }
  for (const auto& gen : ended) finish_(gen, FinishReason::kCancelled, {}, "");
}

void EngineCore::stop_path_() {
  {
    std::lock_guard lock(inbox_mu_);
    accepting_ = false;
  }
  // Answer everything still queued so no caller waits forever.
  drain_commands_(false);
  for (const Task& t : scheduler_->clear()) task_owner_.erase(t.tid);
  snapshots_.clear();  // their sessions are retired below with the rest
  cache_size_.store(0);
  // Retire every record before any callback runs, so re-entrant calls see
  // their sessions closed.
  std::vector<SessionRecord> retired;
  retired.reserve(sessions_.size());
  for (auto& [sid, rec] : sessions_) {
    rec.state->closed.store(true);
    retired.push_back(std::move(rec));
  }
  sessions_.clear();
  for (SessionRecord& rec : retired) {
    if (rec.active) finish_(rec.active, FinishReason::kCancelled, {}, "");
  }
  for (SessionRecord& rec : retired) {
    try {
      executor_.close_session(rec.state->sid);
    } catch (...) {
      CELLM_LOG_WARN("runner: close_session({}) threw during shutdown", rec.state->sid);
    }
  }
  abandon_requests_();
  publish_metrics_();
}

}  // namespace cellm::detail
