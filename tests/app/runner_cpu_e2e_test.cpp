// The runner scenarios of batching_spec §6.6/§6.7 that a real executor can
// show, run through a Runner over the CudaExecutor and the ModuleExecutor on
// the CPU program of a tiny random model. Every token stream is checked
// against an independent reference: one generation at a time through the same
// stack, and greedy decoding of the double-precision uncached forward of
// tests/backend/cpu/tiny_model.h over the session's full history.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_program.h"
#include "cellm/decode_first_scheduler.h"
#include "cellm/prefix_cache.h"
#include "cellm/runner.h"
#include "engine/gated_executor.h"
#include "engine/runner_fixture.h"
#include "executor/cuda_executor.h"
#include "executor/module_executor.h"
#include "tiny_model.h"

namespace cellm::testing {
namespace {

using Tokens = std::vector<Token>;

constexpr int kMaxSessions = 12;
constexpr int kSessionTokens = 40;

enum class Kind { kCuda, kModule };

struct Outcome {
  Tokens tokens;
  std::optional<FinishReason> reason;
  std::string error;
  GenerationMetrics metrics;
};

class RunnerCpuE2eTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    model_ = cpu::testing::make_tiny_model(model::Architecture::kLlama, 3);
    program::ProgramOptions options;
    options.static_widths = {1, 2, 4, 8};
    options.max_step = 32;
    options.kv_cells = 512;
    auto program = cpu::CpuProgram::create(model_.spec, model_.weights, options);
    ASSERT_TRUE(program.ok()) << program.status().to_string();
    std::shared_ptr<program::Program> shared(std::move(program).value());
    if (GetParam() == Kind::kCuda) {
      auto made = executor::CudaExecutor::create(shared, kMaxSessions, kSessionTokens);
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      inner_ = std::move(made).value();
    } else {
      auto made = executor::ModuleExecutor::create(shared, kMaxSessions, kSessionTokens);
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      inner_ = std::move(made).value();
    }
    kv_before_ = kv_metrics();  // read before the engine thread owns the executor
    gate_ = std::make_unique<GatedExecutor>(*inner_);
    // Chunks of 4 so prompts interleave; room for every decode plus a chunk.
    runner_ = std::make_unique<Runner>(*gate_, DecodeFirstScheduler::create(16, 8, 4));
  }
  void TearDown() override {
    if (gate_) gate_->release();
    if (runner_) runner_->shutdown();
  }

  // Only while no engine thread runs the executor (before start, after shutdown).
  executor::OffGraphKVMetrics kv_metrics() const {
    return GetParam() == Kind::kCuda
               ? static_cast<const executor::CudaExecutor&>(*inner_).kv_metrics()
               : static_cast<const executor::ModuleExecutor&>(*inner_).kv_metrics();
  }

  Session open() {
    auto s = runner_->open_session_async().get();
    EXPECT_TRUE(s.has_value());
    return s ? std::move(*s) : Session();
  }

  static GenConfig greedy(std::int64_t n) {
    GenConfig c;
    c.max_new_tokens = n;
    return c;
  }

  Outcome finish(const GenerationHandle& h, const Collector& c) {
    h.wait();
    EXPECT_TRUE(wait_until([&] { return c.settled() == 1; }));
    return Outcome{c.tokens(), h.finish_reason(), h.error_message(), h.metrics()};
  }
  Outcome generate(Session& s, Tokens delta, GenConfig config) {
    Collector c;
    auto h = s.generate_async(std::move(delta), std::move(config), c.on_update(), c.on_settled());
    return finish(h, c);
  }
  // One generation alone on a fresh session.
  Outcome alone(const Tokens& prompt, GenConfig config) {
    Session s = open();
    return generate(s, prompt, std::move(config));
  }

  // Greedy continuation of `history` by the double-precision reference.
  Tokens reference(Tokens history, int n) const {
    Tokens out;
    for (int i = 0; i < n; ++i) {
      std::vector<std::int64_t> ids(history.begin(), history.end());
      const auto logits = cpu::testing::reference_logits(model_.spec, model_.weights, ids);
      const auto& last = logits.back();
      const auto next =
          static_cast<Token>(std::max_element(last.begin(), last.end()) - last.begin());
      out.push_back(next);
      history.push_back(next);
    }
    return out;
  }

  // Parks the engine inside a one-token step of `gate`, so that what is
  // submitted before release() forms the following batches together.
  GenerationHandle occupy(Session& gate) {
    gate_->hold();
    const std::size_t before = gate_->batches().size();
    auto h = gate.generate_async(Tokens{1}, greedy(1), [](const GenerationUpdate&) {});
    EXPECT_TRUE(gate_->wait_for_executes(before + 1));
    return h;
  }

  cpu::testing::TinyModel model_;
  std::unique_ptr<Executor> inner_;
  executor::OffGraphKVMetrics kv_before_;
  std::unique_ptr<GatedExecutor> gate_;
  std::unique_ptr<Runner> runner_;
};

Tokens concat(std::initializer_list<Tokens> parts) {
  Tokens all;
  for (const Tokens& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

const std::vector<Tokens> kPrompts = {
    {3},
    {5, 9, 1},
    {7, 2, 2, 8, 4, 6, 1},
    {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30},
    {40, 41, 42, 43, 44},
    {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 9, 8},
};

TEST_P(RunnerCpuE2eTest, ConcurrentSessionsGiveTheTokensOfOneAtATime) {
  constexpr int kNew = 6;
  std::vector<Outcome> solo;
  for (const Tokens& p : kPrompts) {
    solo.push_back(alone(p, greedy(kNew)));
    EXPECT_EQ(solo.back().reason, FinishReason::kNewTokenLimit);
    EXPECT_EQ(solo.back().tokens, reference(p, kNew)) << "prompt of " << p.size();
  }
  const std::size_t solo_batches = gate_->batches().size();

  Session gate = open();
  std::vector<Session> sessions;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) sessions.push_back(open());
  auto hg = occupy(gate);
  std::vector<Collector> collectors(kPrompts.size());
  std::vector<GenerationHandle> handles;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    handles.push_back(sessions[i].generate_async(
        kPrompts[i], greedy(kNew), collectors[i].on_update(), collectors[i].on_settled()));
  }
  gate_->release();
  hg.wait();
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    const Outcome o = finish(handles[i], collectors[i]);
    EXPECT_EQ(o.reason, FinishReason::kNewTokenLimit);
    EXPECT_EQ(o.tokens, solo[i].tokens) << "prompt of " << kPrompts[i].size();
    EXPECT_EQ(sessions[i].position(), static_cast<Position>(kPrompts[i].size() + kNew - 1));
  }
  // They really shared steps: fewer batches than the generations took alone.
  const std::size_t together = gate_->batches().size() - solo_batches - 1;
  EXPECT_LT(together, solo_batches);
  bool mixed = false;
  for (std::size_t i = solo_batches + 1; i < gate_->batches().size(); ++i) {
    mixed = mixed || gate_->batches()[i].size() > 2;
  }
  EXPECT_TRUE(mixed);
  runner_->shutdown();
  EXPECT_EQ(runner_->metrics().peak_concurrent_generations,
            static_cast<std::int64_t>(kPrompts.size()));
  EXPECT_EQ(runner_->metrics().steps_failed, 0);
}

TEST_P(RunnerCpuE2eTest, SecondTurnContinuesWithTheCarriedToken) {
  Session s = open();
  const Tokens prompt = kPrompts[2];
  const Outcome first = generate(s, prompt, greedy(3));
  ASSERT_EQ(first.tokens, reference(prompt, 3));
  EXPECT_EQ(s.position(), static_cast<Position>(prompt.size() + 2));  // last token pending
  const Tokens delta{33, 34};
  const Outcome second = generate(s, delta, greedy(4));
  EXPECT_EQ(second.tokens, reference(concat({prompt, first.tokens, delta}), 4));
  EXPECT_EQ(second.metrics.n_prompt_tokens, 2);
  EXPECT_EQ(second.metrics.n_prefilled_tokens, 3);  // the carried token, then the delta
  EXPECT_EQ(s.position(), static_cast<Position>(prompt.size() + 3 + 2 + 3));
}

TEST_P(RunnerCpuE2eTest, ClonesContinueFromTheCommittedPrefix) {
  Session s = open();
  const Tokens prompt = kPrompts[3];
  const Outcome first = generate(s, prompt, greedy(3));
  ASSERT_EQ(first.tokens, reference(prompt, 3));
  const Position committed = s.position();
  ASSERT_EQ(committed, static_cast<Position>(prompt.size() + 2));
  EXPECT_FALSE(s.clone_async(committed + 1).get().has_value());  // the pending token

  auto at_prompt = s.clone_async(static_cast<Position>(prompt.size())).get();
  auto at_end = s.clone_async(committed).get();
  ASSERT_TRUE(at_prompt.has_value());
  ASSERT_TRUE(at_end.has_value());
  const Tokens delta{50, 51, 52};
  const Outcome a = generate(*at_prompt, delta, greedy(4));
  EXPECT_EQ(a.tokens, reference(concat({prompt, delta}), 4));
  const Tokens kept(first.tokens.begin(), first.tokens.begin() + 2);
  const Outcome b = generate(*at_end, delta, greedy(4));
  EXPECT_EQ(b.tokens, reference(concat({prompt, kept, delta}), 4));
  // The source is untouched by its branches and still carries its token.
  const Outcome c = generate(s, delta, greedy(4));
  EXPECT_EQ(c.tokens, reference(concat({prompt, first.tokens, delta}), 4));
}

TEST_P(RunnerCpuE2eTest, CancelledDecodeLeavesTheDeliveredContext) {
  Session s = open();
  const Tokens prompt = kPrompts[1];
  Collector c;
  gate_->hold();
  auto h = s.generate_async(prompt, greedy(30), c.on_update(), c.on_settled());
  gate_->allow(3);  // the prefill and two decodes run; the third decode parks
  ASSERT_TRUE(gate_->wait_for_executes(4));
  h.cancel();
  gate_->release();
  const Outcome cancelled = finish(h, c);
  EXPECT_EQ(cancelled.reason, FinishReason::kCancelled);
  ASSERT_EQ(cancelled.tokens.size(), 3u);
  EXPECT_EQ(cancelled.tokens, reference(prompt, 3));
  // Every delivered token stays in the context.
  EXPECT_EQ(s.position(), static_cast<Position>(prompt.size() + 3));
  const Tokens delta{20, 21};
  const Outcome next = generate(s, delta, greedy(4));
  EXPECT_EQ(next.reason, FinishReason::kNewTokenLimit);
  EXPECT_EQ(next.tokens, reference(concat({prompt, cancelled.tokens, delta}), 4));
}

TEST_P(RunnerCpuE2eTest, CancelledPrefillKeepsOnlyItsConsumedChunks) {
  Session gate = open();
  Session a = open();
  Session b = open();
  auto hg = occupy(gate);
  const Tokens prompt_a = kPrompts[3];  // 5 chunks of 4
  const Tokens prompt_b = kPrompts[5];  // 3 chunks of 4
  Collector ca, cb;
  auto ha = a.generate_async(prompt_a, greedy(4), ca.on_update(), ca.on_settled());
  auto hb = b.generate_async(prompt_b, greedy(4), cb.on_update(), cb.on_settled());
  gate_->allow(1);  // the gate's step ends; the next one (A, B, A, B) parks
  ASSERT_TRUE(gate_->wait_for_executes(2));
  ha.cancel();
  gate_->release();
  hg.wait();
  const Outcome oa = finish(ha, ca);
  const Outcome ob = finish(hb, cb);
  ASSERT_GE(gate_->batches().size(), 2u);
  EXPECT_EQ(gate_->batches()[1], (std::vector<SessionId>{a.id(), b.id(), a.id(), b.id()}));
  EXPECT_EQ(oa.reason, FinishReason::kCancelled);
  EXPECT_TRUE(oa.tokens.empty());
  EXPECT_EQ(oa.metrics.n_prefilled_tokens, 8);
  EXPECT_EQ(a.position(), 8);
  EXPECT_EQ(ob.reason, FinishReason::kNewTokenLimit);
  EXPECT_EQ(ob.tokens, reference(prompt_b, 4));
  // A holds exactly the 8 tokens that ran.
  const Tokens delta{57, 58};
  const Outcome next = generate(a, delta, greedy(3));
  const Tokens consumed(prompt_a.begin(), prompt_a.begin() + 8);
  EXPECT_EQ(next.tokens, reference(concat({consumed, delta}), 3));
}

TEST_P(RunnerCpuE2eTest, StopTokenEndsTheGenerationAndStaysInTheContext) {
  const Tokens prompt = kPrompts[4];
  const Tokens ref = reference(prompt, 8);
  // The first reference token not seen before it can serve as a stop token.
  std::size_t k = 1;
  while (k < ref.size() && std::find(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(k),
                                     ref[k]) != ref.begin() + static_cast<std::ptrdiff_t>(k)) {
    ++k;
  }
  ASSERT_LT(k, ref.size()) << "the reference repeats one token; pick another prompt";
  Session s = open();
  GenConfig config = greedy(20);
  config.stop_tokens = {ref[k]};
  const Outcome o = generate(s, prompt, config);
  EXPECT_EQ(o.reason, FinishReason::kStopToken);
  const Tokens expected(ref.begin(), ref.begin() + static_cast<std::ptrdiff_t>(k) + 1);
  EXPECT_EQ(o.tokens, expected);
  const Tokens delta{12};
  const Outcome next = generate(s, delta, greedy(3));
  EXPECT_EQ(next.tokens, reference(concat({prompt, expected, delta}), 3));
}

TEST_P(RunnerCpuE2eTest, SeededSamplingIsReproducibleAloneAndInABatch) {
  GenConfig config = greedy(10);
  config.sampling.temperature = 0.9f;
  config.sampling.top_p = 0.95f;
  config.seed = 42;
  const Tokens prompt = kPrompts[2];
  const Outcome first = alone(prompt, config);
  const Outcome again = alone(prompt, config);
  ASSERT_EQ(first.tokens.size(), 10u);
  EXPECT_EQ(again.tokens, first.tokens);

  // Beside other (seeded and greedy) generations it draws the same tokens.
  Session gate = open();
  Session s = open();
  Session other = open();
  Session greedy_one = open();
  auto hg = occupy(gate);
  Collector c, d, e;
  GenConfig other_config = config;
  other_config.seed = 7;
  auto h = s.generate_async(prompt, config, c.on_update(), c.on_settled());
  auto ho = other.generate_async(prompt, other_config, d.on_update(), d.on_settled());
  auto hgr = greedy_one.generate_async(kPrompts[3], greedy(10), e.on_update(), e.on_settled());
  gate_->release();
  hg.wait();
  EXPECT_EQ(finish(h, c).tokens, first.tokens);
  const Outcome seeded_other = finish(ho, d);
  EXPECT_EQ(seeded_other.tokens.size(), 10u);
  EXPECT_NE(seeded_other.tokens, first.tokens);  // a different seed draws differently
  EXPECT_EQ(finish(hgr, e).tokens, reference(kPrompts[3], 10));
}

TEST_P(RunnerCpuE2eTest, PrefixCacheHitGivesTheColdTokensWithLessPrefill) {
  PrefixCache cache(4);
  const Tokens prompt = kPrompts[3];
  Session first = open();
  PromptCapture capture = cache.capture_prompt(first, prompt);
  Collector c;
  auto h = first.generate_async(prompt, greedy(5), capture.wrap(c.on_update()), c.on_settled());
  const Outcome cold = finish(h, c);
  ASSERT_TRUE(capture.collect());

  // The same prompt again: all but its last token come from the snapshot.
  auto match = cache.lookup(prompt);
  ASSERT_TRUE(match.has_value());
  EXPECT_EQ(match->matched_tokens, prompt.size() - 1);
  const Outcome warm = generate(match->session, Tokens{prompt.back()}, greedy(5));
  EXPECT_EQ(warm.tokens, cold.tokens);
  EXPECT_EQ(warm.tokens, reference(prompt, 5));
  EXPECT_EQ(warm.metrics.n_prefilled_tokens, 1);
  EXPECT_EQ(cold.metrics.n_prefilled_tokens, static_cast<std::int64_t>(prompt.size()));

  // A longer request reuses the whole prompt.
  const Tokens longer = concat({prompt, {7, 7, 8}});
  auto extended = cache.lookup(longer);
  ASSERT_TRUE(extended.has_value());
  EXPECT_EQ(extended->matched_tokens, prompt.size());
  const Outcome ext = generate(extended->session, Tokens{7, 7, 8}, greedy(4));
  EXPECT_EQ(ext.tokens, reference(longer, 4));
  EXPECT_EQ(ext.metrics.n_prefilled_tokens, 3);
}

TEST_P(RunnerCpuE2eTest, RunningPastTheSessionCapacityFailsAndPoisonsOnlyThatSession) {
  Session s = open();
  Session other = open();
  const Tokens prompt = kPrompts[3];  // 20 of the 40 positions
  const Outcome o = generate(s, prompt, greedy(100));
  EXPECT_EQ(o.reason, FinishReason::kFailed);
  EXPECT_EQ(o.error, "executor failed to execute the batch");
  // The last decode that fits feeds position kSessionTokens - 1.
  EXPECT_EQ(o.tokens.size(), static_cast<std::size_t>(kSessionTokens) - prompt.size() + 1);
  EXPECT_EQ(o.tokens, reference(prompt, static_cast<int>(o.tokens.size())));
  const Outcome after = generate(s, Tokens{1}, greedy(1));
  EXPECT_EQ(after.error, "session cannot continue after an executor failure");
  EXPECT_FALSE(s.clone_async(0).get().has_value());
  const Outcome fine = generate(other, kPrompts[1], greedy(3));
  EXPECT_EQ(fine.tokens, reference(kPrompts[1], 3));
}

TEST_P(RunnerCpuE2eTest, PreparedInputIsRefusedWithoutHarm) {
  auto prepared = std::make_shared<FakePrepared>(Tokens{1, 2, 3});
  EXPECT_EQ(std::get<bool>(runner_->accepts_async(prepared).get()), false);
  Session s = open();
  Collector c;
  auto h = s.generate_async(PreparedInputPtr(prepared), greedy(2), c.on_update(), c.on_settled());
  const Outcome refused = finish(h, c);
  EXPECT_EQ(refused.reason, FinishReason::kFailed);
  EXPECT_EQ(refused.error, "executor does not accept prepared input");
  EXPECT_EQ(s.position(), 0);
  const Outcome o = generate(s, kPrompts[2], greedy(3));
  EXPECT_EQ(o.tokens, reference(kPrompts[2], 3));
}

TEST_P(RunnerCpuE2eTest, CapacityRefusalsLeaveEverySessionUsable) {
  std::vector<Session> sessions;
  for (int i = 0; i < kMaxSessions; ++i) sessions.push_back(open());
  EXPECT_FALSE(runner_->open_session_async().get().has_value());
  const Outcome o = generate(sessions[0], kPrompts[1], greedy(2));
  EXPECT_FALSE(sessions[0].clone_async(1).get().has_value());  // no room for a clone
  // Closing one makes room.
  sessions.pop_back();
  EXPECT_TRUE(wait_until([&] { return runner_->open_session_async().get().has_value(); }));
  const Outcome next = generate(sessions[0], Tokens{4}, greedy(2));
  EXPECT_EQ(next.tokens, reference(concat({kPrompts[1], o.tokens, {4}}), 2));
  runner_->shutdown();
  EXPECT_GE(runner_->metrics().sessions_refused, 1);
}

TEST_P(RunnerCpuE2eTest, ShutdownCancelsLiveGenerationsAndFreesTheCache) {
  Session a = open();
  Session b = open();
  Collector ca;
  gate_->hold();
  auto ha = a.generate_async(kPrompts[3], greedy(15), ca.on_update(), ca.on_settled());
  gate_->allow(2);
  ASSERT_TRUE(gate_->wait_for_executes(3));
  std::thread stopper([&] { runner_->shutdown(); });
  // Once the runner refuses new work the stop is under way.
  ASSERT_TRUE(wait_until([&] {
    return b.clone_async(0).wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }));
  gate_->release();
  stopper.join();
  EXPECT_EQ(ha.finish_reason(), FinishReason::kCancelled);
  EXPECT_FALSE(a.valid());
  EXPECT_FALSE(b.valid());
  const executor::OffGraphKVMetrics kv = kv_metrics();
  EXPECT_EQ(kv.sessions, kv_before_.sessions);
  EXPECT_EQ(kv.cells_used, kv_before_.cells_used);
  EXPECT_GT(kv.high_water, kv_before_.high_water);  // the prompt did occupy cells
}

INSTANTIATE_TEST_SUITE_P(Executors, RunnerCpuE2eTest, ::testing::Values(Kind::kCuda, Kind::kModule),
                         [](const auto& info) {
                           switch (info.param) {
                             case Kind::kCuda: return std::string("cuda_executor");
                             case Kind::kModule: return std::string("module_executor");
                           }
                           return std::string("other");
                         });

}  // namespace
}  // namespace cellm::testing
