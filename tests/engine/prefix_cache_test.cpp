// PrefixCache and PromptCapture over a runner whose executor's predictions
// depend on the whole history, so a wrong restore would change the tokens.
#include "cellm/prefix_cache.h"

#include <gtest/gtest.h>

#include <mutex>
#include <stdexcept>

#include "cellm/decode_first_scheduler.h"
#include "engine/history_executor.h"
#include "engine/runner_fixture.h"

namespace cellm::testing {
namespace {

using Tokens = std::vector<Token>;

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runner = std::make_unique<Runner>(exec, DecodeFirstScheduler::create(16, 4, 4));
  }
  void TearDown() override {
    cache.reset();
    if (runner) runner->shutdown();
  }
  Session open() {
    auto s = runner->open_session_async().get();
    EXPECT_TRUE(s.has_value());
    return s ? std::move(*s) : Session();
  }
  // Generates n tokens on `s` after `delta`.
  Tokens generate(Session& s, Tokens delta, std::int64_t n = 3) {
    Collector c;
    GenConfig cfg;
    cfg.max_new_tokens = n;
    auto h = s.generate_async(std::move(delta), cfg, c.on_update());
    h.wait();
    EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
    return c.tokens();
  }
  Tokens cold(const Tokens& prompt) {
    Session s = open();
    return generate(s, prompt);
  }
  // A snapshot whose history is exactly `tokens` (prefilled, nothing generated).
  Session snapshot_of(const Tokens& tokens) {
    Session s = open();
    generate(s, tokens, 1);
    auto snap = s.clone_async(static_cast<Position>(tokens.size())).get();
    EXPECT_TRUE(snap.has_value());
    return snap ? std::move(*snap) : Session();
  }
  Tokens warm(PrefixMatch& m, const Tokens& request) {
    return generate(
        m.session,
        Tokens(request.begin() + static_cast<std::ptrdiff_t>(m.matched_tokens), request.end()));
  }

  HistoryExecutor exec;
  std::unique_ptr<Runner> runner;
  std::unique_ptr<PrefixCache> cache = std::make_unique<PrefixCache>(4);
};

TEST_F(PrefixCacheTest, EqualShorterAndExtendedPromptsReplayTheFinalToken) {
  const Tokens prompt{1, 2, 3, 4, 5};
  ASSERT_TRUE(cache->insert(prompt, snapshot_of(prompt)));
  for (const Tokens& request : {prompt, Tokens{1, 2, 3}, Tokens{1, 2, 3, 4, 5, 6, 7}}) {
    auto m = cache->lookup(request);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->matched_tokens, std::min(prompt.size(), request.size() - 1));
    EXPECT_EQ(m->session.position(), static_cast<Position>(m->matched_tokens));
    EXPECT_EQ(warm(*m, request), cold(request));
  }
  EXPECT_FALSE(cache->lookup({}).has_value());
  EXPECT_FALSE(cache->lookup({1}).has_value());
  EXPECT_FALSE(cache->lookup({9, 2, 3}).has_value());
}

TEST_F(PrefixCacheTest, BranchesSurviveSourceClosureAndSnapshotEviction) {
  const Tokens prompt{4, 5, 6, 7};
  ASSERT_TRUE(cache->insert(prompt, snapshot_of(prompt)));
  auto a = cache->lookup({4, 5, 6, 7, 8});
  auto b = cache->lookup({4, 5, 6, 7, 9});
  ASSERT_TRUE(a && b);
  cache->clear();  // the snapshot goes; the branches keep their own history
  EXPECT_EQ(warm(*a, {4, 5, 6, 7, 8}), cold({4, 5, 6, 7, 8}));
  EXPECT_EQ(warm(*b, {4, 5, 6, 7, 9}), cold({4, 5, 6, 7, 9}));
}

TEST_F(PrefixCacheTest, LongestPrefixWinsOverMoreRecentShorterMatch) {
  ASSERT_TRUE(cache->insert({1, 2, 3, 4}, snapshot_of({1, 2, 3, 4})));
  ASSERT_TRUE(cache->insert({1, 2}, snapshot_of({1, 2})));
  auto m = cache->lookup({1, 2, 3, 4, 5});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 4u);
}

TEST_F(PrefixCacheTest, EqualLengthMatchesPreferTheMostRecentlyUsedSnapshot) {
  Session older = snapshot_of({1, 2, 3, 9});
  Session newer = snapshot_of({1, 2, 3, 8});
  const SessionId newer_id = newer.id();
  ASSERT_TRUE(cache->insert({1, 2, 3, 9}, std::move(older)));
  ASSERT_TRUE(cache->insert({1, 2, 3, 8}, std::move(newer)));
  const std::size_t before = exec.clone_calls();
  auto m = cache->lookup({1, 2, 3, 7, 7});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 3u);
  ASSERT_EQ(exec.clone_calls(), before + 1);
  EXPECT_EQ(exec.clone_sources().back(), newer_id);
}

TEST_F(PrefixCacheTest, DuplicateInsertRefreshesLruAndReleasesTheNewSnapshot) {
  cache = std::make_unique<PrefixCache>(2);
  ASSERT_TRUE(cache->insert({1, 1}, snapshot_of({1, 1})));
  ASSERT_TRUE(cache->insert({2, 2}, snapshot_of({2, 2})));
  Session dup = snapshot_of({1, 1});
  const SessionId dup_id = dup.id();
  ASSERT_TRUE(cache->insert({1, 1}, std::move(dup)));
  EXPECT_EQ(cache->size(), 2u);
  ASSERT_TRUE(wait_until([&] { return exec.history(dup_id).empty() && exec.live_sessions() > 0; }));
  ASSERT_TRUE(cache->insert({3, 3}, snapshot_of({3, 3})));  // evicts {2,2}, not {1,1}
  EXPECT_TRUE(cache->lookup({1, 1, 5}).has_value());
  EXPECT_FALSE(cache->lookup({2, 2, 5}).has_value());
  EXPECT_TRUE(cache->lookup({3, 3, 5}).has_value());
}

TEST_F(PrefixCacheTest, SuccessfulLookupRefreshesLruBeforeEviction) {
  cache = std::make_unique<PrefixCache>(2);
  ASSERT_TRUE(cache->insert({1, 1}, snapshot_of({1, 1})));
  ASSERT_TRUE(cache->insert({2, 2}, snapshot_of({2, 2})));
  ASSERT_TRUE(cache->lookup({1, 1, 9}).has_value());  // {1,1} is now the most recent
  ASSERT_TRUE(cache->insert({3, 3}, snapshot_of({3, 3})));
  EXPECT_TRUE(cache->lookup({1, 1, 9}).has_value());
  EXPECT_FALSE(cache->lookup({2, 2, 9}).has_value());
}

TEST_F(PrefixCacheTest, TokenKeysPreserveAllSixtyFourBits) {
  const Token high = (Token{1} << 40) | 7;
  ASSERT_TRUE(cache->insert({high, 2}, snapshot_of({high, 2})));
  EXPECT_FALSE(cache->lookup({7, 2, 3}).has_value());
  auto m = cache->lookup({high, 2, 3});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 2u);
}

TEST_F(PrefixCacheTest, DisabledCacheReleasesInsertedSnapshotWithoutCloning) {
  PrefixCache disabled(0);
  Session snap = snapshot_of({1, 2});
  const SessionId sid = snap.id();
  const std::size_t clones = exec.clone_calls();
  EXPECT_FALSE(disabled.insert({1, 2}, std::move(snap)));
  EXPECT_EQ(disabled.size(), 0u);
  EXPECT_FALSE(disabled.lookup({1, 2, 3}).has_value());
  EXPECT_EQ(exec.clone_calls(), clones);
  EXPECT_TRUE(wait_until([&] { return exec.history(sid).empty(); }));
  Session source = open();
  EXPECT_FALSE(disabled.capture_prompt(source, {1}).active());
}

TEST_F(PrefixCacheTest, InvalidInsertReleasesOwnershipAndPreservesExistingEntry) {
  ASSERT_TRUE(cache->insert({1, 2, 3}, snapshot_of({1, 2, 3})));
  Session wrong = snapshot_of({1, 2, 3});
  const std::size_t live = exec.live_sessions();
  EXPECT_FALSE(cache->insert({1, 2}, std::move(wrong)));  // position 3 != 2 tokens
  EXPECT_FALSE(cache->insert({}, snapshot_of({5})));
  EXPECT_FALSE(cache->insert({4}, Session()));
  EXPECT_TRUE(wait_until([&] { return exec.live_sessions() < live; }));
  EXPECT_EQ(cache->size(), 1u);
  EXPECT_TRUE(cache->lookup({1, 2, 3, 4}).has_value());
}

TEST_F(PrefixCacheTest, RetentionRefusalPreservesSnapshotAndAllowsLaterHit) {
  ASSERT_TRUE(cache->insert({1, 2, 3, 4, 5, 6}, snapshot_of({1, 2, 3, 4, 5, 6})));
  exec.set_retained_tail(1);
  EXPECT_FALSE(cache->lookup({1, 2, 9}).has_value());  // boundary 2 is outside the tail
  EXPECT_EQ(cache->size(), 1u);
  exec.set_retained_tail(std::nullopt);
  EXPECT_TRUE(cache->lookup({1, 2, 9}).has_value());
}

TEST_F(PrefixCacheTest, OlderSnapshotCanSatisfyARefusedNewerMatch) {
  ASSERT_TRUE(cache->insert({1, 2, 3}, snapshot_of({1, 2, 3})));
  ASSERT_TRUE(cache->insert({1, 2, 3, 4, 5, 6, 7}, snapshot_of({1, 2, 3, 4, 5, 6, 7})));
  exec.set_retained_tail(1);
  // The longer match (boundary 3 of the 7-token snapshot) is refused; the
  // older 3-token snapshot can give the same boundary.
  auto m = cache->lookup({1, 2, 3, 9});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 3u);
}

TEST_F(PrefixCacheTest, CapacityRefusalDoesNotLeakOrEvictTheSnapshot) {
  ASSERT_TRUE(cache->insert({1, 2, 3}, snapshot_of({1, 2, 3})));
  ASSERT_TRUE(wait_until([&] { return exec.live_sessions() == 1; }));  // the source closed
  exec.set_capacity(exec.live_sessions());
  const std::size_t live = exec.live_sessions();
  EXPECT_FALSE(cache->lookup({1, 2, 3, 4}).has_value());
  EXPECT_EQ(exec.live_sessions(), live);
  EXPECT_EQ(cache->size(), 1u);
  exec.set_capacity(64);
  EXPECT_TRUE(cache->lookup({1, 2, 3, 4}).has_value());
}

TEST_F(PrefixCacheTest, CloneAllocationFailureIsAMissAndTheEngineRemainsUsable) {
  ASSERT_TRUE(cache->insert({1, 2, 3}, snapshot_of({1, 2, 3})));
  exec.set_clone_bad_alloc(true);
  EXPECT_FALSE(cache->lookup({1, 2, 3, 4}).has_value());
  exec.set_clone_bad_alloc(false);
  EXPECT_EQ(cold({1, 2, 3, 4}).size(), 3u);
  EXPECT_TRUE(cache->lookup({1, 2, 3, 4}).has_value());
}

TEST_F(PrefixCacheTest, ClearAndDestructionReleaseOnlyOwnedSnapshots) {
  Session keep = snapshot_of({7, 7});
  ASSERT_TRUE(cache->insert({1, 2}, snapshot_of({1, 2})));
  ASSERT_TRUE(cache->insert({3, 4}, snapshot_of({3, 4})));
  cache->clear();
  EXPECT_EQ(cache->size(), 0u);
  ASSERT_TRUE(cache->insert({5, 6}, snapshot_of({5, 6})));
  cache.reset();
  EXPECT_TRUE(keep.valid());
  EXPECT_EQ(exec.history(keep.id()), (Tokens{7, 7}));
  EXPECT_EQ(generate(keep, {1}, 1).size(), 1u);
}

TEST_F(PrefixCacheTest, ManagerAndReturnedSessionsMayOutliveRunner) {
  ASSERT_TRUE(cache->insert({1, 2}, snapshot_of({1, 2})));
  auto m = cache->lookup({1, 2, 3});
  ASSERT_TRUE(m.has_value());
  runner->shutdown();
  runner.reset();
  EXPECT_FALSE(m->session.valid());
  EXPECT_FALSE(cache->lookup({1, 2, 3}).has_value());
  cache.reset();  // releasing closed snapshots after the runner is harmless
}

TEST_F(PrefixCacheTest, PromptCapturePrecedesDecodeRetentionLoss) {
  exec.set_retained_tail(2);
  Session s = open();
  const Tokens prompt{1, 2, 3, 4};
  PromptCapture capture = cache->capture_prompt(s, prompt);
  ASSERT_TRUE(capture.active());
  Collector c;
  GenConfig cfg;
  cfg.max_new_tokens = 6;
  auto h = s.generate_async(prompt, cfg, capture.wrap(c.on_update()));
  h.wait();
  // Too late now: the prompt boundary left the retained tail.
  EXPECT_FALSE(s.clone_async(4).get().has_value());
  EXPECT_TRUE(capture.collect());
  exec.set_retained_tail(std::nullopt);
  auto m = cache->lookup({1, 2, 3, 4, 9});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 4u);
  EXPECT_EQ(warm(*m, {1, 2, 3, 4, 9}), cold({1, 2, 3, 4, 9}));
}

TEST_F(PrefixCacheTest, PromptCaptureCopiesFullHistoryAfterPrefixReuse) {
  ASSERT_TRUE(cache->insert({1, 2, 3}, snapshot_of({1, 2, 3})));
  const Tokens request{1, 2, 3, 4, 5};
  auto m = cache->lookup(request);
  ASSERT_TRUE(m.has_value());
  PromptCapture capture = cache->capture_prompt(m->session, request);
  Collector c;
  GenConfig cfg;
  cfg.max_new_tokens = 2;
  auto delta =
      Tokens(request.begin() + static_cast<std::ptrdiff_t>(m->matched_tokens), request.end());
  auto h = m->session.generate_async(delta, cfg, capture.wrap(c.on_update()));
  h.wait();
  ASSERT_TRUE(capture.collect());
  auto again = cache->lookup({1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->matched_tokens, 5u);
  EXPECT_EQ(warm(*again, {1, 2, 3, 4, 5, 6}), cold({1, 2, 3, 4, 5, 6}));
}

// A refused snapshot must not cost the user anything: every token still
// arrives (and equals a run without a capture), nothing is inserted or leaked.
TEST_F(PrefixCacheTest, PromptCaptureCapacityRefusalPreservesUserTokens) {
  Session s = open();
  const Tokens prompt{1, 2, 3};
  PromptCapture capture = cache->capture_prompt(s, prompt);
  exec.set_capacity(exec.live_sessions());  // no room for the snapshot
  Collector c;
  GenConfig cfg;
  cfg.max_new_tokens = 3;
  auto h = s.generate_async(prompt, cfg, capture.wrap(c.on_update()));
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(c.count(), 3u);
  EXPECT_FALSE(capture.collect());
  EXPECT_EQ(exec.clone_calls(), 1u);  // attempted once, refused
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(exec.live_sessions(), 1u);
  exec.set_capacity(16);
  EXPECT_EQ(c.tokens(), cold(prompt));
}

TEST_F(PrefixCacheTest, PromptCaptureAllocationFailurePreservesUserTokens) {
  Session s = open();
  const Tokens prompt{4, 3, 2};
  PromptCapture capture = cache->capture_prompt(s, prompt);
  exec.set_clone_bad_alloc(true);
  Collector c;
  GenConfig cfg;
  cfg.max_new_tokens = 3;
  auto h = s.generate_async(prompt, cfg, capture.wrap(c.on_update()));
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(c.count(), 3u);
  EXPECT_FALSE(capture.collect());
  EXPECT_EQ(exec.clone_calls(), 1u);
  EXPECT_EQ(cache->size(), 0u);
  EXPECT_EQ(exec.live_sessions(), 1u);
  exec.set_clone_bad_alloc(false);
  EXPECT_EQ(c.tokens(), cold(prompt));
  // The source stays usable.
  EXPECT_EQ(generate(s, {9}, 1).size(), 1u);
}

TEST_F(PrefixCacheTest, PromptCaptureDoesNotSwallowUserCallbackException) {
  Session s = open();
  PromptCapture capture = cache->capture_prompt(s, {1, 2});
  auto h = s.generate_async(Tokens{1, 2}, GenConfig{}, capture.wrap([](const GenerationUpdate&) {
    throw std::runtime_error("user failure");
  }));
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(h.error_message(), "user failure");
  EXPECT_TRUE(capture.collect());  // the snapshot was requested before the throw
}

TEST_F(PrefixCacheTest, RejectedGenerationDoesNotCaptureWithoutOutput) {
  Session s = open();
  PromptCapture capture = cache->capture_prompt(s, {1, 2});
  GenConfig cfg;
  cfg.max_new_tokens = 0;
  auto h = s.generate_async(Tokens{1, 2}, cfg, capture.wrap());
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_FALSE(capture.collect());
  EXPECT_EQ(cache->size(), 0u);
}

// Only an update carrying tokens triggers the snapshot: an empty one seen
// first leaves the capture armed for the first (here terminal) token.
TEST_F(PrefixCacheTest, EmptyUpdatesDoNotConsumeFirstTerminalTokenCapture) {
  Session s = open();
  const Tokens prompt{5, 6, 7};
  PromptCapture capture = cache->capture_prompt(s, prompt);
  Collector c;
  GenerationCallback cb = capture.wrap(c.on_update());
  cb(GenerationUpdate{});
  EXPECT_EQ(exec.clone_calls(), 0u);
  EXPECT_EQ(c.count(), 1u);  // still forwarded
  GenConfig cfg;
  cfg.max_new_tokens = 1;  // the only token comes with the terminal update
  auto h = s.generate_async(prompt, cfg, cb);
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  ASSERT_EQ(c.count(), 2u);
  EXPECT_TRUE(c.last().finish_reason.has_value());
  ASSERT_TRUE(capture.collect());
  auto m = cache->lookup({5, 6, 7, 8});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 3u);
  EXPECT_EQ(warm(*m, {5, 6, 7, 8}), cold({5, 6, 7, 8}));
}

// The wrapper queues the snapshot before the user's callback runs, so a user
// who closes the source from that callback still gets it captured (commands
// run in order: clone, then close).
TEST_F(PrefixCacheTest, PromptCaptureIsQueuedBeforeUserCallbackClosesSource) {
  auto s = std::make_unique<Session>(open());
  const Tokens prompt{1, 2, 3, 4};
  PromptCapture capture = cache->capture_prompt(*s, prompt);
  Collector c;
  GenerationCallback user = [&, forward = c.on_update()](const GenerationUpdate& u) {
    forward(u);
    if (!u.finish_reason) s.reset();
  };
  GenerationHandle h;
  {
    std::mutex mu;  // keeps the callback from resetting s while generate_async runs
    std::unique_lock lock(mu);
    h = s->generate_async(prompt, GenConfig{}, capture.wrap([&](const GenerationUpdate& u) {
      std::lock_guard l(mu);
      user(u);
    }));
    lock.unlock();
    h.wait();
  }
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_EQ(c.tokens().size(), 1u);
  ASSERT_TRUE(capture.collect());
  EXPECT_EQ(cache->size(), 1u);
  auto m = cache->lookup({1, 2, 3, 4, 9});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 4u);
  EXPECT_EQ(warm(*m, {1, 2, 3, 4, 9}), cold({1, 2, 3, 4, 9}));
}

TEST_F(PrefixCacheTest, MovedPromptCaptureAndCopiedCallbackCollectOnlyOnce) {
  Session s = open();
  PromptCapture capture = cache->capture_prompt(s, {1, 2});
  GenerationCallback cb = capture.wrap();
  GenerationCallback copy = cb;
  GenConfig cfg;
  cfg.max_new_tokens = 1;
  s.generate_async(Tokens{1, 2}, cfg, copy).wait();
  PromptCapture moved = std::move(capture);
  EXPECT_FALSE(capture.collect());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(moved.collect());
  EXPECT_FALSE(moved.collect());
  EXPECT_EQ(cache->size(), 1u);
}

// The capture holds the session's identity, not the Session object it was
// made from: moving the session out and freeing that object changes nothing.
TEST_F(PrefixCacheTest, PromptCaptureSurvivesMovingAndFreeingSourceWrapper) {
  auto wrapper = std::make_unique<Session>(open());
  const Tokens prompt{2, 4, 6};
  PromptCapture capture = cache->capture_prompt(*wrapper, prompt);
  Session moved = std::move(*wrapper);
  wrapper.reset();
  Collector c;
  GenConfig cfg;
  cfg.max_new_tokens = 2;
  auto h = moved.generate_async(prompt, cfg, capture.wrap(c.on_update()));
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  const Tokens reference = cold(prompt);  // three tokens; the first two must match
  EXPECT_EQ(c.tokens(), Tokens(reference.begin(), reference.begin() + 2));
  ASSERT_TRUE(capture.collect());
  auto m = cache->lookup({2, 4, 6, 1});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 3u);
  EXPECT_EQ(warm(*m, {2, 4, 6, 1}), cold({2, 4, 6, 1}));
}

TEST_F(PrefixCacheTest, PromptCaptureKeepsOriginalIdentityAfterSourceReassignment) {
  Session s = open();
  PromptCapture capture = cache->capture_prompt(s, {1, 2});
  GenConfig cfg;
  cfg.max_new_tokens = 1;
  auto h = s.generate_async(Tokens{1, 2}, cfg, capture.wrap());
  h.wait();
  Session other = open();
  // Reassigning closes the original after the already queued clone ran.
  s = std::move(other);
  ASSERT_TRUE(capture.collect());
  auto m = cache->lookup({1, 2, 3});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->matched_tokens, 2u);
}

TEST_F(PrefixCacheTest, ClosedSourceCaptureForwardsOutputWithoutRetainingSession) {
  auto s = std::make_unique<Session>(open());
  PromptCapture capture = cache->capture_prompt(*s, {1, 2});
  Collector c;
  auto h = s->generate_async(
      Tokens{1, 2}, GenConfig{},
      [&, cb = capture.wrap(c.on_update()), first = true](const GenerationUpdate& u) mutable {
        if (first) {
          first = false;
          s.reset();  // closes the source before the wrapped callback runs
        }
        cb(u);
      });
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kCancelled);
  EXPECT_GE(c.count(), 1u);
  EXPECT_FALSE(capture.collect());
  EXPECT_EQ(cache->size(), 0u);
}

TEST_F(PrefixCacheTest, DiscardedPromptCaptureLeavesCallbackUsableAndReleasesClone) {
  Session s = open();
  GenerationCallback cb;
  {
    PromptCapture capture = cache->capture_prompt(s, {1, 2});
    cb = capture.wrap();
  }
  GenConfig cfg;
  cfg.max_new_tokens = 2;
  auto h = s.generate_async(Tokens{1, 2}, cfg, cb);
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  cb = nullptr;  // the last owner of the requested clone
  EXPECT_TRUE(wait_until([&] { return exec.live_sessions() == 1; }));
}

TEST_F(PrefixCacheTest, InactivePromptCapturesForwardUpdatesAndAllowEmptyCallback) {
  PromptCapture inactive;
  EXPECT_FALSE(inactive.active());
  EXPECT_FALSE(static_cast<bool>(inactive.wrap()));
  int calls = 0;
  GenerationCallback cb = inactive.wrap([&](const GenerationUpdate&) { ++calls; });
  cb(GenerationUpdate{});
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(inactive.collect());
  Session none;
  EXPECT_FALSE(cache->capture_prompt(none, {1}).active());
}

}  // namespace
}  // namespace cellm::testing
