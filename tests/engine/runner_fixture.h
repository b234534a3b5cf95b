// Shared pieces of the runner tests: an update collector and a fixture that
// runs a Runner over a FakeExecutor with DecodeFirstScheduler(20, 4, 8).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "engine/fake_executor.h"

namespace cellm::testing {

// Records what a generation's callbacks saw. Thread-safe; the callbacks share
// its state, so they stay valid even if they run after the Collector is gone.
class Collector {
 public:
  GenerationCallback on_update() {
    return [d = d_](const GenerationUpdate& u) {
      std::lock_guard lock(d->mu);
      d->updates.push_back(u);
      d->threads.push_back(std::this_thread::get_id());
    };
  }
  SettledCallback on_settled() {
    return [d = d_] { d->settled.fetch_add(1); };
  }
  int settled() const { return d_->settled.load(); }
  std::vector<Token> tokens() const {
    std::lock_guard lock(d_->mu);
    std::vector<Token> all;
    for (const auto& u : d_->updates) all.insert(all.end(), u.tokens.begin(), u.tokens.end());
    return all;
  }
  std::size_t count() const {
    std::lock_guard lock(d_->mu);
    return d_->updates.size();
  }
  std::vector<GenerationUpdate> updates() const {
    std::lock_guard lock(d_->mu);
    return d_->updates;
  }
  std::thread::id thread(std::size_t i) const {
    std::lock_guard lock(d_->mu);
    return d_->threads.at(i);
  }
  int terminal_count() const {
    std::lock_guard lock(d_->mu);
    int n = 0;
    for (const auto& u : d_->updates) n += u.finish_reason.has_value() ? 1 : 0;
    return n;
  }
  GenerationUpdate last() const {
    std::lock_guard lock(d_->mu);
    return d_->updates.empty() ? GenerationUpdate{} : d_->updates.back();
  }

 private:
  struct Data {
    std::mutex mu;
    std::vector<GenerationUpdate> updates;
    std::vector<std::thread::id> threads;
    std::atomic<int> settled{0};
  };
  std::shared_ptr<Data> d_ = std::make_shared<Data>();
};

inline bool wait_until(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

inline GenConfig budget(std::int64_t n) {
  GenConfig c;
  c.max_new_tokens = n;
  return c;
}

class RunnerFixture : public ::testing::Test {
 protected:
  void start(std::size_t decodes = 4, std::size_t chunk = 8) {
    runner = std::make_unique<Runner>(
        exec, DecodeFirstScheduler::create(2 * chunk + decodes, decodes, chunk));
  }
  void start_with(std::unique_ptr<Scheduler> scheduler) {
    runner = std::make_unique<Runner>(exec, std::move(scheduler));
  }
  Session open() {
    if (!runner) start();
    auto s = runner->open_session_async().get();
    EXPECT_TRUE(s.has_value());
    return s ? std::move(*s) : Session();
  }
  // Runs one generation to the end and returns its handle.
  GenerationHandle run(Session& s, std::vector<Token> delta, GenConfig config, Collector& c) {
    const int settled = c.settled();
    auto h = s.generate_async(std::move(delta), std::move(config), c.on_update(), c.on_settled());
    h.wait();
    EXPECT_TRUE(wait_until([&] { return c.settled() > settled; }));
    return h;
  }
  // Parks the engine thread inside a held execute of a one-token request on
  // `gate`, so that everything submitted before exec.release() is queued when
  // the next batch forms. Tests use it instead of sleeping: the order is forced.
  GenerationHandle occupy_engine(Session& gate) {
    exec.hold();
    const std::size_t before = exec.batches().size();
    auto h = gate.generate_async(std::vector<Token>{7}, budget(1), [](const GenerationUpdate&) {});
    EXPECT_TRUE(exec.wait_for_executes(before + 1));
    return h;
  }
  void TearDown() override {
    exec.release();  // a test that failed while holding must not hang the shutdown
    if (runner) runner->shutdown();
  }

  FakeExecutor exec;  // declared first: outlives the runner
  std::unique_ptr<Runner> runner;
};

}  // namespace cellm::testing
