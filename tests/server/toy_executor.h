// ToyExecutor: a deterministic Executor for driving a real Runner in server
// tests. Each session keeps its committed history exactly as the executor
// contract says; the next token is a hash of the whole history (and of the
// seed when sampling is not greedy), mapped to a lower-case letter, or EOS
// (257) when the hash says so. A wrong prefix restore or a mixed-up clone
// therefore changes the output. A policy's suppressed ids are honoured as a
// sampler would: a suppressed EOS becomes a letter. Built with can_suppress
// false it reports what a device sampler without suppressed ids would, so
// the runner never installs such a policy. Records every executed input and
// every installed policy. hold() parks every execute() at a gate until
// release() or allow() (the test sees a step in flight); fail_outputs_of(t) makes every
// output of a session whose history begins with t invalid (no token), so
// that one generation fails inside the engine while the batch goes on.
//
// Thread-safety: Executor methods run on the engine thread; the records and
// knobs are used by the test thread under the mutexes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cellm/executor.h"
#include "cellm/runner.h"

namespace cellm::server::testing {

class ToyExecutor final : public Executor {
 public:
  static constexpr Token kEos = 257;

  struct Executed {
    SessionId sid;
    Position position;  // absolute position of the slice's first token
    std::size_t size;
  };

  struct PolicyChange {
    SessionId sid;
    SamplingParams params;
    std::optional<std::uint64_t> seed;
    std::size_t outputs_before;  // tokens the session had produced until then
  };

  explicit ToyExecutor(std::size_t max_sessions, std::uint64_t eos_every = 0,
                       bool can_suppress = true)
      : max_sessions_(max_sessions), eos_every_(eos_every), can_suppress_(can_suppress) {}

  // False plays a device sampler whose method takes no suppressed ids.
  bool can_suppress_tokens() const override { return can_suppress_; }

  std::optional<SessionId> open_session() override {
    std::lock_guard lock(mu_);
    if (sessions_.size() >= max_sessions_) return std::nullopt;
    const SessionId sid = next_id_++;
    sessions_[sid] = {};
    return sid;
  }
  void close_session(SessionId sid) override {
    std::lock_guard lock(mu_);
    sessions_.erase(sid);
  }
  std::optional<SessionId> clone(SessionId source, Position upto) override {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(source);
    if (it == sessions_.end() || upto < 0 ||
        static_cast<std::size_t>(upto) > it->second.history.size() ||
        sessions_.size() >= max_sessions_) {
      return std::nullopt;
    }
    const SessionId sid = next_id_++;
    State s;
    s.history.assign(it->second.history.begin(), it->second.history.begin() + upto);
    sessions_[sid] = std::move(s);
    return sid;
  }
  void set_sampling(SessionId sid, const SamplingParams& params,
                    std::optional<std::uint64_t> seed) override {
    std::lock_guard lock(mu_);
    auto it = sessions_.find(sid);
    if (it == sessions_.end()) return;
    it->second.greedy = params.temperature <= 0.0f;
    it->second.seed = seed.value_or(0x9e3779b97f4a7c15ULL);
    it->second.params = params;
    policies_.push_back({sid, params, seed, it->second.outputs});
  }
  bool execute(const BatchInput& batch, BatchOutput& out) override {
    {
      std::unique_lock gate(gate_mu_);
      ++arrivals_;
      gate_cv_.notify_all();
      gate_cv_.wait(gate, [&] { return !held_ || permits_ > 0; });
      if (held_) --permits_;
    }
    std::lock_guard lock(mu_);
    out.outputs.assign(batch.inputs.size(), std::nullopt);
    for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
      const Input& in = batch.inputs[i];
      auto it = sessions_.find(in.sid);
      const auto* tokens = std::get_if<TokenInputPtr>(&in.payload);
      if (it == sessions_.end() || tokens == nullptr || *tokens == nullptr) return false;
      State& s = it->second;
      const std::size_t start = static_cast<std::size_t>(in.position) + in.offset;
      if (start > s.history.size()) return false;  // a gap
      s.history.resize(start);                     // a lower start rewinds
      for (std::size_t k = 0; k < in.size; ++k) s.history.push_back((**tokens)[in.offset + k]);
      executed_.push_back({in.sid, static_cast<Position>(start), in.size});
      if (in.produce_output && fail_first_ && !s.history.empty() &&
          s.history.front() == *fail_first_) {
        out.outputs[i] = Output{in.sid, {}};  // invalid: an output holds a token
      } else if (in.produce_output) {
        out.outputs[i] = Output{in.sid, {next_token(s)}};
        ++s.outputs;
      }
    }
    return true;
  }

  // ---- knobs ----
  void hold() {
    std::lock_guard gate(gate_mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard gate(gate_mu_);
      held_ = false;
    }
    gate_cv_.notify_all();
  }
  // While held, lets `n` more execute() calls through the gate.
  void allow(int n) {
    {
      std::lock_guard gate(gate_mu_);
      permits_ += n;
    }
    gate_cv_.notify_all();
  }
  std::size_t arrivals() const {
    std::lock_guard gate(gate_mu_);
    return arrivals_;
  }
  // Waits (bounded) until `n` execute() calls in all have reached the gate;
  // while held and without permits, the n-th is then parked there.
  bool wait_arrivals(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock gate(gate_mu_);
    return gate_cv_.wait_for(gate, timeout, [&] { return arrivals_ >= n; });
  }
  void fail_outputs_of(Token first) {
    std::lock_guard lock(mu_);
    fail_first_ = first;
  }

  std::vector<PolicyChange> policies() const {
    std::lock_guard lock(mu_);
    return policies_;
  }
  std::vector<Executed> executed() const {
    std::lock_guard lock(mu_);
    return executed_;
  }
  std::size_t open_sessions() const {
    std::lock_guard lock(mu_);
    return sessions_.size();
  }
  // Total tokens executed (prefill and decode).
  std::size_t executed_tokens() const {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const Executed& e : executed_) n += e.size;
    return n;
  }

 private:
  struct State {
    std::vector<Token> history;
    bool greedy = true;
    std::uint64_t seed = 0;
    SamplingParams params;
    std::size_t outputs = 0;
  };
  Token next_token(const State& s) const {
    std::uint64_t h = 1469598103934665603ULL;
    for (Token t : s.history) h = (h ^ t) * 1099511628211ULL;
    if (!s.greedy) h = (h ^ s.seed) * 1099511628211ULL;
    h ^= h >> 29;
    if (eos_every_ > 0 && h % eos_every_ == 0 && !s.params.suppresses(kEos)) return kEos;
    return 'a' + (h % 26);
  }

  mutable std::mutex mu_;
  std::size_t max_sessions_;
  std::uint64_t eos_every_;
  const bool can_suppress_;
  SessionId next_id_ = 1;
  std::map<SessionId, State> sessions_;
  std::vector<Executed> executed_;
  std::vector<PolicyChange> policies_;
  std::optional<Token> fail_first_;
  mutable std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool held_ = false;
  int permits_ = 0;
  std::size_t arrivals_ = 0;
};

// The runner's byte table for the toy's tokens (RunnerOptions::token_bytes):
// ids 0..255 are one byte each; BOS (256) and EOS (257) have no text.
inline TokenBytesTable toy_token_bytes() {
  auto t = std::make_shared<std::vector<std::string>>(258);
  for (int b = 0; b < 256; ++b)
    (*t)[static_cast<std::size_t>(b)] = std::string(1, static_cast<char>(b));
  return t;
}

// RunnerOptions over the toy's byte table.
inline RunnerOptions toy_runner_options(std::int32_t prefix_cache_entries = 0) {
  RunnerOptions o;
  o.prefix_cache_entries = prefix_cache_entries;
  o.token_bytes = toy_token_bytes();
  return o;
}

}  // namespace cellm::server::testing
