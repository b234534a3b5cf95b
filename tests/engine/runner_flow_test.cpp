// Runner: clones, deltas and positions, failures and poisoning, multi-token
// (speculative) outputs, cancellation, shutdown and initialization.
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>

#include "core/clock.h"
#include "engine/runner_fixture.h"

namespace cellm::testing {
namespace {

using Tokens = std::vector<Token>;
using CloneTest = RunnerFixture;
using DeltaTest = RunnerFixture;
using FailureTest = RunnerFixture;
using SpeculativeTest = RunnerFixture;
using CancelTest = RunnerFixture;
using ShutdownTest = RunnerFixture;
using InitializeTest = RunnerFixture;

Token tok(SessionId sid, int n) {
  return static_cast<Token>(sid * 1000 + n);
}

// ---- clones ----

TEST_F(CloneTest, DefaultMovedFromAndClosedSessionsRefuseSynchronously) {
  Session none;
  EXPECT_FALSE(none.clone_async(0).get().has_value());
  Session a = open();
  Session b = std::move(a);
  EXPECT_FALSE(a.clone_async(0).get().has_value());  // NOLINT(bugprone-use-after-move)
  runner->shutdown();
  auto f = b.clone_async(0);
  EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_FALSE(f.get().has_value());
  EXPECT_TRUE(exec.clone_calls().empty());
}

TEST_F(CloneTest, DefaultExecutorRefusesWithoutPoisoningSource) {
  exec.set_clone_supported(false);
  Session s = open();
  Collector c;
  run(s, {1, 2, 3}, budget(1), c);
  EXPECT_FALSE(s.clone_async(2).get().has_value());
  Collector d;
  EXPECT_EQ(run(s, {4}, budget(1), d).finish_reason(), FinishReason::kNewTokenLimit);
}

TEST_F(CloneTest, CopiesOnlyCommittedPrefixAndStartsIdleWithoutSampling) {
  Session s = open();
  Collector c;
  run(s, {1, 2, 3, 4, 5, 6}, budget(1), c);
  ASSERT_EQ(s.position(), 6);
  auto child = s.clone_async(3).get();
  ASSERT_TRUE(child.has_value());
  EXPECT_EQ(child->position(), 3);
  EXPECT_EQ(exec.history(child->id()), (Tokens{1, 2, 3}));
  EXPECT_FALSE(exec.has_sampling_state(child->id()));
  Collector d;
  auto h = run(*child, {7, 8, 9, 10, 11}, budget(1), d);
  EXPECT_EQ(child->position(), 8);
  EXPECT_EQ(h.metrics().n_prompt_tokens, 5);
  EXPECT_EQ(h.metrics().n_prefilled_tokens, 5);
  EXPECT_EQ(s.position(), 6);
  EXPECT_EQ(exec.history(s.id()), (Tokens{1, 2, 3, 4, 5, 6}));
}

TEST_F(CloneTest, EmptyBoundaryIsDelegatedAndCloneCanBeCloned) {
  Session s = open();
  auto child = s.clone_async(0).get();
  ASSERT_TRUE(child.has_value());
  EXPECT_EQ(child->position(), 0);
  auto grandchild = child->clone_async(0).get();
  EXPECT_TRUE(grandchild.has_value());
  EXPECT_EQ(exec.clone_calls().size(), 2u);
}

TEST_F(CloneTest, RejectsNegativeFutureAndPendingTokenBoundaries) {
  Session s = open();
  Collector c;
  run(s, {1, 2, 3}, budget(1), c);  // position 3, one pending token
  for (Position upto : {-1, 4, std::numeric_limits<Position>::max()}) {
    EXPECT_FALSE(s.clone_async(upto).get().has_value()) << upto;
  }
  EXPECT_TRUE(exec.clone_calls().empty());
  EXPECT_TRUE(s.clone_async(3).get().has_value());
}

TEST_F(CloneTest, FirstOutputCallbackClonesBeforeNextForward) {
  Session s = open();
  std::future<std::optional<Session>> snapshot;
  std::size_t batches_at_first_output = 0;
  const Tokens prompt{1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto h = s.generate_async(prompt, budget(4), [&](const GenerationUpdate&) {
    if (snapshot.valid()) return;
    batches_at_first_output = exec.batches().size();
    snapshot = s.clone_async(9);
  });
  h.wait();
  auto child = snapshot.get();
  ASSERT_TRUE(child.has_value());
  EXPECT_EQ(exec.history(child->id()), prompt);
  EXPECT_EQ(batches_at_first_output, 1u);
}

TEST_F(CloneTest, TerminalCallbackCloneSurvivesImmediateSourceDestruction) {
  auto s = std::make_unique<Session>(open());
  std::future<std::optional<Session>> snapshot;
  auto h = s->generate_async(Tokens{1, 2}, budget(2), [&](const GenerationUpdate& u) {
    if (u.finish_reason) snapshot = s->clone_async(s->position());
  });
  h.wait();
  s.reset();
  auto child = snapshot.get();
  ASSERT_TRUE(child.has_value());
  EXPECT_EQ(child->position(), 3);
}

TEST_F(CloneTest, SpeculativeStatePastAcceptedPositionCannotBeCloned) {
  exec.set_tokens_per_prefill(4);
  Session s = open();
  Collector c;
  run(s, {1, 2, 3, 4}, budget(2), c);
  EXPECT_EQ(s.position(), 6);
  EXPECT_EQ(exec.history(s.id()).size(), 7u);
  EXPECT_FALSE(s.clone_async(7).get().has_value());
  EXPECT_TRUE(s.clone_async(6).get().has_value());
  EXPECT_TRUE(s.clone_async(4).get().has_value());
}

TEST_F(CloneTest, RefusalAndCapacityPressureLeaveSourceUsable) {
  exec.set_capacity(1);
  Session s = open();
  Collector c;
  run(s, {1, 2}, budget(1), c);
  EXPECT_FALSE(s.clone_async(1).get().has_value());
  Collector d;
  EXPECT_EQ(run(s, {3}, budget(2), d).finish_reason(), FinishReason::kNewTokenLimit);
}

TEST_F(CloneTest, ExecutorExceptionSettlesFutureAndKeepsEngineRunning) {
  exec.set_clone_throws(true);
  Session s = open();
  EXPECT_FALSE(s.clone_async(0).get().has_value());
  Collector c;
  EXPECT_EQ(run(s, {1}, budget(1), c).finish_reason(), FinishReason::kNewTokenLimit);
}

TEST_F(CloneTest, FailedOrMalformedExecutorStateIsNotCloned) {
  Session a = open();
  exec.set_empty_tokens(true);
  Collector c;
  EXPECT_EQ(run(a, {1, 2}, budget(1), c).finish_reason(), FinishReason::kFailed);
  EXPECT_FALSE(a.clone_async(1).get().has_value());
  exec.set_empty_tokens(false);
  Session b = open();
  exec.set_fail_batches_from(exec.batches().size());
  Collector d;
  EXPECT_EQ(run(b, {1, 2}, budget(1), d).finish_reason(), FinishReason::kFailed);
  EXPECT_FALSE(b.clone_async(0).get().has_value());
  EXPECT_TRUE(exec.clone_calls().empty());
}

TEST_F(CloneTest, CancelledPrefillExposesOnlyItsConsumedPrefix) {
  start_with(DecodeFirstScheduler::create(5, 1, 4));  // one 4-token chunk per batch
  Session s = open();
  exec.hold();
  Collector c;
  auto h = s.generate_async(Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, budget(3), c.on_update());
  ASSERT_TRUE(exec.wait_for_executes(1));
  h.cancel();
  exec.release();
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(s.position(), 4);
  EXPECT_TRUE(s.clone_async(4).get().has_value());
  EXPECT_FALSE(s.clone_async(8).get().has_value());
}

enum class StopBy { kCancel, kClose, kShutdown };
class CloneStopTest : public RunnerFixture, public ::testing::WithParamInterface<StopBy> {};

TEST_P(CloneStopTest, CloneCompletesIndependentlyUnlessRunnerStops) {
  auto s = std::make_unique<Session>(open());
  Collector c;
  exec.hold();
  auto h = s->generate_async(Tokens{1, 2, 3}, budget(100), c.on_update());
  ASSERT_TRUE(exec.wait_for_executes(1));
  auto f = s->clone_async(0);  // queued while the engine is inside execute()
  std::thread stopper;
  switch (GetParam()) {
    case StopBy::kCancel: h.cancel(); break;
    case StopBy::kClose: s.reset(); break;
    case StopBy::kShutdown:
      stopper = std::thread([&] { runner->shutdown(); });
      ASSERT_TRUE(wait_until([&] {
        return !s->clone_async(0).valid() ||
               s->clone_async(0).wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      }));
      break;
  }
  exec.release();
  auto child = f.get();
  if (stopper.joinable()) stopper.join();
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  if (GetParam() == StopBy::kShutdown) {
    EXPECT_FALSE(child.has_value());
    EXPECT_EQ(exec.live_sessions(), 0u);
  } else {
    ASSERT_TRUE(child.has_value());
    EXPECT_EQ(child->position(), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Stops, CloneStopTest,
                         ::testing::Values(StopBy::kCancel, StopBy::kClose, StopBy::kShutdown));

TEST_F(CloneTest, CallbackShutdownSettlesQueuedCloneWithoutCallingExecutor) {
  Session s = open();
  std::future<std::optional<Session>> f;
  auto h = s.generate_async(Tokens{1, 2}, budget(5), [&](const GenerationUpdate& u) {
    if (u.finish_reason || f.valid()) return;
    f = s.clone_async(2);
    runner->shutdown();
  });
  h.wait();
  runner->shutdown();
  ASSERT_TRUE(f.valid());
  EXPECT_FALSE(f.get().has_value());
  EXPECT_TRUE(exec.clone_calls().empty());
}

TEST_F(CloneTest, AbandonedFutureReleasesItsOwnedSession) {
  Session s = open();
  { auto f = s.clone_async(0); }
  EXPECT_TRUE(wait_until([&] { return exec.opened().size() == 2 && exec.closed().size() == 1; }));
  EXPECT_EQ(exec.live_sessions(), 1u);
}

// ---- deltas and positions ----

TEST_F(DeltaTest, FreshSessionStartsAtZero) {
  Session s = open();
  EXPECT_EQ(s.position(), 0);
  Collector c;
  run(s, {5, 6}, budget(1), c);
  auto batches = exec.batches();
  ASSERT_FALSE(batches.empty());
  EXPECT_EQ(batches[0][0].position, 0);
  EXPECT_EQ(batches[0][0].offset, 0u);
}

TEST_F(DeltaTest, ChunksUseDeltaBasePlusOffset) {
  start(4, 4);  // chunk 4, budget 12: all three chunks in one batch
  Session s = open();
  Collector c;
  run(s, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, budget(1), c);
  auto batches = exec.batches();
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].size(), 3u);
  const std::size_t offsets[] = {0, 4, 8}, sizes[] = {4, 4, 2};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(batches[0][i].position, 0);
    EXPECT_EQ(batches[0][i].offset, offsets[i]);
    EXPECT_EQ(batches[0][i].size, sizes[i]);
    EXPECT_EQ(batches[0][i].produce_output, i == 2);
  }
}

TEST_F(DeltaTest, SecondTurnContinuesWhereTheFirstEnded) {
  Session s = open();
  Collector c, d;
  run(s, {1, 2, 3}, budget(1), c);
  const Token pending = c.tokens().at(0);
  run(s, {7}, budget(1), d);
  auto batches = exec.batches();
  const auto& in = batches[1][0];
  EXPECT_EQ(in.position, 3);
  EXPECT_EQ(in.size, 2u);
  EXPECT_EQ(in.slice, (Tokens{pending, 7}));
  EXPECT_EQ(s.position(), 5);
}

TEST_F(DeltaTest, PositionIsPerSession) {
  Session a = open();
  Session b = open();
  Collector c, d;
  run(a, {1, 2, 3, 4}, budget(3), c);
  run(b, {1}, budget(1), d);
  EXPECT_EQ(a.position(), 6);
  EXPECT_EQ(b.position(), 1);
}

TEST_F(DeltaTest, GeneratedTokenFollowsTheDelta) {
  Session s = open();
  Collector c;
  run(s, {1, 2}, budget(2), c);
  auto batches = exec.batches();
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1][0].position, 2);
  EXPECT_EQ(batches[1][0].slice, (Tokens{tok(s.id(), 1)}));
}

TEST_F(DeltaTest, InvalidInitialRangesFailBeforeBeginning) {
  exec.set_accept_prepared(true);
  Session s = open();
  Collector c;
  run(s, {1}, budget(1), c);  // position 1 with a pending token
  const std::size_t max = static_cast<std::size_t>(std::numeric_limits<Position>::max());
  for (std::size_t size : {max - 1, max + 1}) {
    auto big = std::make_shared<FakePrepared>(Tokens{1}, size);
    Collector d;
    const int settled = d.settled();
    auto h = s.generate_async(PreparedInputPtr(big), budget(1), d.on_update(), d.on_settled());
    h.wait();
    EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
    EXPECT_TRUE(wait_until([&] { return d.settled() > settled; }));
  }
  EXPECT_EQ(exec.batches().size(), 1u);
  EXPECT_EQ(s.position(), 1);
}

TEST_F(DeltaTest, MalformedOutputFailsEvenWhenTheGenerationEnds) {
  exec.set_wrong_sid(true);
  Session s = open();
  Collector c;
  auto h = run(s, {1}, budget(1), c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "executor returned an invalid output");
  EXPECT_TRUE(c.last().tokens.empty());
}

TEST_F(DeltaTest, UnexpectedOutputForLeadingChunkFailsAndPoisonsSession) {
  exec.set_output_for_every_input(true);
  Session s = open();
  Collector c;
  auto h = run(s, Tokens(12, 3), budget(2), c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "executor returned an invalid output");
  exec.set_output_for_every_input(false);
  Collector d;
  auto next = run(s, {1}, budget(1), d);
  EXPECT_EQ(next.error_message(), "session cannot continue after an executor failure");
}

// How many executed inputs belong to `sid`, after a probe generation on
// another session has run to its end: anything `sid` still had queued would
// have been batched before or beside the probe's work.
std::size_t inputs_after_probe(FakeExecutor& exec, Session& probe, SessionId sid) {
  Collector c;
  probe.generate_async(Tokens{5}, budget(2), c.on_update()).wait();
  std::size_t n = 0;
  for (const auto& batch : exec.batches()) {
    for (const auto& in : batch) n += in.sid == sid ? 1 : 0;
  }
  return n;
}

TEST_F(DeltaTest, MalformedOutputFailsWithoutAnotherTask) {
  exec.set_empty_tokens(true);
  Session s = open();
  Session probe = open();
  Collector c;
  auto h = run(s, {1}, budget(5), c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  exec.set_empty_tokens(false);
  EXPECT_EQ(inputs_after_probe(exec, probe, s.id()), 1u);
}

TEST_F(DeltaTest, StopTokenSchedulesNothingFurther) {
  exec.set_stop(999, 1);
  Session s = open();
  Session probe = open();
  GenConfig cfg = budget(50);
  cfg.stop_tokens = {999};
  Collector c;
  auto h = run(s, {1}, cfg, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kStopToken);
  EXPECT_EQ(inputs_after_probe(exec, probe, s.id()), 2u);
}

// ---- failures ----

class RejectingScheduler final : public Scheduler {
 public:
  bool submit(std::vector<Task>) override { return false; }
  bool has_work() const override { return false; }
  std::vector<Task> get_work() override { return {}; }
  std::vector<Task> cancel(SessionId) override { return {}; }
  std::vector<Task> clear() override { return {}; }
  std::size_t max_prefill_chunk_size() const override { return 8; }
};

TEST_F(FailureTest, MalformedOutputRetiresTheSession) {
  exec.set_empty_tokens(true);
  Session s = open();
  Collector c;
  run(s, {1, 2}, budget(3), c);
  exec.set_empty_tokens(false);
  Collector d;
  EXPECT_EQ(run(s, {3}, budget(1), d).error_message(),
            "session cannot continue after an executor failure");
  EXPECT_FALSE(s.clone_async(0).get().has_value());
}

TEST_F(FailureTest, SchedulerRejectionEndsTheGeneration) {
  start_with(std::make_unique<RejectingScheduler>());
  Session s = open();
  Collector c;
  auto h = run(s, {1, 2}, budget(3), c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "scheduler rejected generation tasks");
}

// A DecodeFirstScheduler(20, 4, 8) that refuses every submit holding a
// decode of one session, and counts the submits it refused.
class DecodeRefusingScheduler final : public Scheduler {
 public:
  std::atomic<SessionId> refused{-1};
  std::atomic<int> refusals{0};

  bool submit(std::vector<Task> tasks) override {
    for (const Task& t : tasks) {
      if (t.is_decode && t.input.sid == refused.load()) {
        ++refusals;
        return false;
      }
    }
    return inner_->submit(std::move(tasks));
  }
  bool has_work() const override { return inner_->has_work(); }
  std::vector<Task> get_work() override { return inner_->get_work(); }
  std::vector<Task> cancel(SessionId s) override { return inner_->cancel(s); }
  std::vector<Task> clear() override { return inner_->clear(); }
  std::size_t max_prefill_chunk_size() const override { return inner_->max_prefill_chunk_size(); }

 private:
  std::unique_ptr<DecodeFirstScheduler> inner_ = DecodeFirstScheduler::create(20, 4, 8);
};

// Both prompts end in one step, so their next decodes go to the scheduler
// together; it refuses that submit, and only the refused session's generation
// fails.
TEST_F(FailureTest, ARefusedDecodeFailsOnlyItsOwnGeneration) {
  auto owned = std::make_unique<DecodeRefusingScheduler>();
  DecodeRefusingScheduler* scheduler = owned.get();
  start_with(std::move(owned));
  Session gate = open();
  Session a = open();
  Session b = open();
  scheduler->refused = b.id();
  auto held = occupy_engine(gate);
  Collector ca, cb;
  auto ha = a.generate_async(Tokens{1, 2}, budget(4), ca.on_update(), ca.on_settled());
  auto hb = b.generate_async(Tokens{3, 4}, budget(4), cb.on_update(), cb.on_settled());
  exec.release();
  held.wait();
  ha.wait();
  hb.wait();
  EXPECT_EQ(ha.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(ca.tokens().size(), 4u);
  EXPECT_EQ(hb.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(hb.error_message(), "scheduler rejected generation tasks");
  EXPECT_EQ(cb.tokens().size(), 1u);  // the prompt's token, then the refusal
  // The joint submit and b's own retry.
  EXPECT_EQ(scheduler->refusals.load(), 2);
}

TEST_F(FailureTest, FailureOnLeadingPrefillChunksEndsGeneration) {
  exec.set_fail_batches_from(0);
  start_with(DecodeFirstScheduler::create(5, 1, 4));
  Session s = open();
  Collector c;
  auto h = run(s, Tokens(10, 1), budget(3), c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.metrics().n_prefilled_tokens, 0);
  EXPECT_EQ(exec.batches().size(), 1u);
}

TEST_F(FailureTest, ExecutorFailurePoisonsTheSession) {
  Session gate = open();
  Session a = open();
  Session b = open();
  auto hg = occupy_engine(gate);  // a and b then share the failing batch
  Collector c, d;
  auto ha = a.generate_async(Tokens{1}, budget(3), c.on_update());
  auto hb = b.generate_async(Tokens{2}, budget(3), d.on_update());
  exec.set_fail_batches_from(1);
  exec.release();
  hg.wait();
  ha.wait();
  hb.wait();
  EXPECT_EQ(hg.finish_reason(), FinishReason::kNewTokenLimit);
  ASSERT_GE(exec.batches().size(), 2u);
  EXPECT_EQ(exec.batches()[1].size(), 2u);
  EXPECT_EQ(ha.error_message(), "executor failed to execute the batch");
  EXPECT_EQ(hb.error_message(), "executor failed to execute the batch");
  EXPECT_TRUE(c.tokens().empty());
  for (Session* s : {&a, &b}) {
    Collector e;
    EXPECT_EQ(run(*s, {3}, budget(1), e).error_message(),
              "session cannot continue after an executor failure");
    EXPECT_FALSE(s->clone_async(0).get().has_value());
  }
  // The gate was not in the failed batch: not poisoned (its next step fails
  // only because every batch from now on does).
  EXPECT_TRUE(gate.clone_async(0).get().has_value());
}

// ---- multi-token outputs ----

TEST_F(SpeculativeTest, FirstBurstRecordsIntraBurstTokenLatencies) {
  exec.set_tokens_per_prefill(3);
  Session s = open();
  Collector c;
  auto h = run(s, {1, 2}, budget(3), c);
  const auto m = h.metrics();
  EXPECT_EQ(m.itl_count, 2);
  EXPECT_EQ(m.itl_sum_us, 0);
  EXPECT_EQ(m.min_itl_us(), 0);
  EXPECT_TRUE(std::isinf(m.decode_tokens_per_sec()));
}

TEST_F(SpeculativeTest, TerminalStepPositionCarriesToTheNextTurn) {
  exec.set_tokens_per_prefill(3);
  Session s = open();
  Collector c, d;
  run(s, {1, 2}, budget(3), c);
  EXPECT_EQ(s.position(), 4);
  exec.set_tokens_per_prefill(1);
  run(s, {9}, budget(1), d);
  const auto in = exec.batches().back()[0];
  EXPECT_EQ(in.position, 4);
  EXPECT_EQ(in.slice, (Tokens{c.tokens().back(), 9}));
}

TEST_F(SpeculativeTest, StopTokenInAcceptedRunDropsOnlyTheSuffix) {
  exec.set_tokens_per_prefill(4);
  exec.set_stop(999, 1);
  Session s = open();
  GenConfig cfg = budget(10);
  cfg.stop_tokens = {999};
  Collector c, d;
  auto h = run(s, {1, 2}, cfg, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kStopToken);
  EXPECT_EQ(c.tokens(), (Tokens{tok(s.id(), 1), 999}));
  EXPECT_EQ(s.position(), 4);  // both delivered tokens committed, nothing pending
  exec.set_tokens_per_prefill(1);
  run(s, {5}, budget(1), d);
  const auto in = exec.batches().back()[0];
  EXPECT_EQ(in.position, 4);
  EXPECT_EQ(in.slice, (Tokens{5}));
  auto h2 = exec.history(s.id());
  EXPECT_EQ(Tokens(h2.begin(), h2.begin() + 5), (Tokens{1, 2, tok(s.id(), 1), 999, 5}));
}

TEST_F(SpeculativeTest, FinalStopTokenCarriesToTheNextTurn) {
  exec.set_tokens_per_prefill(3);
  exec.set_stop(999, 2);
  Session s = open();
  GenConfig cfg = budget(10);
  cfg.stop_tokens = {999};
  Collector c, d;
  run(s, {1}, cfg, c);
  EXPECT_EQ(s.position(), 3);
  exec.set_tokens_per_prefill(1);
  run(s, {5}, budget(1), d);
  EXPECT_EQ(exec.batches().back()[0].slice, (Tokens{999, 5}));
}

TEST_F(SpeculativeTest, AcceptedRunUsesExecutorPosition) {
  exec.set_tokens_per_decode(3);
  Session s = open();
  Collector c;
  run(s, {1, 2}, budget(7), c);
  auto batches = exec.batches();
  ASSERT_GE(batches.size(), 3u);
  EXPECT_EQ(batches[0][0].position, 0);
  EXPECT_EQ(batches[1][0].position, 2);
  EXPECT_EQ(batches[2][0].position, 5);
}

// ---- cancellation ----

TEST_F(CancelTest, ExplicitCancellationEndsTheGeneration) {
  Session s = open();
  Collector c;
  auto h = s.generate_async(Tokens{1}, budget(1000000), c.on_update());
  ASSERT_TRUE(wait_until([&] { return c.count() >= 2; }));
  h.cancel();
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(c.terminal_count(), 1);
  EXPECT_TRUE(c.last().tokens.empty());
}

TEST_F(CancelTest, CompletionObservesAllConsumedChunksInBatch) {
  start_with(DecodeFirstScheduler::create(5, 1, 2));  // two 2-token chunks per batch
  Session s = open();
  exec.hold();
  Position seen = -1;
  auto h = s.generate_async(Tokens{1, 2, 3, 4, 5, 6}, budget(2), [&](const GenerationUpdate& u) {
    if (u.finish_reason) seen = s.position();
  });
  ASSERT_TRUE(exec.wait_for_executes(1));
  h.cancel();
  exec.release();
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(seen, 4);
}

// Two prompts in 2-token chunks share one batch as A, B, A, B; A is cancelled
// while that batch executes. Both of A's chunks ran, so both count and both
// stay in its context; its later chunk (if any) never runs.
class InterleavedCancelTest : public RunnerFixture,
                              public ::testing::WithParamInterface<std::size_t> {};

TEST_P(InterleavedCancelTest, InterleavedPrefillCountsAllExecutedChunksBeforeCancellation) {
  start_with(DecodeFirstScheduler::create(8, 1, 2));
  Session gate = open();
  Session a = open();
  Session b = open();
  auto hg = occupy_engine(gate);  // batch 0 parks; both prompts queue behind it
  Collector ca, cb;
  const Tokens prompt_a(GetParam(), 3);
  auto ha = a.generate_async(prompt_a, budget(3), ca.on_update(), ca.on_settled());
  auto hb = b.generate_async(Tokens(6, 4), budget(2), cb.on_update(), cb.on_settled());
  exec.allow(1);  // batch 0 finishes, batch 1 parks
  ASSERT_TRUE(exec.wait_for_executes(2));
  ha.cancel();
  exec.release();
  hg.wait();
  ha.wait();
  hb.wait();

  const auto batches = exec.batches();
  ASSERT_GE(batches.size(), 2u);
  EXPECT_EQ(batches[0].size(), 1u);
  ASSERT_EQ(batches[1].size(), 4u);
  const SessionId order[] = {a.id(), b.id(), a.id(), b.id()};
  const std::size_t offsets[] = {0, 0, 2, 2};
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(batches[1][i].sid, order[i]) << i;
    EXPECT_EQ(batches[1][i].offset, offsets[i]) << i;
  }
  for (std::size_t i = 2; i < batches.size(); ++i) {
    for (const auto& in : batches[i]) EXPECT_NE(in.sid, a.id()) << "batch " << i;
  }

  EXPECT_EQ(ha.finish_reason(), FinishReason::kCancelled);
  EXPECT_TRUE(ca.tokens().empty());
  EXPECT_EQ(ca.terminal_count(), 1);
  EXPECT_EQ(ha.metrics().n_prefilled_tokens, 4);
  EXPECT_EQ(ha.metrics().n_prefill_steps, 1);
  EXPECT_EQ(ha.metrics().n_generated_tokens, 0);
  EXPECT_EQ(a.position(), 4);
  EXPECT_EQ(exec.history(a.id()), Tokens(4, 3));

  EXPECT_EQ(hb.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(hb.metrics().n_prefilled_tokens, 6);
  EXPECT_EQ(cb.tokens().size(), 2u);

  // A continues from its consumed prefix.
  Collector next;
  EXPECT_EQ(run(a, {9}, budget(1), next).finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(exec.batches().back()[0].position, 4);
  EXPECT_EQ(exec.batches().back()[0].slice, (Tokens{9}));
  runner->shutdown();
  EXPECT_EQ(runner->metrics().prefill_tokens_total, 1 + 8 + 2 + 1);
}

// 4 tokens: A's output-producing chunk is in the cancelled batch; 6 tokens: a
// third chunk is still queued and is dropped.
INSTANTIATE_TEST_SUITE_P(PromptLengths, InterleavedCancelTest, ::testing::Values(4u, 6u));

TEST_F(CancelTest, CallbackMayRetireItsOwnSession) {
  auto s = std::make_unique<Session>(open());
  const SessionId sid = s->id();
  auto h = s->generate_async(Tokens{1}, budget(1), [&](const GenerationUpdate& u) {
    if (u.finish_reason) s.reset();
  });
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_TRUE(wait_until([&] { return exec.closed() == std::vector<SessionId>{sid}; }));
}

TEST_F(CancelTest, PositionSurvivesACancelledGeneration) {
  Session s = open();
  Collector c;
  auto h = s.generate_async(Tokens{1, 2}, budget(1000000), c.on_update());
  ASSERT_TRUE(wait_until([&] { return c.count() >= 3; }));
  h.cancel();
  h.wait();
  const Position after = s.position();
  EXPECT_GE(after, 4);
  Collector d;
  run(s, {7}, budget(1), d);
  EXPECT_EQ(exec.batches().back()[0].position, after);
}

TEST_F(CancelTest, DecodeCancelAdvancesOnlyForDeliveredTokens) {
  Session s = open();
  Collector c;
  exec.hold();
  auto h = s.generate_async(Tokens{1, 2}, budget(1000000), c.on_update());
  ASSERT_TRUE(exec.wait_for_executes(1));
  exec.release();
  ASSERT_TRUE(wait_until([&] { return c.count() >= 2; }));
  exec.hold();
  ASSERT_TRUE(exec.wait_until_blocked());
  h.cancel();
  exec.release();
  h.wait();
  // The held step fed the last delivered token, so every delivered token is
  // committed; its own output was dropped and never counts.
  const auto delivered = c.tokens();
  EXPECT_EQ(s.position(), static_cast<Position>(2 + delivered.size()));
  const auto history = exec.history(s.id());
  ASSERT_GE(history.size(), 2 + delivered.size());
  EXPECT_EQ(Tokens(history.begin() + 2, history.begin() + 2 + delivered.size()), delivered);
  Collector d;
  run(s, {9}, budget(1), d);
  EXPECT_EQ(exec.batches().back()[0].slice, (Tokens{9}));
  EXPECT_EQ(exec.batches().back()[0].position, s.position() - 1);
}

TEST(LifetimeTest, SessionOutlivingTheRunnerStillClosesCleanly) {
  FakeExecutor exec;
  Session s;
  {
    Runner runner(exec, DecodeFirstScheduler::create(20, 4, 8));
    s = std::move(*runner.open_session_async().get());
  }
  EXPECT_FALSE(s.valid());
  auto h = s.generate_async(Tokens{1}, budget(1), {});
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(exec.closed().size(), 1u);
}

// ---- shutdown ----

TEST_F(ShutdownTest, EndsLiveAndRejectsNewWork) {
  Session s = open();
  Collector c;
  auto h = s.generate_async(Tokens{1}, budget(1000000), c.on_update());
  ASSERT_TRUE(wait_until([&] { return c.count() >= 1; }));
  runner->shutdown();
  EXPECT_TRUE(h.done());
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_FALSE(runner->open_session_async().get().has_value());
  EXPECT_FALSE(s.valid());
  EXPECT_EQ(s.generate_async(Tokens{1}, budget(1), {}).finish_reason(), FinishReason::kCancelled);
}

TEST_F(ShutdownTest, DiscardsInFlightOutputAndCancelsGeneration) {
  Session s = open();
  Session probe = open();
  exec.hold();
  Collector c;
  auto h = s.generate_async(Tokens{1, 2}, budget(5), c.on_update());
  ASSERT_TRUE(exec.wait_for_executes(1));
  std::thread stopper([&] { runner->shutdown(); });
  // probe.clone_async answers at once only when the runner stopped accepting.
  ASSERT_TRUE(wait_until([&] {
    return probe.clone_async(0).wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }));
  exec.release();
  stopper.join();
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_TRUE(c.tokens().empty());
  EXPECT_EQ(h.metrics().n_prefilled_tokens, 2);
  EXPECT_EQ(s.position(), 0);
}

TEST_F(ShutdownTest, ConcurrentCallersWaitForFullStop) {
  Session a = open();
  Session b = open();
  Collector c;
  auto h = a.generate_async(Tokens{1}, budget(1000000), c.on_update());
  ASSERT_TRUE(wait_until([&] { return c.count() >= 1; }));
  std::vector<std::thread> callers;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&] {
      runner->shutdown();
      if (h.done() && exec.live_sessions() == 0) ok.fetch_add(1);
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok.load(), 4);
}

TEST_F(ShutdownTest, CallbackShutdownStopsLaterOutputsInTheSameBatch) {
  Session gate = open();
  Session a = open();
  Session b = open();
  auto hg = occupy_engine(gate);
  Collector cb;
  auto ha = a.generate_async(Tokens{1}, budget(5), [&](const GenerationUpdate& u) {
    if (!u.finish_reason) runner->shutdown();
  });
  auto hb = b.generate_async(Tokens{2}, budget(5), cb.on_update());
  exec.release();
  hg.wait();
  ha.wait();
  hb.wait();
  EXPECT_EQ(hg.finish_reason(), FinishReason::kNewTokenLimit);
  ASSERT_EQ(exec.batches().size(), 2u);
  ASSERT_EQ(exec.batches()[1].size(), 2u);
  EXPECT_EQ(ha.finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(hb.finish_reason(), FinishReason::kCancelled);
  EXPECT_TRUE(cb.tokens().empty());
}

TEST_F(ShutdownTest, CallbackCanRequestShutdown) {
  Session s = open();
  auto h = s.generate_async(Tokens{1}, budget(1), [&](const GenerationUpdate&) {
    runner->shutdown();  // returns at once on the engine thread
  });
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  runner->shutdown();
  EXPECT_FALSE(s.valid());
}

TEST_F(ShutdownTest, ClosesRemainingSessionsExactlyOnce) {
  Session a = open();
  Session b = open();
  { Session c = open(); }
  runner->shutdown();
  runner->shutdown();
  auto closed = exec.closed();
  std::sort(closed.begin(), closed.end());
  EXPECT_EQ(closed, (std::vector<SessionId>{1, 2, 3}));
}

TEST_F(ShutdownTest, ConcurrentAdmissionDoesNotStrandCallers) {
  start();
  std::vector<std::thread> clients;
  std::atomic<int> settled{0};
  std::atomic<bool> go{false};
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      for (int k = 0; k < 20; ++k) {
        auto s = runner->open_session_async().get();
        if (!s) {
          settled.fetch_add(1);
          continue;
        }
        auto h = s->generate_async(Tokens{1}, budget(2), {});
        h.wait();
        settled.fetch_add(1);
      }
    });
  }
  go.store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  runner->shutdown();
  for (auto& t : clients) t.join();
  EXPECT_EQ(settled.load(), 80);
}

// ---- initialization ----

TEST_F(InitializeTest, RunsOnceBeforeAnythingElseIsAskedOfTheExecutor) {
  Session s = open();
  Collector c;
  run(s, {1}, budget(2), c);
  runner->shutdown();
  EXPECT_EQ(exec.init_calls(), 1u);
  EXPECT_EQ(exec.calls_before_init(), 0u);
  EXPECT_EQ(runner->initialization_state(), InitializationState::kReady);
}

TEST_F(InitializeTest, FailureStopsTheRunnerAndRefusesSessions) {
  exec.set_init(false);
  start();
  EXPECT_FALSE(runner->open_session_async().get().has_value());
  EXPECT_EQ(runner->initialization_state(), InitializationState::kFailed);
  auto accepted = runner->accepts_async(std::make_shared<FakePrepared>(Tokens{1})).get();
  EXPECT_EQ(std::get<AcceptanceError>(accepted), AcceptanceError::kUnavailable);
  EXPECT_TRUE(exec.opened().empty());
}

enum class InitOutcome { kSuccess, kException, kNonStandardException, kFailure };
class InitializeStateTest : public RunnerFixture,
                            public ::testing::WithParamInterface<InitOutcome> {
 protected:
  // The initialization stays pending until exec.release().
  void configure() {
    exec.hold_init();
    switch (GetParam()) {
      case InitOutcome::kSuccess: exec.set_init(true); break;
      case InitOutcome::kException: exec.set_init(true, true, false); break;
      case InitOutcome::kNonStandardException: exec.set_init(true, true, true); break;
      case InitOutcome::kFailure: exec.set_init(false); break;
    }
  }
  InitializationState expected() const {
    return GetParam() == InitOutcome::kSuccess ? InitializationState::kReady
                                               : InitializationState::kFailed;
  }
};

TEST_P(InitializeStateTest, PendingSettlesQueuedOpensAndRetainsResult) {
  configure();
  start();
  EXPECT_EQ(runner->initialization_state(), InitializationState::kPending);
  auto f1 = runner->open_session_async();
  auto f2 = runner->open_session_async();
  EXPECT_EQ(f1.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  exec.release();
  auto s1 = f1.get();
  auto s2 = f2.get();
  EXPECT_EQ(s1.has_value(), GetParam() == InitOutcome::kSuccess);
  EXPECT_EQ(s2.has_value(), GetParam() == InitOutcome::kSuccess);
  EXPECT_EQ(runner->initialization_state(), expected());
  runner->shutdown();
  EXPECT_EQ(runner->initialization_state(), expected());
}

TEST_P(InitializeStateTest, ShutdownWhilePendingStillRetainsInitializationResult) {
  configure();
  start();
  auto f = runner->open_session_async();
  std::thread stopper([&] { runner->shutdown(); });
  // Requests made after the stop are refused at once: the stop is in, while
  // the initialization is still held.
  ASSERT_TRUE(wait_until([&] {
    return runner->open_session_async().wait_for(std::chrono::seconds(0)) ==
           std::future_status::ready;
  }));
  EXPECT_EQ(runner->initialization_state(), InitializationState::kPending);
  exec.release();
  stopper.join();
  EXPECT_FALSE(f.get().has_value());
  EXPECT_EQ(runner->initialization_state(), expected());
}

INSTANTIATE_TEST_SUITE_P(Outcomes, InitializeStateTest,
                         ::testing::Values(InitOutcome::kSuccess, InitOutcome::kException,
                                           InitOutcome::kNonStandardException,
                                           InitOutcome::kFailure));

}  // namespace
}  // namespace cellm::testing
