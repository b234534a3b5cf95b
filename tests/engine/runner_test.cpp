// Runner: handles, settlement order, synchronous rejections, generation
// options (budget, stop tokens, sampling, seeds) and callback exceptions.
#include <gtest/gtest.h>

#include <future>
#include <stdexcept>
#include <thread>

#include "core/clock.h"
#include "engine/runner_fixture.h"

namespace cellm::testing {
namespace {

using RunnerTest = RunnerFixture;

TEST(GenerationHandleTest, DefaultHandleIsInvalid) {
  GenerationHandle h;
  EXPECT_FALSE(h.valid());
  EXPECT_FALSE(h.done());
  EXPECT_FALSE(h.finish_reason().has_value());
  EXPECT_EQ(h.error_message(), "");
  EXPECT_EQ(h.metrics().n_generated_tokens, 0);
  h.cancel();  // no-op
  h.wait();    // returns at once
}

TEST(GenerationHandleTest, MoveTransfersValidity) {
  Session s;  // default: rejected inline, but the handle is still real
  GenerationHandle a = s.generate_async(std::vector<Token>{1}, budget(1), {});
  ASSERT_TRUE(a.valid());
  GenerationHandle b = std::move(a);
  EXPECT_TRUE(b.valid());
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  GenerationHandle c = b;   // copies share the outcome
  EXPECT_TRUE(c.done());
  EXPECT_EQ(c.finish_reason(), FinishReason::kFailed);
}

TEST_F(RunnerTest, SettlementPublishesBeforeNotificationAndReleasesCaptures) {
  Session s = open();
  auto capture = std::make_shared<int>(7);
  std::weak_ptr<int> watch = capture;
  std::atomic<int> settled{0};
  std::atomic<bool> terminal_returned{false};
  GenerationHandle handle;
  std::mutex mu;
  bool checks_ok = false;
  {
    std::lock_guard lock(mu);  // keep the settle callback from reading handle too early
    handle = s.generate_async(
        std::vector<Token>{1, 2}, budget(1),
        [&, capture](const GenerationUpdate& u) {
          if (u.finish_reason) terminal_returned.store(true);
        },
        [&, capture] {
          std::lock_guard lock(mu);
          checks_ok = terminal_returned.load() && handle.done() &&
                      handle.finish_reason() == FinishReason::kNewTokenLimit &&
                      handle.metrics().n_prompt_tokens == 2 &&
                      handle.metrics().n_generated_tokens == 1 &&
                      handle.metrics().n_prefill_steps == 1;
          settled.fetch_add(1);
        });
  }
  capture.reset();
  handle.wait();
  ASSERT_TRUE(wait_until([&] { return settled.load() == 1; }));
  std::lock_guard lock(mu);
  EXPECT_TRUE(checks_ok);
  runner->shutdown();
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(settled.load(), 1);
}

TEST_F(RunnerTest, SettlementWaitDoesNotWaitForTheNotification) {
  Session s = open();
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::atomic<bool> notified{false};
  auto h = s.generate_async(std::vector<Token>{1}, budget(1), {}, [gate, &notified] {
    gate.wait();  // parks the engine thread until the test has seen wait() return
    notified.store(true);
  });
  auto waiter = std::async(std::launch::async, [h] { h.wait(); });
  const bool returned = waiter.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  const bool notified_before = notified.load();
  go.set_value();
  EXPECT_TRUE(returned);
  EXPECT_FALSE(notified_before);
  EXPECT_TRUE(h.done());
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_TRUE(wait_until([&] { return notified.load(); }));
}

// A callable small enough for std::function's inline buffer whose destructor
// reads the handle: it must find the generation already done.
struct DoneProbe {
  std::shared_ptr<GenerationHandle> handle;
  std::shared_ptr<std::atomic<int>> seen_done;
  void operator()(const GenerationUpdate&) const {}
  DoneProbe(const DoneProbe&) = default;
  DoneProbe(std::shared_ptr<GenerationHandle> h, std::shared_ptr<std::atomic<int>> d)
      : handle(std::move(h)), seen_done(std::move(d)) {}
  ~DoneProbe() {
    if (handle && seen_done && handle->valid() && handle->done()) seen_done->fetch_add(1);
  }
};

TEST_F(RunnerTest, SmallCallbackDestructionCanReenterDone) {
  Session s = open();
  auto holder = std::make_shared<GenerationHandle>();
  auto seen = std::make_shared<std::atomic<int>>(0);
  std::atomic<bool> settled{false};
  *holder = s.generate_async(std::vector<Token>{1}, budget(1), DoneProbe(holder, seen),
                             [&] { settled.store(true); });
  holder->wait();
  ASSERT_TRUE(wait_until([&] { return settled.load(); }));
  // The engine released its copy after settling, while done() was true, and
  // done() did not deadlock from inside the destructor.
  ASSERT_TRUE(wait_until([&] { return seen->load() >= 1; }));
}

TEST_F(RunnerTest, SynchronousRejectionsNotifyInlineAndReleaseCaptures) {
  start();
  const auto caller = std::this_thread::get_id();
  {
    Session none;
    Collector c;
    std::thread::id settled_on;
    auto h = none.generate_async(std::vector<Token>{1}, budget(1), c.on_update(),
                                 [&] { settled_on = std::this_thread::get_id(); });
    EXPECT_TRUE(h.done());
    EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
    EXPECT_EQ(h.error_message(), "session is not initialized");
    ASSERT_EQ(c.count(), 1u);
    EXPECT_EQ(c.thread(0), caller);
    EXPECT_EQ(settled_on, caller);
  }
  Session s = open();
  runner->shutdown();
  EXPECT_FALSE(s.valid());
  auto capture = std::make_shared<int>(1);
  std::weak_ptr<int> watch = capture;
  Collector c;
  int order = 0, update_at = -1, settled_at = -1;
  auto h = s.generate_async(
      std::vector<Token>{1}, budget(1),
      [&, capture](const GenerationUpdate& u) {
        update_at = order++;
        c.on_update()(u);
      },
      [&, capture] { settled_at = order++; });
  capture.reset();
  EXPECT_TRUE(h.done());
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(h.error_message(), "");
  EXPECT_EQ(update_at, 0);
  EXPECT_EQ(settled_at, 1);
  EXPECT_EQ(c.last().finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE(watch.expired());
}

TEST_F(RunnerTest, ReportsStopAndExecutorFailureAfterPublication) {
  exec.set_stop(999, 0);
  Session s = open();
  Collector c;
  GenConfig cfg = budget(5);
  cfg.stop_tokens = {999};
  auto h = run(s, {1, 2}, cfg, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kStopToken);
  EXPECT_EQ(h.metrics().n_generated_tokens, 1);
  EXPECT_TRUE(stamped(h.metrics().t_end));
  EXPECT_EQ(c.tokens(), (std::vector<Token>{999}));

  exec.set_fail_batches_from(exec.batches().size());
  Session t = open();
  Collector d;
  auto f = run(t, {1, 2}, budget(5), d);
  EXPECT_EQ(f.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(f.error_message(), "executor failed to execute the batch");
  EXPECT_EQ(f.metrics().n_generated_tokens, 0);
  EXPECT_TRUE(stamped(f.metrics().t_end));
  EXPECT_EQ(d.terminal_count(), 1);
}

enum class EndBy { kCancel, kDropSession, kShutdown };

class EndFromCallbackTest : public RunnerFixture, public ::testing::WithParamInterface<EndBy> {};

TEST_P(EndFromCallbackTest, CancellationClosureAndShutdownNotifyExactlyOnce) {
  auto s = std::make_unique<Session>(open());
  Collector c;
  GenerationHandle handle;
  std::mutex mu;
  std::unique_lock lock(mu);
  handle = s->generate_async(
      std::vector<Token>{1, 2}, budget(10),
      [&](const GenerationUpdate& u) {
        c.on_update()(u);
        if (u.finish_reason) return;
        std::lock_guard l(mu);
        switch (GetParam()) {
          case EndBy::kCancel: handle.cancel(); break;
          case EndBy::kDropSession: s.reset(); break;
          case EndBy::kShutdown: runner->shutdown(); break;
        }
      },
      c.on_settled());
  lock.unlock();
  handle.wait();
  EXPECT_EQ(handle.finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(handle.metrics().n_generated_tokens, 1);
  EXPECT_EQ(c.terminal_count(), 1);
  EXPECT_TRUE(wait_until([&] { return c.settled() == 1; }));
  runner->shutdown();
  EXPECT_EQ(c.settled(), 1);
}

INSTANTIATE_TEST_SUITE_P(Ends, EndFromCallbackTest,
                         ::testing::Values(EndBy::kCancel, EndBy::kDropSession, EndBy::kShutdown));

TEST_F(RunnerTest, UpdateExceptionsPublishFailureBeforeNotification) {
  Session s = open();
  std::atomic<int> calls{0};
  std::atomic<bool> published_at_settle{false};
  GenerationHandle h;
  std::mutex mu;
  {
    std::lock_guard lock(mu);
    h = s.generate_async(
        std::vector<Token>{1}, budget(5),
        [&](const GenerationUpdate&) {
          calls.fetch_add(1);
          throw std::runtime_error("update failed");
        },
        [&] {
          std::lock_guard lock(mu);
          published_at_settle.store(h.done() && h.finish_reason() == FinishReason::kFailed);
        });
  }
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "update failed");
  EXPECT_EQ(calls.load(), 1);
  runner->shutdown();
  EXPECT_TRUE(published_at_settle.load());
}

TEST_F(RunnerTest, NotificationExceptionsAreContainedAndCapturesReleased) {
  Session s = open();
  auto capture = std::make_shared<int>(3);
  std::weak_ptr<int> watch = capture;
  auto h = s.generate_async(std::vector<Token>{1}, budget(1), {},
                            [capture] { throw std::runtime_error("settle failed"); });
  capture.reset();
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  Collector c;
  auto next = run(s, {5}, budget(2), c);
  EXPECT_EQ(next.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_TRUE(wait_until([&] { return watch.expired(); }));

  Session none;
  auto inline_h = none.generate_async(
      std::vector<Token>{1}, budget(1),
      [](const GenerationUpdate&) { throw std::runtime_error("inline update failed"); },
      [] { throw 5; });
  EXPECT_TRUE(inline_h.done());
  EXPECT_EQ(inline_h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(inline_h.error_message(), "inline update failed");
}

TEST(SessionTest, DefaultSessionRejectsGenerationSynchronously) {
  Session s;
  EXPECT_FALSE(s.valid());
  EXPECT_EQ(s.position(), 0);
  Collector c;
  auto h = s.generate_async(std::vector<Token>{1, 2}, budget(3), c.on_update(), c.on_settled());
  EXPECT_TRUE(h.done());
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "session is not initialized");
  EXPECT_EQ(c.count(), 1u);
  EXPECT_EQ(c.last().error_message, "session is not initialized");
  EXPECT_EQ(c.settled(), 1);
  EXPECT_FALSE(s.clone_async(0).get().has_value());
}

TEST(SessionTest, SynchronousCallbackExceptionIsContained) {
  Session s;
  std::atomic<int> settled{0};
  auto h = s.generate_async(
      std::vector<Token>{1}, budget(1),
      [](const GenerationUpdate&) { throw std::logic_error("boom"); }, [&] { ++settled; });
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "boom");
  EXPECT_EQ(settled.load(), 1);
}

TEST(SessionTest, NonStandardCallbackExceptionUsesFallbackMessage) {
  Session s;
  auto h =
      s.generate_async(std::vector<Token>{1}, budget(1), [](const GenerationUpdate&) { throw 17; });
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "generation callback threw a non-standard exception");
}

TEST_F(RunnerTest, SessionDestructionClosesThroughTheEngineThread) {
  SessionId sid;
  {
    Session s = open();
    sid = s.id();
    EXPECT_TRUE(s.valid());
  }
  EXPECT_TRUE(wait_until([&] { return exec.closed() == std::vector<SessionId>{sid}; }));
}

TEST_F(RunnerTest, SessionMoveTransfersOwnershipAndRejectsTheSource) {
  Session a = open();
  const SessionId sid = a.id();
  Session b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(b.id(), sid);
  auto h = a.generate_async(std::vector<Token>{1}, budget(1), {});
  EXPECT_EQ(h.error_message(), "session is not initialized");
  Collector c;
  EXPECT_EQ(run(b, {1}, budget(1), c).finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_TRUE(exec.closed().empty());
  Session other = open();
  b = std::move(other);  // the old session of b is closed
  EXPECT_TRUE(wait_until([&] { return exec.closed() == std::vector<SessionId>{sid}; }));
}

TEST_F(RunnerTest, SessionCapacityRefusalIsReported) {
  exec.set_capacity(2);
  Session a = open();
  Session b = open();
  EXPECT_FALSE(runner->open_session_async().get().has_value());
  runner->shutdown();
  EXPECT_EQ(runner->metrics().sessions_refused, 1);
}

TEST_F(RunnerTest, SessionDestructionCancelsActiveGenerationWithoutWaiting) {
  auto s = std::make_unique<Session>(open());
  exec.hold();
  Collector c;
  auto h = s->generate_async(std::vector<Token>{1, 2}, budget(100), c.on_update(), c.on_settled());
  ASSERT_TRUE(exec.wait_for_executes(1));
  s.reset();  // must not block although execute() is held
  EXPECT_FALSE(h.done());
  exec.release();
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
}

TEST_F(RunnerTest, SessionDestroyingASessionEndsItsGeneration) {
  auto s = std::make_unique<Session>(open());
  Collector c;
  auto h = s->generate_async(std::vector<Token>{1}, budget(1000000), c.on_update());
  ASSERT_TRUE(wait_until([&] { return c.count() >= 3; }));
  const SessionId sid = s->id();
  s.reset();
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_TRUE(wait_until([&] { return exec.closed() == std::vector<SessionId>{sid}; }));
}

TEST_F(RunnerTest, GenerationSeedIsSetBeforeTasksExecute) {
  Session s = open();
  GenConfig cfg = budget(2);
  cfg.seed = 1234;
  Collector c;
  run(s, {1, 2, 3}, cfg, c);
  auto calls = exec.sampling();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].seed, std::optional<std::uint64_t>(1234));
  EXPECT_EQ(calls[0].executes_before, 0u);
  // Seeded draws: sid*1000 + something below 1000, reproducible.
  for (Token t : c.tokens()) EXPECT_EQ(t / 1000, static_cast<Token>(s.id()));
}

TEST_F(RunnerTest, GenerationSamplingPolicyIsInstalledOnTheSession) {
  Session s = open();
  GenConfig cfg = budget(1);
  cfg.sampling = SamplingParams{0.7f, 0.8f, 9};
  Collector c;
  run(s, {1}, cfg, c);
  auto calls = exec.sampling();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].sid, s.id());
  EXPECT_EQ(calls[0].params, (SamplingParams{0.7f, 0.8f, 9}));
}

TEST_F(RunnerTest, GenerationWaitBlocksUntilTerminalCallbackReturns) {
  Session s = open();
  std::atomic<bool> returned{false};
  auto h = s.generate_async(std::vector<Token>{1}, budget(1), [&](const GenerationUpdate& u) {
    if (!u.finish_reason) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    returned.store(true);
  });
  h.wait();
  EXPECT_TRUE(returned.load());
}

TEST_F(RunnerTest, GenerationNonterminalCallbackExceptionFailsOnlyItsGeneration) {
  Session a = open();
  Session b = open();
  auto ha = a.generate_async(std::vector<Token>{1}, budget(5), [](const GenerationUpdate& u) {
    if (!u.finish_reason) throw std::runtime_error("a broke");
  });
  Collector c;
  auto hb = b.generate_async(std::vector<Token>{1}, budget(5), c.on_update());
  ha.wait();
  hb.wait();
  EXPECT_EQ(ha.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(ha.error_message(), "a broke");
  EXPECT_EQ(hb.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(c.tokens().size(), 5u);
  // Not poisoned: the failing session still works.
  Collector d;
  EXPECT_EQ(run(a, {2}, budget(1), d).finish_reason(), FinishReason::kNewTokenLimit);
}

TEST_F(RunnerTest, GenerationCallbackExceptionWinsWhenCallbackRequestsShutdown) {
  Session s = open();
  auto h = s.generate_async(std::vector<Token>{1}, budget(5), [&](const GenerationUpdate& u) {
    if (u.finish_reason) return;
    runner->shutdown();
    throw std::runtime_error("after shutdown");
  });
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "after shutdown");
}

TEST_F(RunnerTest, GenerationCallbackExceptionWinsOverExternalShutdown) {
  Session s = open();
  auto h = s.generate_async(std::vector<Token>{1}, budget(5), [&](const GenerationUpdate& u) {
    if (u.finish_reason) throw std::runtime_error("terminal threw");
  });
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    runner->shutdown();
  });
  h.wait();
  stopper.join();
  // Whichever way it ended (limit or shutdown), the terminal callback threw.
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "terminal threw");
}

TEST_F(RunnerTest, GenerationTerminalCallbackExceptionFailsOnlyItsGeneration) {
  Session s = open();
  auto h = s.generate_async(std::vector<Token>{1}, budget(2), [](const GenerationUpdate& u) {
    if (u.finish_reason) throw std::runtime_error("at the end");
  });
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "at the end");
  EXPECT_EQ(h.metrics().n_generated_tokens, 2);
  Collector c;
  EXPECT_EQ(run(s, {3}, budget(1), c).finish_reason(), FinishReason::kNewTokenLimit);
}

TEST_F(RunnerTest, GenerationNullSeedInitializesNondeterministicSamplingState) {
  Session s = open();
  Collector c;
  run(s, {1}, budget(1), c);
  auto calls = exec.sampling();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_FALSE(calls[0].seed.has_value());
  EXPECT_TRUE(exec.has_sampling_state(s.id()));
}

TEST_F(RunnerTest, GenerationRejectsNonPositiveTokenBudgetWithMessage) {
  Session s = open();
  for (std::int64_t n : {0, -3}) {
    Collector c;
    auto h = run(s, {1}, budget(n), c);
    EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
    EXPECT_EQ(h.error_message(), "max_new_tokens must be greater than zero");
  }
  EXPECT_TRUE(exec.batches().empty());
  EXPECT_TRUE(exec.sampling().empty());
  EXPECT_EQ(s.position(), 0);
}

TEST_F(RunnerTest, GenerationRefusesAMinimumOverMoreStopTokensThanCanBeSuppressed) {
  Session s = open();
  GenConfig crowded = budget(5);
  crowded.min_new_tokens = 2;
  for (Token t = 300; t < 300 + static_cast<Token>(kMaxSuppressedTokens) + 1; ++t) {
    crowded.stop_tokens.push_back(t);
  }
  const Status status = check_gen_config(crowded);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  const std::string message(status.message());
  EXPECT_NE(message.find("min_new_tokens 2"), std::string::npos) << message;
  EXPECT_NE(message.find("at most 8"), std::string::npos) << message;
  EXPECT_NE(message.find("has 9"), std::string::npos) << message;
  Collector c;
  auto h = run(s, {1, 2}, crowded, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), message);
  EXPECT_TRUE(c.tokens().empty());
  // Nothing was taken: no step, no policy, the session where it was.
  EXPECT_TRUE(exec.batches().empty());
  EXPECT_TRUE(exec.sampling().empty());
  EXPECT_EQ(s.position(), 0);

  // Without a minimum the same stop tokens are fine (nothing is suppressed).
  GenConfig plain = crowded;
  plain.min_new_tokens = 0;
  EXPECT_TRUE(check_gen_config(plain).is_ok());
  // Repeats take no room: 8 distinct ids listed twice fit.
  GenConfig repeated = budget(3);
  repeated.min_new_tokens = 1;
  for (int round = 0; round < 2; ++round) {
    for (Token t = 300; t < 300 + static_cast<Token>(kMaxSuppressedTokens); ++t) {
      repeated.stop_tokens.push_back(t);
    }
  }
  EXPECT_TRUE(check_gen_config(repeated).is_ok());
  Collector ok;
  auto h2 = run(s, {1, 2}, repeated, ok);
  EXPECT_EQ(h2.finish_reason(), FinishReason::kNewTokenLimit) << h2.error_message();
  EXPECT_EQ(ok.tokens().size(), 3u);
  ASSERT_FALSE(exec.sampling().empty());
  EXPECT_EQ(exec.sampling().front().params.suppressed_count, kMaxSuppressedTokens);
}

TEST_F(RunnerTest, GenerationRefusesAMinimumWhenTheExecutorCannotSuppressTokens) {
  exec.set_can_suppress_tokens(false);
  Session s = open();
  GenConfig minimum = budget(4);
  minimum.min_new_tokens = 2;
  minimum.stop_tokens = {300, 301};
  ASSERT_TRUE(check_gen_config(minimum).is_ok());  // only this executor refuses it
  // The same rule, told the capability: refused; without stop tokens or a
  // minimum nothing needs suppressing.
  const Status refused = check_gen_config(minimum, /*can_suppress_tokens=*/false);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(refused.message()).find("device sampler takes no suppressed ids"),
            std::string::npos)
      << refused.to_string();
  GenConfig stopless = minimum;
  stopless.stop_tokens.clear();
  EXPECT_TRUE(check_gen_config(stopless, false).is_ok());
  GenConfig no_minimum = minimum;
  no_minimum.min_new_tokens = 0;
  EXPECT_TRUE(check_gen_config(no_minimum, false).is_ok());
  const EngineMetrics before = runner->metrics();
  Collector c;
  auto h = run(s, {1, 2}, minimum, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  const std::string message = h.error_message();
  EXPECT_NE(message.find("min_new_tokens 2"), std::string::npos) << message;
  EXPECT_NE(message.find("min_tokens"), std::string::npos) << message;
  EXPECT_NE(message.find("device sampler takes no suppressed ids"), std::string::npos) << message;
  EXPECT_TRUE(c.tokens().empty());
  EXPECT_EQ(h.metrics().n_generated_tokens, 0);
  // Nothing was taken: no step, no policy, the session where it was and free
  // for the next generation.
  EXPECT_TRUE(exec.batches().empty());
  EXPECT_TRUE(exec.sampling().empty());
  EXPECT_EQ(s.position(), 0);
  ASSERT_TRUE(
      wait_until([&] { return runner->metrics().finished_failed == before.finished_failed + 1; }));
  const EngineMetrics after = runner->metrics();
  EXPECT_EQ(after.steps, before.steps);
  EXPECT_EQ(after.steps_failed, before.steps_failed);
  EXPECT_EQ(after.total_prompt_tokens, before.total_prompt_tokens);
  EXPECT_EQ(after.total_generated_tokens, before.total_generated_tokens);
  EXPECT_EQ(after.prefill_tokens_total, before.prefill_tokens_total);

  // Without a minimum the same stop tokens run (nothing is suppressed) ...
  GenConfig plain = minimum;
  plain.min_new_tokens = 0;
  Collector ok;
  auto h2 = run(s, {1, 2}, plain, ok);
  EXPECT_EQ(h2.finish_reason(), FinishReason::kNewTokenLimit) << h2.error_message();
  EXPECT_EQ(ok.tokens().size(), 4u);
  ASSERT_EQ(exec.sampling().size(), 1u);
  EXPECT_EQ(exec.sampling().back().params.suppressed_count, 0u);
  // ... and so does a minimum with no stop token to suppress.
  GenConfig no_stops = budget(3);
  no_stops.min_new_tokens = 3;
  Collector ok2;
  auto h3 = run(s, {5}, no_stops, ok2);
  EXPECT_EQ(h3.finish_reason(), FinishReason::kNewTokenLimit) << h3.error_message();
  EXPECT_EQ(ok2.tokens().size(), 3u);

  // The same minimum on an executor that can suppress runs with the ids installed.
  exec.set_can_suppress_tokens(true);
  const std::size_t policies = exec.sampling().size();
  ASSERT_EQ(policies, 2u);
  Collector ok3;
  auto h4 = run(s, {6}, minimum, ok3);
  EXPECT_EQ(h4.finish_reason(), FinishReason::kNewTokenLimit) << h4.error_message();
  EXPECT_EQ(ok3.tokens().size(), 4u);
  ASSERT_GT(exec.sampling().size(), policies);
  EXPECT_EQ(exec.sampling()[policies].params.suppressed_count, 2u);
}

TEST_F(RunnerTest, ReportsWhetherItsExecutorCanSuppressTokens) {
  exec.set_can_suppress_tokens(false);
  start();
  EXPECT_FALSE(runner->can_suppress_tokens());
  // It agrees with what the engine then does with a minimum.
  Session s = open();
  GenConfig minimum = budget(3);
  minimum.min_new_tokens = 1;
  minimum.stop_tokens = {300};
  Collector c;
  auto h = run(s, {1}, minimum, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_TRUE(exec.batches().empty());

  FakeExecutor capable;
  Runner other(capable, DecodeFirstScheduler::create(20, 4, 8));
  EXPECT_TRUE(other.can_suppress_tokens());
  other.shutdown();
}

TEST(RunnerCapabilityTest, AnExecutorThatThrowsWhenAskedCannotSuppress) {
  class Throwing final : public FakeExecutor {
   public:
    bool can_suppress_tokens() const override { throw std::runtime_error("no sampler metadata"); }
  } exec;
  Runner runner(exec, DecodeFirstScheduler::create(20, 4, 8));
  EXPECT_FALSE(runner.can_suppress_tokens());
  // The runner still works for everything else.
  auto s = runner.open_session_async().get();
  ASSERT_TRUE(s.has_value());
  Collector c;
  auto h = s->generate_async(std::vector<Token>{1, 2}, budget(2), c.on_update(), c.on_settled());
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit) << h.error_message();
  s.reset();
  runner.shutdown();
}

TEST(GenConfigTest, CheckNamesTheFieldThatIsWrong) {
  EXPECT_TRUE(check_gen_config(budget(1)).is_ok());
  EXPECT_EQ(check_gen_config(budget(0)).message(), "max_new_tokens must be greater than zero");
  GenConfig above = budget(4);
  above.min_new_tokens = 5;
  EXPECT_EQ(check_gen_config(above).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(check_gen_config(above).message()).find("min_new_tokens 5"),
            std::string::npos);
  GenConfig negative = budget(4);
  negative.min_new_tokens = -1;
  EXPECT_EQ(check_gen_config(negative).code(), StatusCode::kInvalidArgument);
  GenConfig full = budget(4);
  full.min_new_tokens = 4;
  full.stop_tokens.assign(kMaxSuppressedTokens, 9);
  EXPECT_TRUE(check_gen_config(full).is_ok());
}

TEST_F(RunnerTest, GenerationRejectsEmptyDeltaWithMessage) {
  Session s = open();
  Collector c;
  auto h = run(s, {}, budget(1), c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "generation delta must not be empty");
  EXPECT_TRUE(exec.batches().empty());
}

TEST_F(RunnerTest, GenerationActiveGenerationRejectsDuplicateWithoutReseeding) {
  Session s = open();
  exec.hold();
  GenConfig first = budget(3);
  first.seed = 12;
  Collector c;
  auto h1 = s.generate_async(std::vector<Token>{1}, first, c.on_update());
  ASSERT_TRUE(exec.wait_for_executes(1));
  GenConfig second = budget(3);
  second.seed = 99;
  Collector d;
  auto h2 = s.generate_async(std::vector<Token>{2}, second, d.on_update());
  exec.release();
  h2.wait();
  h1.wait();
  EXPECT_EQ(h2.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h2.error_message(), "session already has an active generation");
  EXPECT_EQ(h1.finish_reason(), FinishReason::kNewTokenLimit);
  auto calls = exec.sampling();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].seed, std::optional<std::uint64_t>(12));
}

TEST_F(RunnerTest, GenerationANewGenerationReseedsTheExistingSession) {
  Session s = open();
  GenConfig a = budget(1);
  a.seed = 1;
  GenConfig b = budget(1);
  b.seed = 2;
  Collector c, d;
  run(s, {1}, a, c);
  run(s, {2}, b, d);
  auto calls = exec.sampling();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].seed, std::optional<std::uint64_t>(1));
  EXPECT_EQ(calls[1].seed, std::optional<std::uint64_t>(2));
}

TEST_F(RunnerTest, GenerationStopTokenIsIncludedInUpdates) {
  exec.set_stop(999, 2);
  Session s = open();
  GenConfig cfg = budget(10);
  cfg.stop_tokens = {999};
  Collector c;
  auto h = run(s, {1, 2}, cfg, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kStopToken);
  const SessionId sid = s.id();
  EXPECT_EQ(c.tokens(), (std::vector<Token>{Token(sid * 1000 + 1), Token(sid * 1000 + 2), 999}));
  EXPECT_EQ(c.last().tokens, (std::vector<Token>{999}));
  EXPECT_EQ(c.terminal_count(), 1);
}

TEST_F(RunnerTest, GenerationImmediateStopTokenIsDeliveredAndWinsOverBudget) {
  exec.set_stop(999, 0);
  Session s = open();
  GenConfig cfg = budget(1);
  cfg.stop_tokens = {999};
  Collector c;
  auto h = run(s, {1, 2, 3}, cfg, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kStopToken);
  EXPECT_EQ(c.tokens(), (std::vector<Token>{999}));
  EXPECT_EQ(exec.batches().size(), 1u);
}

TEST_F(RunnerTest, BudgetEndsWithNewTokenLimitAndDeliversEveryToken) {
  Session s = open();
  Collector c;
  auto h = run(s, {4, 5}, budget(4), c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  const Token base = static_cast<Token>(s.id() * 1000);
  EXPECT_EQ(c.tokens(), (std::vector<Token>{base + 1, base + 2, base + 3, base + 4}));
  EXPECT_EQ(c.count(), 4u);
  // Everything delivered is in the context: 2 prompt + 3 committed + 1 pending.
  EXPECT_EQ(s.position(), 5);
  EXPECT_EQ(exec.history(s.id()), (std::vector<Token>{4, 5, base + 1, base + 2, base + 3}));
}

}  // namespace
}  // namespace cellm::testing
