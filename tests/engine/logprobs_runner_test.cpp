// Logprobs through the Runner: an executor's per-token entries reach the
// generation's updates one for one with the delivered tokens (a stop token
// or the budget cutting a multi-token output keeps only the delivered
// ones), and a generation that does not ask gets none.
#include <gtest/gtest.h>

#include "runner_fixture.h"

namespace cellm::testing {
namespace {

using LogprobsRunnerTest = RunnerFixture;

void expect_aligned(const Collector& c) {
  for (const GenerationUpdate& u : c.updates()) {
    ASSERT_EQ(u.logprobs.size(), u.tokens.size());
    for (std::size_t i = 0; i < u.tokens.size(); ++i) {
      EXPECT_EQ(u.logprobs[i].token, u.tokens[i]);
      EXPECT_EQ(u.logprobs[i].logprob, -static_cast<float>(u.tokens[i] % 97) / 8.0f);
    }
  }
}

TEST_F(LogprobsRunnerTest, EntriesFollowTheDeliveredTokens) {
  exec.set_tokens_per_decode(3);  // speculative-style bursts
  Session s = open();
  GenConfig config = budget(8);
  config.sampling.logprobs = 2;
  Collector c;
  auto h = run(s, {1, 2, 3}, config, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(c.tokens().size(), 8u);  // 1 + 3 + 3 + 1 of a burst of 3
  expect_aligned(c);
}

TEST_F(LogprobsRunnerTest, AStopTokenCutsTheEntriesWithTheTokens) {
  exec.set_tokens_per_decode(3);
  exec.set_stop(99, 2);  // the third token is the stop token, inside a burst
  Session s = open();
  GenConfig config = budget(10);
  config.sampling.logprobs = 0;
  config.stop_tokens = {99};
  Collector c;
  auto h = run(s, {4, 5}, config, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kStopToken);
  ASSERT_EQ(c.tokens().size(), 3u);
  EXPECT_EQ(c.tokens().back(), Token{99});
  expect_aligned(c);
}

TEST_F(LogprobsRunnerTest, SubmittedRequestsCarryThemToOnUpdate) {
  exec.set_tokens_per_decode(2);
  start();
  Request request;
  request.prompt = {1, 2, 3};
  request.config = budget(5);
  request.config.sampling.logprobs = 3;
  request.use_prefix_cache = false;
  Collector c;
  RequestCallbacks callbacks;
  const GenerationCallback forward = c.on_update();
  callbacks.on_update = [forward](std::int32_t, const GenerationUpdate& u) { forward(u); };
  const SettledCallback settled = c.on_settled();
  callbacks.on_done = [settled](const RequestOutcome&) { settled(); };
  auto handle = runner->submit(std::move(request), std::move(callbacks));
  ASSERT_TRUE(handle.ok()) << handle.status().to_string();
  ASSERT_TRUE(wait_until([&] { return c.settled() == 1; }));
  EXPECT_EQ(c.tokens().size(), 5u);
  expect_aligned(c);
}

TEST_F(LogprobsRunnerTest, NoEntriesUnlessAsked) {
  Session s = open();
  Collector c;
  run(s, {1, 2}, budget(4), c);
  ASSERT_EQ(c.tokens().size(), 4u);
  for (const GenerationUpdate& u : c.updates()) EXPECT_TRUE(u.logprobs.empty());
}

}  // namespace
}  // namespace cellm::testing
