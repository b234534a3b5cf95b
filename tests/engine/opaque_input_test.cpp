// Prepared (opaque) inputs: accepted only when the executor says so, chunked
// over a shared backing, with a carried pending token sent as its own raw
// slice.
#include <gtest/gtest.h>

#include <limits>

#include "engine/runner_fixture.h"

namespace cellm::testing {
namespace {

using Tokens = std::vector<Token>;

class OpaqueInputTest : public RunnerFixture {
 protected:
  void SetUp() override { start_with(DecodeFirstScheduler::create(3, 1, 2)); }
};

TEST(PreparedInputTest, DetokenizationSeedDefaultsToAbsent) {
  FakePrepared p({1, 2, 3});
  EXPECT_FALSE(p.initial_detokenization_token().has_value());
}

TEST_F(OpaqueInputTest, WarmOpaqueChunksAndOrdinaryRawText) {
  exec.set_accept_prepared(true);
  Session s = open();
  Collector a, b, c;
  run(s, {1}, budget(1), a);
  run(s, {2}, budget(1), b);  // carries the first pending token
  ASSERT_EQ(s.position(), 3);
  const std::size_t before = exec.batches().size();
  auto backing = std::make_shared<FakePrepared>(Tokens{11, 7, 7, 7, 22});
  auto h = s.generate_async(PreparedInputPtr(backing), budget(1), c.on_update());
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  auto batches = exec.batches();
  ASSERT_EQ(batches.size(), before + 2);  // [pending, 0..2) then [2..4), [4..5)
  // The pending token shares the first prepared batch, as raw input.
  const auto& first = batches[before];
  ASSERT_EQ(first.size(), 2u);
  EXPECT_FALSE(first[0].prepared);
  EXPECT_EQ(first[0].slice, (Tokens{b.tokens().back()}));
  EXPECT_EQ(first[0].position, 3);
  EXPECT_FALSE(first[0].produce_output);
  std::vector<std::size_t> offsets;
  for (std::size_t i = before; i < batches.size(); ++i) {
    for (const auto& in : batches[i]) {
      if (!in.prepared) continue;
      EXPECT_EQ(in.position, 4);
      offsets.push_back(in.offset);
    }
  }
  EXPECT_EQ(offsets, (std::vector<std::size_t>{0, 2, 4}));
  EXPECT_EQ(s.position(), 9);
  EXPECT_EQ(h.metrics().n_prompt_tokens, 5);
  EXPECT_EQ(h.metrics().n_prefilled_tokens, 6);
  const Tokens history = exec.history(s.id());
  EXPECT_EQ(Tokens(history.begin() + 4, history.begin() + 9), (Tokens{11, 7, 7, 7, 22}));
}

TEST_F(OpaqueInputTest, SharedOpaqueChunksKeepOwnershipAndUseRawFeedback) {
  exec.set_accept_prepared(true);
  Session s = open();
  auto backing = std::make_shared<FakePrepared>(Tokens{11, 7, 7, 7, 22});
  Collector c;
  auto h = s.generate_async(PreparedInputPtr(backing), budget(2), c.on_update());
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  auto batches = exec.batches();
  ASSERT_FALSE(batches.empty());
  const auto& feedback = batches.back()[0];
  EXPECT_FALSE(feedback.prepared);
  EXPECT_EQ(feedback.position, 5);
  EXPECT_EQ(s.position(), 6);
  EXPECT_EQ(h.metrics().n_decode_steps, 1);
  EXPECT_GE(h.metrics().n_prefill_steps, 2);
  runner->shutdown();
  EXPECT_EQ(backing.use_count(), 1);  // no chunk kept the backing alive
}

TEST_F(OpaqueInputTest, DefaultExecutorRejectsOpaqueWithoutPoisoningSession) {
  Session s = open();
  Collector c;
  auto h = run(s, {}, budget(1), c);  // empty raw delta first: still usable after
  auto backing = std::make_shared<FakePrepared>(Tokens{1, 2});
  Collector d;
  const int settled = d.settled();
  auto p = s.generate_async(PreparedInputPtr(backing), budget(1), d.on_update(), d.on_settled());
  p.wait();
  EXPECT_EQ(p.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(p.error_message(), "executor does not accept prepared input");
  EXPECT_TRUE(wait_until([&] { return d.settled() > settled; }));
  EXPECT_TRUE(exec.sampling().empty());
  EXPECT_EQ(s.position(), 0);
  Collector e;
  EXPECT_EQ(run(s, {1}, budget(1), e).finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(std::get<bool>(runner->accepts_async(backing).get()), false);
  EXPECT_EQ(std::get<bool>(runner->accepts_async(nullptr).get()), false);
  exec.set_accept_prepared(true);
  EXPECT_EQ(std::get<bool>(runner->accepts_async(backing).get()), true);
  runner->shutdown();
  EXPECT_EQ(std::get<AcceptanceError>(runner->accepts_async(backing).get()),
            AcceptanceError::kUnavailable);
}

TEST_F(OpaqueInputTest, InvalidOpaqueMetadata) {
  exec.set_accept_prepared(true);
  Session s = open();
  const std::size_t too_big = static_cast<std::size_t>(std::numeric_limits<Position>::max()) + 1;
  for (PreparedInputPtr input :
       {PreparedInputPtr(), PreparedInputPtr(std::make_shared<FakePrepared>(Tokens{})),
        PreparedInputPtr(std::make_shared<FakePrepared>(Tokens{1}, too_big))}) {
    Collector c;
    auto h = s.generate_async(input, budget(1), c.on_update());
    h.wait();
    EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  }
  EXPECT_TRUE(exec.batches().empty());
  EXPECT_EQ(s.position(), 0);
}

}  // namespace
}  // namespace cellm::testing
