// GatedExecutor: wraps a real Executor and forwards every call, but can park
// execute() before it runs (hold / allow / release), so a test decides which
// work shares a batch instead of sleeping. It records each batch's sessions.
//
// Thread-safety: the gate and the records take an internal mutex (the test
// thread drives the gate while the engine thread executes); the Executor
// methods themselves are engine-thread only, like the wrapped executor's.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <optional>
#include <vector>

#include "cellm/executor.h"

namespace cellm::testing {

// Forwards to a real executor; execute() can be parked (hold/allow/release)
// so a test forces which work shares a batch instead of sleeping.
class GatedExecutor final : public Executor {
 public:
  explicit GatedExecutor(Executor& inner) : inner_(inner) {}

  void hold() {
    std::lock_guard lock(mu_);
    held_ = true;
    permits_ = 0;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // Lets the next n executes through while staying held.
  void allow(std::size_t n = 1) {
    {
      std::lock_guard lock(mu_);
      permits_ += n;
    }
    cv_.notify_all();
  }
  // Waits until n executes have started.
  bool wait_for_executes(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return batches_.size() >= n; });
  }
  // The sessions of each executed batch, in input order.
  std::vector<std::vector<SessionId>> batches() const {
    std::lock_guard lock(mu_);
    return batches_;
  }

  bool initialize() override { return inner_.initialize(); }
  std::size_t preferred_batch_tokens() const override { return inner_.preferred_batch_tokens(); }
  std::optional<SessionId> open_session() override { return inner_.open_session(); }
  void close_session(SessionId session) override { inner_.close_session(session); }
  std::optional<SessionId> clone(SessionId source, Position upto) override {
    return inner_.clone(source, upto);
  }
  void set_sampling(SessionId session, const SamplingParams& params,
                    std::optional<std::uint64_t> seed) override {
    inner_.set_sampling(session, params, seed);
  }
  bool accepts(const PreparedInput& input) const override { return inner_.accepts(input); }
  bool execute(const BatchInput& batch, BatchOutput& out) override {
    {
      std::unique_lock lock(mu_);
      std::vector<SessionId> sids;
      for (const Input& in : batch.inputs) sids.push_back(in.sid);
      batches_.push_back(std::move(sids));
      cv_.notify_all();
      cv_.wait(lock, [&] { return !held_ || permits_ > 0; });
      if (held_) --permits_;
    }
    return inner_.execute(batch, out);
  }

 private:
  Executor& inner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  std::size_t permits_ = 0;
  std::vector<std::vector<SessionId>> batches_;
};

}  // namespace cellm::testing
