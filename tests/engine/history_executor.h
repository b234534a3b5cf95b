// HistoryExecutor: each prediction hashes the session's whole committed
// history (and seed), so restoring the wrong prefix changes every later token.
// `retained_tail` imitates windowed retention: a clone must start no more
// than that many positions before the session's end.
//
// Thread-safety: an internal mutex; knobs may be set from the test thread.
#pragma once

#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <vector>

#include "cellm/executor.h"

namespace cellm::testing {

class HistoryExecutor : public Executor {
 public:
  void set_capacity(std::size_t n) {
    std::lock_guard l(mu_);
    capacity_ = n;
  }
  void set_retained_tail(std::optional<std::size_t> n) {
    std::lock_guard l(mu_);
    tail_ = n;
  }
  void set_clone_bad_alloc(bool v) {
    std::lock_guard l(mu_);
    bad_alloc_ = v;
  }
  std::size_t live_sessions() const {
    std::lock_guard l(mu_);
    return history_.size();
  }
  std::size_t clone_calls() const {
    std::lock_guard l(mu_);
    return clone_sources_.size();
  }
  std::vector<SessionId> clone_sources() const {
    std::lock_guard l(mu_);
    return clone_sources_;
  }
  std::vector<Token> history(SessionId sid) const {
    std::lock_guard l(mu_);
    auto it = history_.find(sid);
    return it == history_.end() ? std::vector<Token>{} : it->second;
  }

  std::optional<SessionId> open_session() override {
    std::lock_guard l(mu_);
    if (history_.size() >= capacity_) return std::nullopt;
    history_[next_] = {};
    return next_++;
  }
  void close_session(SessionId sid) override {
    std::lock_guard l(mu_);
    history_.erase(sid);
  }
  std::optional<SessionId> clone(SessionId source, Position upto) override {
    std::lock_guard l(mu_);
    clone_sources_.push_back(source);
    if (bad_alloc_) throw std::bad_alloc();
    auto it = history_.find(source);
    if (it == history_.end() || upto < 0 || static_cast<std::size_t>(upto) > it->second.size()) {
      return std::nullopt;
    }
    if (tail_ && it->second.size() - static_cast<std::size_t>(upto) > *tail_) return std::nullopt;
    if (history_.size() >= capacity_) return std::nullopt;
    history_[next_] = std::vector<Token>(it->second.begin(), it->second.begin() + upto);
    return next_++;
  }
  void set_sampling(SessionId sid, const SamplingParams&,
                    std::optional<std::uint64_t> seed) override {
    std::lock_guard l(mu_);
    seed_[sid] = seed.value_or(0);
  }
  bool execute(const BatchInput& batch, BatchOutput& out) override {
    std::lock_guard l(mu_);
    for (const Input& in : batch.inputs) {
      auto it = history_.find(in.sid);
      if (it == history_.end()) return false;
    }
    out.outputs.assign(batch.inputs.size(), std::nullopt);
    for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
      const Input& in = batch.inputs[i];
      auto& h = history_[in.sid];
      const std::size_t start = static_cast<std::size_t>(in.position) + in.offset;
      if (start > h.size()) return false;
      h.resize(start);
      const auto& tokens = *std::get<TokenInputPtr>(in.payload);
      h.insert(h.end(), tokens.begin() + static_cast<std::ptrdiff_t>(in.offset),
               tokens.begin() + static_cast<std::ptrdiff_t>(in.offset + in.size));
      if (!in.produce_output) continue;
      std::uint64_t x = 1469598103934665603ull ^ seed_[in.sid];
      for (Token t : h) x = (x ^ t) * 1099511628211ull;
      out.outputs[i] = Output{in.sid, {x % 50000}};
    }
    return true;
  }

 private:
  mutable std::mutex mu_;
  std::size_t capacity_ = 16;
  std::optional<std::size_t> tail_;
  bool bad_alloc_ = false;
  SessionId next_ = 1;
  std::map<SessionId, std::vector<Token>> history_;
  std::map<SessionId, std::uint64_t> seed_;
  std::vector<SessionId> clone_sources_;
};

}  // namespace cellm::testing
