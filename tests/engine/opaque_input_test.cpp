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

// A warm session (one pending token carried from raw turns) continues with a
// prepared backing: the pending token rides as raw input in the first
// prepared batch, chunks sit at the backing's base position.
struct WarmCase {
  Tokens backing;
  std::size_t batches;
  std::vector<std::size_t> offsets;
  Position final_position;
};

class WarmOpaqueTest : public OpaqueInputTest, public ::testing::WithParamInterface<WarmCase> {};

TEST_P(WarmOpaqueTest, WarmOpaqueChunksAndOrdinaryRawText) {
  const WarmCase& param = GetParam();
  exec.set_accept_prepared(true);
  Session s = open();
  Collector a, b, c;
  run(s, {1}, budget(1), a);
  run(s, {2}, budget(1), b);  // carries the first pending token
  ASSERT_EQ(s.position(), 3);
  const std::size_t before = exec.batches().size();
  auto backing = std::make_shared<FakePrepared>(param.backing);
  auto h = s.generate_async(PreparedInputPtr(backing), budget(1), c.on_update());
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  auto batches = exec.batches();
  ASSERT_EQ(batches.size(), before + param.batches);
  // The pending token shares the first prepared batch, as raw input.
  const auto& first = batches[before];
  ASSERT_EQ(first.size(), 2u);
  EXPECT_FALSE(first[0].prepared);
  EXPECT_EQ(first[0].slice, (Tokens{b.tokens().back()}));
  EXPECT_EQ(first[0].position, 3);
  EXPECT_FALSE(first[0].produce_output);
  std::vector<std::size_t> offsets;
  Position next = 3;  // absolute positions stay contiguous across the chunks
  for (std::size_t i = before; i < batches.size(); ++i) {
    for (const auto& in : batches[i]) {
      EXPECT_EQ(in.position + static_cast<Position>(in.offset), next);
      next += static_cast<Position>(in.size);
      if (!in.prepared) continue;
      EXPECT_EQ(in.position, 4);
      EXPECT_EQ(in.payload, backing.get());
      offsets.push_back(in.offset);
    }
  }
  EXPECT_EQ(offsets, param.offsets);
  EXPECT_EQ(s.position(), param.final_position);
  const auto n = static_cast<std::int64_t>(param.backing.size());
  EXPECT_EQ(h.metrics().n_prompt_tokens, n);
  EXPECT_EQ(h.metrics().n_prefilled_tokens, n + 1);
  const Tokens history = exec.history(s.id());
  ASSERT_GE(history.size(), 4 + param.backing.size());
  EXPECT_EQ(Tokens(history.begin() + 4, history.begin() + 4 + n), param.backing);
}

// Batches: [pending, 0..2) [2..4) [4..5)  and  [pending, 0..2).
INSTANTIATE_TEST_SUITE_P(Backings, WarmOpaqueTest,
                         ::testing::Values(WarmCase{{11, 7, 7, 7, 22}, 2, {0, 2, 4}, 9},
                                           WarmCase{{11, 22}, 1, {0}, 6}));

TEST_F(OpaqueInputTest, SuffixSharesBackingAndUsesViewRelativeOffsets) {
  exec.set_accept_prepared(true);
  auto backing = std::make_shared<FakePrepared>(Tokens{11, 7, 7, 7, 22});
  PreparedInputPtr view = backing->suffix(2);
  ASSERT_NE(view, nullptr);
  EXPECT_EQ(view->size(), 3u);
  EXPECT_EQ(static_cast<const FakePrepared&>(*view).storage(), backing->storage());
  EXPECT_EQ(backing->suffix(5), nullptr);
  EXPECT_EQ(backing->suffix(std::numeric_limits<std::size_t>::max()), nullptr);

  Session s = open();
  Collector c;
  auto h = s.generate_async(view, budget(1), c.on_update());
  h.wait();
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  std::vector<Tokens> slices;
  std::vector<std::size_t> offsets;
  for (const auto& batch : exec.batches()) {
    for (const auto& in : batch) {
      ASSERT_TRUE(in.prepared);
      EXPECT_EQ(in.payload, view.get());  // every chunk points at the view itself
      EXPECT_EQ(in.position, 0);
      slices.push_back(in.slice);
      offsets.push_back(in.offset);
    }
  }
  EXPECT_EQ(slices, (std::vector<Tokens>{{7, 7}, {22}}));
  EXPECT_EQ(offsets, (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(s.position(), 3);
  EXPECT_EQ(exec.history(s.id()), (Tokens{7, 7, 22}));
  EXPECT_EQ(h.metrics().n_prompt_tokens, 3);
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
  // Chunks [0,2) then [2,4) + [4,5) (budget 3): two prefill steps, one decode.
  EXPECT_EQ(h.metrics().n_decode_steps, 1);
  EXPECT_EQ(h.metrics().n_prefill_steps, 2);
  for (const auto& batch : batches) {
    for (const auto& in : batch) {
      if (in.prepared) {
        EXPECT_EQ(in.payload, backing.get());
      }
    }
  }
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

// A prepared input of a kind the executor does not take is refused at
// admission; the raw generation queued beside it runs as if it were alone.
TEST_F(OpaqueInputTest, WrongKindDoesNotFailConcurrentRawGeneration) {
  exec.set_accept_prepared(true);
  Session gate = open();
  Session raw = open();
  Session other = open();
  auto hg = occupy_engine(gate);
  Collector cr, co;
  auto hr = raw.generate_async(Tokens{1, 2}, budget(3), cr.on_update(), cr.on_settled());
  auto wrong = std::make_shared<OtherPrepared>(2);
  auto ho =
      other.generate_async(PreparedInputPtr(wrong), budget(3), co.on_update(), co.on_settled());
  exec.release();
  hg.wait();
  hr.wait();
  ho.wait();
  EXPECT_EQ(ho.finish_reason(), FinishReason::kFailed);
  EXPECT_EQ(ho.error_message(), "executor does not accept prepared input");
  EXPECT_EQ(co.terminal_count(), 1);
  EXPECT_EQ(hr.finish_reason(), FinishReason::kNewTokenLimit);
  const Token base = static_cast<Token>(raw.id() * 1000);
  EXPECT_EQ(cr.tokens(), (Tokens{base + 1, base + 2, base + 3}));
  for (const auto& batch : exec.batches()) {
    for (const auto& in : batch) EXPECT_NE(in.sid, other.id());
  }
  EXPECT_EQ(other.position(), 0);
  for (const auto& call : exec.sampling()) EXPECT_NE(call.sid, other.id());
  EXPECT_EQ(std::get<bool>(runner->accepts_async(wrong).get()), false);
  Collector again;
  EXPECT_EQ(run(other, {5}, budget(1), again).finish_reason(), FinishReason::kNewTokenLimit);
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
