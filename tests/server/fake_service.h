// FakeService: a GenerationService with a byte-level "model" for testing the
// HTTP layer without a runner. Token ids 0..255 are bytes, 256 is BOS, 257 is
// EOS. Each choice of a job replies with a scripted text, one token per step
// on its own thread, then EOS (or, with ignore_eos, the filler 'x' forever)
// until max_new_tokens, ending early on a stop string as the engine would; knobs hold the first token or start() itself, fail a
// choice, slow the steps, refuse start() and set what it reports (stop
// tokens, whether it can suppress them). Records what it was asked (start()
// calls, admission requests) and cancellations.
//
// Thread-safety: every member is safe from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/stop_matcher.h"
#include "server/generation_service.h"

namespace cellm::server::testing {

inline constexpr Token kBos = 256;
inline constexpr Token kEos = 257;

struct FakeKnobs {
  std::int32_t context = 64;
  std::int32_t max_sequences = 4;
  std::chrono::milliseconds step{1};
  // Text of choice i; default "Hello world! #i".
  std::function<std::string(const GenerationSpec&, std::int32_t)> reply;
  std::optional<std::int32_t> fail_after;  // tokens before a kFailed end
  std::optional<Status> start_error;
  bool prefix_caching = false;
  std::vector<Token> stop_tokens = {kEos};  // what stop_tokens() reports
  bool can_suppress_tokens = true;          // what can_suppress_tokens() reports
  std::int64_t cached_tokens = 0;
  ToolFormat tool_format = ToolFormat::kNone;  // what tool_format() reports
};

class FakeService : public GenerationService {
 public:
  using Knobs = FakeKnobs;

  explicit FakeService(Knobs knobs = {}) : knobs_(std::move(knobs)) {}

  // ---- knobs and records ----
  void hold() {
    std::lock_guard lock(mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // start() waits inside itself while held (a request caught between its
  // admission and its registration as a running generation).
  void hold_start() {
    std::lock_guard lock(mu_);
    start_held_ = true;
  }
  void release_start() {
    {
      std::lock_guard lock(mu_);
      start_held_ = false;
    }
    cv_.notify_all();
  }
  int starts_waiting() const { return starts_waiting_.load(); }
  // Every start() call, refused ones included.
  int start_calls() const { return start_calls_.load(); }
  std::vector<GenerationSpec> specs() const {
    std::lock_guard lock(mu_);
    return specs_;
  }
  int live_jobs() const { return live_jobs_.load(); }
  int cancelled_choices() const { return cancelled_.load(); }
  // Waits until `pred` holds (polling); false on timeout.
  static bool eventually(const std::function<bool()>& pred,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return pred();
  }

  // ---- GenerationService ----
  std::string model_name() const override { return "fake-model"; }
  std::int32_t context_length() const override { return knobs_.context; }
  std::int32_t vocab_size() const override { return 258; }
  std::int32_t max_sequences() const override { return knobs_.max_sequences; }
  bool prefix_caching() const override { return knobs_.prefix_caching; }
  std::vector<Token> stop_tokens() const override { return knobs_.stop_tokens; }
  bool can_suppress_tokens() const override { return knobs_.can_suppress_tokens; }
  ToolFormat tool_format() const override { return knobs_.tool_format; }

  Result<std::vector<Token>> tokenize(std::string_view text, bool add_special) const override {
    std::vector<Token> ids;
    if (add_special) ids.push_back(kBos);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  Result<std::string> render_chat(const nlohmann::ordered_json& messages,
                                  const nlohmann::ordered_json& extra,
                                  bool add_generation_prompt) const override {
    std::string out;
    for (const auto& m : messages) {
      const std::string content = m.value("content", "");
      if (content == "BREAK_TEMPLATE") return invalid_argument("template raised an exception");
      out += m.value("role", "") + ": " + content + "\n";
    }
    if (extra.contains("tools")) out += "tools: " + extra["tools"].dump() + "\n";
    if (add_generation_prompt) out += "assistant: ";
    return out;
  }
  std::string detokenize(std::span<const Token> tokens) const override {
    std::string out;
    for (Token t : tokens) {
      if (t < 256) out += static_cast<char>(t);
    }
    return out;
  }
  std::unique_ptr<TokenTextStream> text_stream() const override {
    struct Bytes : TokenTextStream {
      std::string push(Token t) override {
        return t < 256 ? std::string(1, static_cast<char>(t)) : "";
      }
      std::string finish() override { return {}; }
    };
    return std::make_unique<Bytes>();
  }
  Result<std::unique_ptr<GenerationJob>> start(const GenerationSpec& spec,
                                               EventSink sink) override {
    start_calls_ += 1;
    if (knobs_.start_error) return *knobs_.start_error;
    {
      std::unique_lock lock(mu_);
      starts_waiting_ += 1;
      cv_.wait(lock, [&] { return !start_held_; });
      starts_waiting_ -= 1;
      specs_.push_back(spec);
    }
    return std::unique_ptr<GenerationJob>(new Job(this, spec, std::move(sink)));
  }
  ServiceStats stats() const override { return {live_jobs_.load() * 10, 1000}; }

  std::string reply_for(const GenerationSpec& spec, std::int32_t choice) const {
    if (knobs_.reply) return knobs_.reply(spec, choice);
    return "Hello world! #" + std::to_string(choice);
  }

 private:
  class Job : public GenerationJob {
   public:
    Job(FakeService* svc, GenerationSpec spec, EventSink sink)
        : svc_(svc),
          spec_(std::move(spec)),
          sink_(std::move(sink)),
          cancel_(static_cast<std::size_t>(spec_.n)) {
      svc_->live_jobs_ += 1;
      for (auto& c : cancel_) c.store(false);
      thread_ = std::thread([this] { run(); });
    }
    ~Job() override {
      for (std::size_t i = 0; i < cancel_.size(); ++i) cancel_choice(static_cast<std::int32_t>(i));
      svc_->cv_.notify_all();
      thread_.join();
      svc_->live_jobs_ -= 1;
      // The fake lets go of everything once its thread has ended.
      if (release_) release_();
    }
    void after_release(std::function<void()> fn) override { release_ = std::move(fn); }
    void cancel_choice(std::int32_t choice) override {
      if (choice >= 0 && static_cast<std::size_t>(choice) < cancel_.size()) {
        cancel_[static_cast<std::size_t>(choice)].store(true);
      }
    }
    std::int64_t cached_tokens() const override { return svc_->knobs_.cached_tokens; }

   private:
    void emit(std::int32_t choice, std::vector<Token> tokens, std::optional<FinishReason> finish,
              std::string error = {}, std::optional<StopStringMatch> stop = std::nullopt) {
      sink_(ChoiceEvent{choice, std::move(tokens), finish, std::move(error),
                        std::chrono::steady_clock::now(), {}, stop});
    }
    void run() {
      {
        std::unique_lock lock(svc_->mu_);
        svc_->cv_.wait(lock, [&] { return !svc_->held_ || any_cancelled(); });
      }
      std::vector<std::string> replies;
      for (std::int32_t i = 0; i < spec_.n; ++i) replies.push_back(svc_->reply_for(spec_, i));
      std::vector<std::int64_t> produced(replies.size(), 0);
      std::vector<bool> done(replies.size(), false);
      // Stop strings as the engine matches them (GenConfig::stop_strings):
      // over the bytes, with the min_tokens rule.
      std::vector<StopMatcher> stops;
      for (std::size_t i = 0; i < replies.size(); ++i) {
        Result<StopMatcher> m = StopMatcher::create(spec_.stop_strings);
        if (!m.ok()) m = StopMatcher::create({});
        stops.push_back(std::move(m).value());
      }
      std::size_t live = replies.size();
      while (live > 0) {
        std::this_thread::sleep_for(svc_->knobs_.step);
        for (std::size_t i = 0; i < replies.size(); ++i) {
          if (done[i]) continue;
          const auto c = static_cast<std::int32_t>(i);
          if (cancel_[i].load()) {
            svc_->cancelled_ += 1;
            emit(c, {}, FinishReason::kCancelled);
          } else if (svc_->knobs_.fail_after && produced[i] == *svc_->knobs_.fail_after) {
            emit(c, {}, FinishReason::kFailed, "fake executor failure");
          } else {
            const auto k = static_cast<std::size_t>(produced[i]);
            Token t = k < replies[i].size() ? static_cast<unsigned char>(replies[i][k])
                                            : (spec_.ignore_eos ? Token('x') : kEos);
            produced[i] += 1;
            std::optional<FinishReason> finish;
            std::optional<StopStringMatch> stop;
            const std::string bytes = t < 256 ? std::string(1, static_cast<char>(t)) : "";
            StopMatcher& m = stops[i];
            if (produced[i] <= spec_.min_new_tokens) {
              m.ignore_matches_ending_by(m.bytes_pushed() + bytes.size());
            }
            if (t == kEos) {
              finish = FinishReason::kStopToken;
            } else if (m.push(bytes).stopped) {
              finish = FinishReason::kStopString;
              stop = StopStringMatch{m.stop_index(), static_cast<std::int64_t>(m.match_offset()),
                                     static_cast<std::int64_t>(m.bytes_pushed())};
            } else if (produced[i] >= spec_.max_new_tokens) {
              finish = FinishReason::kNewTokenLimit;
            }
            emit(c, {t}, finish, {}, stop);
            if (!finish) continue;
          }
          done[i] = true;
          live -= 1;
        }
      }
    }
    bool any_cancelled() const {
      for (const auto& c : cancel_) {
        if (c.load()) return true;
      }
      return false;
    }

    FakeService* svc_;
    GenerationSpec spec_;
    std::function<void()> release_;
    EventSink sink_;
    std::vector<std::atomic<bool>> cancel_;
    std::thread thread_;
  };

  Knobs knobs_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  bool start_held_ = false;
  std::atomic<int> starts_waiting_{0};
  std::atomic<int> start_calls_{0};
  std::vector<GenerationSpec> specs_;
  std::atomic<int> live_jobs_{0};
  std::atomic<int> cancelled_{0};
};

}  // namespace cellm::server::testing
