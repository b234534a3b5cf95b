// EngineCore: the runner's shared internals. Public objects (Runner, Session,
// GenerationHandle) hold it by shared_ptr so they may outlive the Runner.
//
// Thread-safety: push(), request_stop(), join() and the accessors are safe from
// any thread; everything named with a trailing underscore runs on the engine
// thread only, which alone touches the executor and the session records.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "cellm/runner.h"
#include "core/stop_matcher.h"
#include "engine/constrained_decoding.h"

namespace cellm::detail {

// Shared between a Session object and the engine.
struct SessionState {
  explicit SessionState(SessionId id, Position start) : sid(id), position(start) {}
  const SessionId sid;
  std::atomic<bool> closed{false};
  std::atomic<Position> position;
};

// Shared between GenerationHandles and the engine.
struct GenerationState {
  std::atomic<bool> cancel_requested{false};
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::optional<FinishReason> reason;
  std::string error;
  GenerationMetrics metrics;

  void publish(FinishReason r, std::string e, const GenerationMetrics& m);
};

// Delivers the terminal update; a throwing callback turns the outcome into
// kFailed with the exception's message.
void deliver_terminal(const GenerationCallback& on_update, std::vector<Token> tokens,
                      FinishReason& reason, std::string& error,
                      std::vector<TokenLogprobs> logprobs = {},
                      std::optional<StopStringMatch> stop_match = std::nullopt);
// Runs on_settled, swallowing anything it throws.
void run_settled(const SettledCallback& on_settled) noexcept;

struct OpenCommand {
  std::promise<std::optional<Session>> reply;
};
struct CloseCommand {
  SessionId sid = 0;
};
struct CloneCommand {
  SessionId sid = 0;
  Position upto = 0;
  std::promise<std::optional<Session>> reply;
};
struct StartCommand {
  std::shared_ptr<GenerationState> state;
  std::shared_ptr<SessionState> session;
  GenerationInput delta;
  GenConfig config;
  GenerationCallback on_update;
  SettledCallback on_settled;
  GenerationMetrics metrics;  // t_submit and counts stamped by the caller
};
// Shared between RequestHandles and the engine.
struct RequestControl {
  explicit RequestControl(std::int32_t n);
  const std::int32_t n;
  std::atomic<bool> cancel_all{false};
  std::unique_ptr<std::atomic<bool>[]> cancel_choice;  // n flags
  std::atomic<std::int64_t> cached_tokens{0};
  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  bool cancelled(std::int32_t choice) const {
    return cancel_all.load() || cancel_choice[static_cast<std::size_t>(choice)].load();
  }
  void mark_done();
};
struct RequestCommand {
  std::shared_ptr<RequestControl> control;
  Request request;
  RequestCallbacks callbacks;
  MetricsClock::time_point t_submit;
};
struct AcceptsCommand {
  PreparedInputPtr input;
  std::promise<AcceptanceResult> reply;
};
using Command = std::variant<OpenCommand, CloseCommand, CloneCommand, StartCommand, AcceptsCommand,
                             RequestCommand>;

class EngineCore : public std::enable_shared_from_this<EngineCore> {
 public:
  EngineCore(Executor& executor, std::unique_ptr<Scheduler> scheduler, RunnerOptions options = {});
  ~EngineCore();

  // Launches the engine thread (it keeps the core alive while it runs).
  void start();
  // False (the command untouched) once the engine no longer accepts work.
  bool push(Command&& command);
  bool accepting() const;
  void request_stop();
  // Waits for the engine thread; concurrent callers all wait for the same end.
  void join();
  bool on_engine_thread() const;
  InitializationState initialization_state() const { return init_state_.load(); }
  EngineMetrics metrics() const;
  std::int64_t prefix_cache_size() const { return cache_size_.load(); }
  // Immutable after construction: readable from any thread.
  const TokenBytesTable& token_bytes() const { return options_.token_bytes; }

 private:
  // One live generation, engine side.
  struct Generation {
    std::uint64_t id = 0;
    std::shared_ptr<GenerationState> state;
    SessionId sid = 0;
    GenConfig config;
    GenerationCallback on_update;
    SettledCallback on_settled;
    std::int64_t budget_left = 0;
    // Stop tokens are suppressed in the installed policy until min_new_tokens
    // have been delivered.
    bool suppressing_stops = false;
    // Set for a generation with a GenConfig::constraint.
    std::unique_ptr<ConstrainedDecoding> constrained;
    // Set for a generation with GenConfig::stop_strings: fed every delivered
    // token's bytes (RunnerOptions::token_bytes).
    std::optional<StopMatcher> stop_strings;
    GenerationMetrics metrics;
    bool first_token = false;
    MetricsClock::time_point last_delivery;
    std::uint64_t last_counted_step = 0;
  };
  struct SessionRecord {
    std::shared_ptr<SessionState> state;
    Position position = 0;
    std::optional<Token> pending;  // delivered but not yet fed back
    bool poisoned = false;
    std::shared_ptr<Generation> active;
  };
  // What the engine remembers about a dispatched task once its input moved
  // into the batch.
  struct Slot {
    SessionId sid = 0;
    bool is_decode = false;
    bool produce_output = false;
    std::size_t size = 0;
    Position end = 0;
    std::uint64_t generation = 0;
  };

  // A request on the engine thread (engine_requests.cpp).
  struct ChoiceRun {
    SessionId sid = 0;  // 0: no session (not started, or closed)
    bool started = false;
    bool finished = false;
    FinishReason reason = FinishReason::kCancelled;
    std::shared_ptr<GenerationState> state;
  };
  struct RequestRun {
    std::shared_ptr<RequestControl> control;
    Request request;
    RequestCallbacks callbacks;
    MetricsClock::time_point t_submit;
    std::vector<ChoiceRun> choices;
    RequestUsage usage;
    bool committed = false;  // choice 0 delivered: the prompt is in its session
    bool captured = false;   // the prompt snapshot was taken (or skipped)
    std::int32_t next_clone = 1;
    std::string failure;  // choice 0's error, given to choices that never start
  };
  // Engine-thread LRU of prompt snapshots (sessions in sessions_).
  struct Snapshot {
    std::vector<Token> tokens;
    SessionId sid = 0;
  };

  void handle_(RequestCommand& c, bool running);
  // Admits waiting requests in order while sessions can be had.
  void admit_requests_();
  // Captures, fans out, closes finished choices' sessions and reports done.
  void advance_requests_();
  // Every request ends (engine stopping): unstarted choices end kCancelled.
  void abandon_requests_();
  bool advance_(RequestRun& run);
  void start_choice_(RequestRun& run, std::int32_t choice, SessionId sid, std::vector<Token> delta);
  void end_unstarted_(RequestRun& run, std::int32_t choice, FinishReason reason,
                      const std::string& error);
  void report_done_(RequestRun& run);
  // The snapshot cache: a clone of the best entry for `prompt` (its match
  // length in *matched), or nullopt.
  std::optional<SessionId> cache_lookup_(const std::vector<Token>& prompt, std::size_t* matched);
  void cache_insert_(std::vector<Token> tokens, SessionId sid);
  bool cache_evict_one_();
  // Synchronous session primitives of the engine thread.
  std::optional<SessionId> open_session_();
  std::optional<SessionId> clone_session_(SessionId sid, Position upto);
  void close_session_(SessionId sid);

  void run_();
  void drain_commands_(bool running);
  void handle_(OpenCommand& c, bool running);
  void handle_(CloseCommand& c, bool running);
  void handle_(CloneCommand& c, bool running);
  void handle_(StartCommand& c, bool running);
  void handle_(AcceptsCommand& c, bool running);
  void reap_();
  bool step_();
  void fail_batch_(const std::vector<Slot>& slots, const std::string& message);
  void handle_output_(const Slot& slot, const std::optional<Output>& output);
  bool submit_tasks_(Generation& gen, std::vector<Task> tasks);
  Task make_task_(const Generation& gen, Input input, bool is_decode);
  // Ends `gen`: detaches it from its session (if installed), drops its queued
  // tasks, delivers the terminal update, publishes, then runs on_settled.
  void finish_(const std::shared_ptr<Generation>& gen, FinishReason reason,
               std::vector<Token> tokens, std::string error, bool notify = true,
               std::vector<TokenLogprobs> logprobs = {},
               std::optional<StopStringMatch> stop_match = std::nullopt);
  void count_completion_(const Generation& gen, FinishReason reason);
  void stop_path_();
  void publish_metrics_();
  Session make_session_(const std::shared_ptr<SessionState>& state);

  Executor& executor_;
  const std::unique_ptr<Scheduler> scheduler_;

  // Inbox and stop flag.
  mutable std::mutex inbox_mu_;
  std::condition_variable inbox_cv_;
  std::deque<Command> inbox_;
  bool accepting_ = true;
  std::atomic<bool> stop_requested_{false};
  std::atomic<InitializationState> init_state_{InitializationState::kPending};

  std::mutex join_mu_;
  std::thread thread_;
  std::atomic<std::thread::id> engine_thread_id_{};

  mutable std::mutex metrics_mu_;
  EngineMetrics published_;

  // Engine-thread state.
  const RunnerOptions options_;
  std::deque<std::shared_ptr<RequestRun>> waiting_requests_;
  std::vector<std::shared_ptr<RequestRun>> active_requests_;
  std::list<Snapshot> snapshots_;  // front = most recently used
  std::atomic<std::int64_t> cache_size_{0};
  EngineMetrics em_;
  std::unordered_map<SessionId, SessionRecord> sessions_;
  std::unordered_map<TaskId, std::uint64_t> task_owner_;  // queued task -> generation
  TaskId next_tid_ = 1;
  std::uint64_t next_generation_ = 1;
  std::uint64_t step_count_ = 0;
};

}  // namespace cellm::detail
