// Runner::submit over an executor whose predictions hash the session's whole
// history and seed: a wrong prefix restore, a clone at the wrong position or
// a mixed-up seed changes every token, so equality with a cold run is a real
// check of the prefix cache and the fan-out.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <thread>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "engine/history_executor.h"
#include "engine/runner_fixture.h"

namespace cellm::testing {
namespace {

using Tokens = std::vector<Token>;

// What one request's callbacks saw.
struct Seen {
  std::mutex mu;
  std::map<std::int32_t, Tokens> tokens;
  std::map<std::int32_t, int> terminals;
  std::map<std::int32_t, FinishReason> reasons;
  std::optional<RequestOutcome> outcome;
  int done_calls = 0;
  std::thread::id thread;
};

RequestCallbacks record(const std::shared_ptr<Seen>& seen) {
  RequestCallbacks cb;
  cb.on_update = [seen](std::int32_t choice, const GenerationUpdate& u) {
    std::lock_guard lock(seen->mu);
    auto& t = seen->tokens[choice];
    t.insert(t.end(), u.tokens.begin(), u.tokens.end());
    if (u.finish_reason) {
      ++seen->terminals[choice];
      seen->reasons[choice] = *u.finish_reason;
    }
    seen->thread = std::this_thread::get_id();
  };
  cb.on_done = [seen](const RequestOutcome& o) {
    std::lock_guard lock(seen->mu);
    seen->outcome = o;
    ++seen->done_calls;
  };
  return cb;
}

class RequestTest : public ::testing::Test {
 protected:
  void start(std::int32_t cache_entries, std::size_t capacity = 16) {
    exec.set_capacity(capacity);
    runner = std::make_unique<Runner>(exec, DecodeFirstScheduler::create(16, 4, 4),
                                      RunnerOptions{cache_entries});
  }
  void TearDown() override {
    if (runner) runner->shutdown();
  }
  Request request(Tokens prompt, std::int64_t max_new, std::int32_t n = 1,
                  std::optional<std::uint64_t> seed = std::nullopt) {
    Request r;
    r.prompt = std::move(prompt);
    r.n = n;
    r.config.max_new_tokens = max_new;
    r.config.seed = seed;
    return r;
  }
  // Submits and waits; returns what the callbacks saw.
  std::shared_ptr<Seen> run(Request r, RequestHandle* handle_out = nullptr) {
    auto seen = std::make_shared<Seen>();
    auto h = runner->submit(std::move(r), record(seen));
    EXPECT_TRUE(h.ok()) << h.status().message();
    if (!h.ok()) return seen;
    h->wait();
    if (handle_out) *handle_out = *h;
    return seen;
  }
  // The same tokens from a plain session, no cache, no clone.
  Tokens cold(const Tokens& prompt, std::int64_t max_new, std::optional<std::uint64_t> seed) {
    auto s = runner->open_session_async().get();
    EXPECT_TRUE(s.has_value());
    Collector c;
    GenConfig cfg = budget(max_new);
    cfg.seed = seed;
    auto h = s->generate_async(prompt, cfg, c.on_update());
    h.wait();
    return c.tokens();
  }

  HistoryExecutor exec;
  std::unique_ptr<Runner> runner;
};

TEST_F(RequestTest, OneChoiceEqualsAPlainSessionAndReportsUsage) {
  start(0);
  const Tokens prompt{5, 6, 7, 8, 9};
  auto seen = run(request(prompt, 6));
  const Tokens want = cold(prompt, 6, std::nullopt);
  ASSERT_EQ(want.size(), 6u);
  std::lock_guard lock(seen->mu);
  EXPECT_EQ(seen->tokens[0], want);
  EXPECT_EQ(seen->terminals[0], 1);
  EXPECT_EQ(seen->reasons[0], FinishReason::kNewTokenLimit);
  ASSERT_TRUE(seen->outcome.has_value());
  EXPECT_EQ(seen->done_calls, 1);
  EXPECT_EQ(seen->outcome->usage.prompt_tokens, 5);
  EXPECT_EQ(seen->outcome->usage.cached_tokens, 0);
  EXPECT_EQ(seen->outcome->usage.completion_tokens, 6);
  EXPECT_NE(seen->thread, std::this_thread::get_id());
}

TEST_F(RequestTest, ChoicesShareOnePrefillAndEachFollowsItsOwnSeed) {
  start(0);
  const Tokens prompt{11, 12, 13, 14};
  auto seen = run(request(prompt, 5, 3, 100));
  std::lock_guard lock(seen->mu);
  ASSERT_EQ(seen->outcome->finish_reasons.size(), 3u);
  for (std::int32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(seen->tokens[i], cold(prompt, 5, 100 + static_cast<std::uint64_t>(i)))
        << "choice " << i;
    EXPECT_EQ(seen->terminals[i], 1);
  }
  EXPECT_NE(seen->tokens[0], seen->tokens[1]);
  EXPECT_EQ(seen->outcome->usage.completion_tokens, 15);
  // Two clones of the committed prompt, no second prefill.
  EXPECT_EQ(exec.clone_calls(), 2u);
}

TEST_F(RequestTest, PrefixCacheServesALaterPromptAndChangesNoToken) {
  start(4);
  const Tokens first{1, 2, 3, 4, 5, 6, 7, 8};
  const Tokens second{1, 2, 3, 4, 5, 6, 40, 41};
  run(request(first, 3));
  EXPECT_EQ(runner->prefix_cache_size(), 1);
  RequestHandle h;
  auto seen = run(request(second, 4), &h);
  std::lock_guard lock(seen->mu);
  EXPECT_EQ(seen->outcome->usage.cached_tokens, 6);
  EXPECT_EQ(h.cached_tokens(), 6);
  EXPECT_EQ(seen->tokens[0], cold(second, 4, std::nullopt));
  // Every session but the two snapshots is closed.
  EXPECT_TRUE(wait_until([&] { return exec.live_sessions() == 2; }));
}

TEST_F(RequestTest, RequestsWaitForSessionsAndRunInArrivalOrder) {
  start(0, 1);
  std::vector<std::shared_ptr<Seen>> seen;
  std::vector<RequestHandle> handles;
  for (Token t = 0; t < 4; ++t) {
    seen.push_back(std::make_shared<Seen>());
    auto h = runner->submit(request({t, t, t}, 3), record(seen.back()));
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
  }
  for (auto& h : handles) h.wait();
  for (Token t = 0; t < 4; ++t) {
    std::lock_guard lock(seen[static_cast<std::size_t>(t)]->mu);
    EXPECT_EQ(seen[static_cast<std::size_t>(t)]->tokens[0], cold({t, t, t}, 3, std::nullopt));
  }
  EXPECT_TRUE(wait_until([&] { return exec.live_sessions() == 0; }));
}

TEST_F(RequestTest, CancelledWhileWaitingEndsWithoutTakingASession) {
  start(0, 1);
  auto blocker = runner->open_session_async().get();  // holds the only session
  ASSERT_TRUE(blocker.has_value());
  auto seen = std::make_shared<Seen>();
  auto h = runner->submit(request({1, 2}, 4, 2), record(seen));
  ASSERT_TRUE(h.ok());
  EXPECT_FALSE(h->done());
  h->cancel();
  h->wait();
  std::lock_guard lock(seen->mu);
  EXPECT_EQ(seen->reasons[0], FinishReason::kCancelled);
  EXPECT_EQ(seen->reasons[1], FinishReason::kCancelled);
  EXPECT_EQ(seen->terminals[0], 1);
  EXPECT_EQ(seen->terminals[1], 1);
  EXPECT_TRUE(seen->tokens[0].empty());
  EXPECT_EQ(exec.live_sessions(), 1u);
}

TEST_F(RequestTest, CancellingOneChoiceLeavesTheOthersUntouched) {
  start(0);
  const Tokens prompt{3, 1, 4, 1, 5};
  auto seen = std::make_shared<Seen>();
  Request r = request(prompt, 50, 2, 7);
  auto h = runner->submit(std::move(r), record(seen));
  ASSERT_TRUE(h.ok());
  h->cancel_choice(1);
  h->wait();
  std::lock_guard lock(seen->mu);
  EXPECT_EQ(seen->reasons[0], FinishReason::kNewTokenLimit);
  EXPECT_EQ(seen->tokens[0], cold(prompt, 50, 7));
  EXPECT_EQ(seen->reasons[1], FinishReason::kCancelled);
  EXPECT_TRUE(wait_until([&] { return exec.live_sessions() == 0; }));
}

TEST_F(RequestTest, BadRequestsAreRefusedBeforeAnythingRuns) {
  start(0);
  auto seen = std::make_shared<Seen>();
  auto empty = runner->submit(request({}, 4), record(seen));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("prompt"), std::string::npos);
  auto zero_n = runner->submit(request({1}, 4, 0), record(seen));
  ASSERT_FALSE(zero_n.ok());
  EXPECT_NE(zero_n.status().message().find("n must"), std::string::npos);
  auto no_budget = runner->submit(request({1}, 0), record(seen));
  ASSERT_FALSE(no_budget.ok());
  EXPECT_NE(no_budget.status().message().find("max_new_tokens"), std::string::npos);
  std::lock_guard lock(seen->mu);
  EXPECT_EQ(seen->done_calls, 0);
  EXPECT_TRUE(seen->tokens.empty());
}

TEST_F(RequestTest, ShutdownEndsRunningAndWaitingRequests) {
  start(2, 1);
  auto running = std::make_shared<Seen>();
  auto waiting = std::make_shared<Seen>();
  auto a = runner->submit(request({1, 2, 3}, 100000), record(running));
  auto b = runner->submit(request({4, 5}, 10), record(waiting));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(running->mu);
    return !running->tokens[0].empty();
  }));
  runner->shutdown();
  EXPECT_TRUE(a->done());
  EXPECT_TRUE(b->done());
  {
    std::lock_guard lock(running->mu);
    EXPECT_EQ(running->reasons[0], FinishReason::kCancelled);
    EXPECT_EQ(running->done_calls, 1);
  }
  {
    std::lock_guard lock(waiting->mu);
    EXPECT_EQ(waiting->reasons[0], FinishReason::kCancelled);
    EXPECT_EQ(waiting->done_calls, 1);
  }
  EXPECT_EQ(exec.live_sessions(), 0u);
  auto late = runner->submit(request({1}, 1), record(std::make_shared<Seen>()));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace cellm::testing
