// FakeExecutor: a scriptable Executor for runner tests. It keeps each
// session's committed history exactly as the executor contract says (slices
// commit, outputs commit all but their last token, lower starts rewind, gaps
// fail the batch), records every call, and emits predictable tokens
// (sid * 1000 + n, or seeded pseudo-random ones).
//
// Thread-safety: every member takes the internal mutex; the engine thread calls
// the Executor methods while the test thread sets knobs and reads records.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cellm/executor.h"

namespace cellm::testing {

// A prepared backing whose positions are known tokens (so the fake can record
// what it consumed). suffix() returns a view over the same token storage, as
// the PreparedInput contract asks.
class FakePrepared final : public PreparedInput {
 public:
  explicit FakePrepared(std::vector<Token> tokens, std::size_t reported_size = 0)
      : tokens_(std::make_shared<const std::vector<Token>>(std::move(tokens))),
        size_(reported_size ? reported_size : tokens_->size()) {}
  static const void* static_kind() {
    static const char tag = 0;
    return &tag;
  }
  const void* kind() const override { return static_kind(); }
  std::size_t size() const override { return size_; }
  std::shared_ptr<const PreparedInput> suffix(std::size_t start) const override {
    if (start >= size_) return nullptr;
    return std::shared_ptr<const FakePrepared>(
        new FakePrepared(tokens_, start_ + start, size_ - start));
  }
  // The positions this view covers (a reported size larger than the storage
  // is only metadata and is never executed).
  std::span<const Token> tokens() const {
    const std::size_t begin = std::min(start_, tokens_->size());
    const std::size_t end = std::min(start_ + size_, tokens_->size());
    return std::span<const Token>(tokens_->data() + begin, end - begin);
  }
  // The storage shared by every view of one backing.
  const void* storage() const { return tokens_.get(); }

 private:
  FakePrepared(std::shared_ptr<const std::vector<Token>> tokens, std::size_t start,
               std::size_t size)
      : tokens_(std::move(tokens)), start_(start), size_(size) {}
  std::shared_ptr<const std::vector<Token>> tokens_;
  std::size_t start_ = 0;
  std::size_t size_;
};

// Another kind of prepared input, which no FakeExecutor accepts.
class OtherPrepared final : public PreparedInput {
 public:
  explicit OtherPrepared(std::size_t size) : size_(size) {}
  const void* kind() const override {
    static const char tag = 0;
    return &tag;
  }
  std::size_t size() const override { return size_; }
  std::shared_ptr<const PreparedInput> suffix(std::size_t start) const override {
    return start < size_ ? std::make_shared<OtherPrepared>(size_ - start) : nullptr;
  }

 private:
  std::size_t size_;
};

class FakeExecutor : public Executor {
 public:
  struct InputRecord {
    SessionId sid;
    bool produce_output;
    std::size_t offset;
    std::size_t size;
    Position position;
    bool prepared;
    std::vector<Token> slice;
    const void* payload = nullptr;  // the object the input pointed at
  };
  struct SamplingRecord {
    SessionId sid;
    SamplingParams params;
    std::optional<std::uint64_t> seed;
    std::size_t executes_before;
  };

  template <typename F>
  auto locked(F f) const -> decltype(f()) {
    std::lock_guard lock(mu_);
    return f();
  }

  // ---- knobs (set from the test thread) ----
  void set_capacity(std::size_t n) {
    locked([&] { capacity_ = n; });
  }
  void set_fail_batches_from(std::size_t execute_index) {
    locked([&] { fail_from_ = execute_index; });
  }
  // The (n+1)-th token generated for any session is `stop`.
  void set_stop(Token stop, int emit_before_stop) {
    locked([&] {
      stop_token_ = stop;
      emit_before_stop_ = emit_before_stop;
    });
  }
  void set_tokens_per_decode(std::size_t n) {
    locked([&] { per_decode_ = n; });
  }
  void set_tokens_per_prefill(std::size_t n) {
    locked([&] { per_prefill_ = n; });
  }
  void set_empty_tokens(bool v) {
    locked([&] { empty_tokens_ = v; });
  }
  void set_wrong_sid(bool v) {
    locked([&] { wrong_sid_ = v; });
  }
  void set_output_for_every_input(bool v) {
    locked([&] { output_for_all_ = v; });
  }
  void set_short_output(bool v) {
    locked([&] { short_output_ = v; });
  }
  void set_accept_prepared(bool v) {
    locked([&] { accept_prepared_ = v; });
  }
  void set_clone_supported(bool v) {
    locked([&] { clone_supported_ = v; });
  }
  void set_clone_throws(bool v) {
    locked([&] { clone_throws_ = v; });
  }
  // Plays an executor whose device sampler takes no suppressed ids.
  void set_can_suppress_tokens(bool v) {
    locked([&] { can_suppress_ = v; });
  }
  void set_init(bool result, bool throws = false, bool non_standard = false,
                std::chrono::milliseconds delay = {}) {
    locked([&] {
      init_result_ = result;
      init_throws_ = throws;
      init_non_standard_ = non_standard;
      init_delay_ = delay;
    });
  }
  // initialize() blocks until release(), so a test can act while the
  // runner's initialization is certainly still pending.
  void hold_init() {
    locked([&] { init_held_ = true; });
  }
  // While held, execute() blocks after recording its batch.
  void hold() {
    locked([&] {
      held_ = true;
      permits_ = 0;
    });
  }
  void release() {
    locked([&] {
      held_ = false;
      init_held_ = false;
    });
    cv_.notify_all();
  }
  // Stays held but lets the next `n` executes through (a parked one first):
  // a test can then park exactly the step after the one it let go.
  void allow(std::size_t n = 1) {
    locked([&] { permits_ += n; });
    cv_.notify_all();
  }
  // Waits until `n` executes have started (recorded).
  bool wait_for_executes(std::size_t n,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return batches_.size() >= n; });
  }

  // Waits until an execute is parked by hold(): unlike counting batches, this
  // cannot miss a step that was recorded between hold() and the count.
  bool wait_until_blocked(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return blocked_ > 0; });
  }

  // ---- records ----
  std::vector<std::vector<InputRecord>> batches() const {
    return locked([&] { return batches_; });
  }
  std::vector<SamplingRecord> sampling() const {
    return locked([&] { return sampling_; });
  }
  std::vector<SessionId> opened() const {
    return locked([&] { return opened_; });
  }
  std::vector<SessionId> closed() const {
    return locked([&] { return closed_; });
  }
  std::vector<std::pair<SessionId, Position>> clone_calls() const {
    return locked([&] { return clone_calls_; });
  }
  std::size_t init_calls() const {
    return locked([&] { return init_calls_; });
  }
  std::size_t calls_before_init() const {
    return locked([&] { return calls_before_init_; });
  }
  std::vector<Token> history(SessionId sid) const {
    return locked([&] {
      auto it = history_.find(sid);
      return it == history_.end() ? std::vector<Token>{} : it->second;
    });
  }
  std::size_t live_sessions() const {
    return locked([&] { return history_.size(); });
  }
  bool has_sampling_state(SessionId sid) const {
    return locked([&] { return policy_.contains(sid); });
  }

  // ---- Executor ----
  bool initialize() override {
    std::chrono::milliseconds delay;
    bool result, throws, non_standard;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !init_held_; });
      ++init_calls_;
      delay = init_delay_;
      result = init_result_;
      throws = init_throws_;
      non_standard = init_non_standard_;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    if (throws) {
      if (non_standard) throw 42;
      throw std::runtime_error("initialize failed");
    }
    return result;
  }

  std::optional<SessionId> open_session() override {
    std::lock_guard lock(mu_);
    note_call();
    if (history_.size() >= capacity_) return std::nullopt;
    const SessionId sid = next_sid_++;
    history_[sid] = {};
    opened_.push_back(sid);
    return sid;
  }

  void close_session(SessionId session) override {
    std::lock_guard lock(mu_);
    note_call();
    if (history_.erase(session) > 0) closed_.push_back(session);
    policy_.erase(session);
  }

  std::optional<SessionId> clone(SessionId source, Position upto) override {
    std::lock_guard lock(mu_);
    note_call();
    clone_calls_.emplace_back(source, upto);
    if (clone_throws_) throw std::runtime_error("clone exploded");
    if (!clone_supported_) return std::nullopt;
    auto it = history_.find(source);
    if (it == history_.end() || upto < 0 || static_cast<std::size_t>(upto) > it->second.size() ||
        history_.size() >= capacity_) {
      return std::nullopt;
    }
    const SessionId sid = next_sid_++;
    history_[sid] = std::vector<Token>(it->second.begin(), it->second.begin() + upto);
    opened_.push_back(sid);
    return sid;
  }

  void set_sampling(SessionId session, const SamplingParams& params,
                    std::optional<std::uint64_t> seed) override {
    std::lock_guard lock(mu_);
    note_call();
    if (!history_.contains(session)) return;
    sampling_.push_back({session, params, seed, batches_.size()});
    policy_[session] = seed ? std::mt19937_64(*seed) : std::mt19937_64(std::random_device{}());
    seeded_[session] = seed.has_value();
    logprobs_[session] = params.logprobs;
  }

  bool can_suppress_tokens() const override {
    std::lock_guard lock(mu_);
    return can_suppress_;
  }

  bool accepts(const PreparedInput& input) const override {
    std::lock_guard lock(mu_);
    return accept_prepared_ && input.kind() == FakePrepared::static_kind();
  }

  bool execute(const BatchInput& batch, BatchOutput& out) override {
    std::unique_lock lock(mu_);
    note_call();
    const std::size_t index = batches_.size();
    std::vector<InputRecord> record;
    for (const Input& in : batch.inputs) {
      InputRecord r{in.sid, in.produce_output, in.offset, in.size, in.position, false, {}};
      if (const auto* tokens = std::get_if<TokenInputPtr>(&in.payload)) {
        r.payload = tokens->get();
        r.slice.assign((*tokens)->begin() + static_cast<std::ptrdiff_t>(in.offset),
                       (*tokens)->begin() + static_cast<std::ptrdiff_t>(in.offset + in.size));
      } else {
        r.prepared = true;
        r.payload = std::get<PreparedInputPtr>(in.payload).get();
        const auto& p = static_cast<const FakePrepared&>(*std::get<PreparedInputPtr>(in.payload));
        r.slice.assign(p.tokens().begin() + static_cast<std::ptrdiff_t>(in.offset),
                       p.tokens().begin() + static_cast<std::ptrdiff_t>(in.offset + in.size));
      }
      record.push_back(std::move(r));
    }
    batches_.push_back(record);
    if (held_ && permits_ == 0) ++blocked_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !held_ || permits_ > 0; });
    if (held_) --permits_;
    blocked_ = 0;
    if (fail_from_ && index >= *fail_from_) return false;

    // Validate the whole batch first (a refused batch changes nothing).
    std::map<SessionId, std::size_t> length;
    for (const InputRecord& r : record) {
      auto it = history_.find(r.sid);
      if (it == history_.end()) return false;
      const std::size_t start = static_cast<std::size_t>(r.position) + r.offset;
      const std::size_t have = length.contains(r.sid) ? length[r.sid] : it->second.size();
      if (start > have) return false;  // a gap
      length[r.sid] = start + r.size;
    }
    out.outputs.assign(batch.inputs.size(), std::nullopt);
    for (std::size_t i = 0; i < record.size(); ++i) {
      const InputRecord& r = record[i];
      auto& h = history_[r.sid];
      h.resize(static_cast<std::size_t>(r.position) + r.offset);
      h.insert(h.end(), r.slice.begin(), r.slice.end());
      if (!r.produce_output && !output_for_all_) continue;
      // A one-token raw slice feeding back the last emitted token is a decode.
      const bool decode =
          r.size == 1 && !r.prepared && last_out_.contains(r.sid) && last_out_[r.sid] == r.slice[0];
      const std::size_t n = decode ? per_decode_ : per_prefill_;
      Output o;
      o.sid = wrong_sid_ ? r.sid + 100 : r.sid;
      if (!empty_tokens_) {
        for (std::size_t k = 0; k < n; ++k) o.tokens.push_back(next_token(r.sid));
      }
      // A policy asking for logprobs gets one entry per token, its value
      // derived from the token so a test can tell entries apart.
      if (logprobs_.contains(r.sid) && logprobs_[r.sid] >= 0) {
        for (Token t : o.tokens) {
          o.logprobs.push_back(TokenLogprobs{t, -static_cast<float>(t % 97) / 8.0f, {{t, 0.0f}}});
        }
      }
      // All but the last output token are committed.
      if (!o.tokens.empty()) {
        h.insert(h.end(), o.tokens.begin(), o.tokens.end() - 1);
        last_out_[r.sid] = o.tokens.back();
      }
      out.outputs[i] = std::move(o);
    }
    if (short_output_) out.outputs.pop_back();
    return true;
  }

 private:
  void note_call() {
    if (init_calls_ == 0) ++calls_before_init_;
  }
  Token next_token(SessionId sid) {
    const int n = ++generated_[sid];
    if (stop_token_ && n == emit_before_stop_ + 1) return *stop_token_;
    if (seeded_.contains(sid) && seeded_[sid])
      return static_cast<Token>(sid * 1000) + policy_[sid]() % 1000;
    return static_cast<Token>(sid * 1000 + n);
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::size_t capacity_ = 8;
  std::optional<std::size_t> fail_from_;
  std::optional<Token> stop_token_;
  int emit_before_stop_ = 0;
  std::size_t per_decode_ = 1;
  std::size_t per_prefill_ = 1;
  bool empty_tokens_ = false;
  bool wrong_sid_ = false;
  bool output_for_all_ = false;
  bool short_output_ = false;
  bool accept_prepared_ = false;
  bool clone_supported_ = true;
  bool clone_throws_ = false;
  bool can_suppress_ = true;
  bool init_result_ = true;
  bool init_throws_ = false;
  bool init_non_standard_ = false;
  std::chrono::milliseconds init_delay_{0};
  bool held_ = false;
  bool init_held_ = false;
  std::size_t permits_ = 0;  // executes allow() lets through while held
  int blocked_ = 0;          // executes parked by hold(); reset when released
  std::size_t init_calls_ = 0;
  std::size_t calls_before_init_ = 0;
  SessionId next_sid_ = 1;
  std::map<SessionId, std::vector<Token>> history_;
  std::map<SessionId, std::mt19937_64> policy_;
  std::map<SessionId, bool> seeded_;
  std::map<SessionId, std::int32_t> logprobs_;  // the installed policy's count
  std::map<SessionId, int> generated_;
  std::map<SessionId, Token> last_out_;
  std::vector<std::vector<InputRecord>> batches_;
  std::vector<SamplingRecord> sampling_;
  std::vector<SessionId> opened_;
  std::vector<SessionId> closed_;
  std::vector<std::pair<SessionId, Position>> clone_calls_;
};

}  // namespace cellm::testing
