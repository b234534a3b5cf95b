#include "executor/cuda_executor.h"

#include <map>
#include <numeric>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "driver.h"
#include "sampling/penalties.h"
#include "sampling/sampler.h"
#include "toy_program.h"

namespace cellm::executor::testing {
namespace {

constexpr int kNewTokens = 6;
const std::vector<std::vector<std::int64_t>> kPrompts = {
    {3}, {5, 9, 1}, {7, 2, 2, 8, 4, 6, 1}, {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                            11, 12, 13, 14, 15, 16, 17, 18, 19, 20}};

ToyConfig dense() {
  return ToyConfig{};
}
ToyConfig sparse() {
  ToyConfig c;
  c.static_widths = {1, 4};
  c.min_prefill_chunk = 5;
  return c;
}
ToyConfig device_sampling() {
  ToyConfig c;
  c.device_logits = true;
  c.samplers = true;
  return c;
}
ToyConfig config_named(const std::string& name) {
  if (name == "sparse") return sparse();
  if (name == "device") return device_sampling();
  return dense();
}

struct Rig {
  std::shared_ptr<ToyProgram> program;
  std::unique_ptr<CudaExecutor> executor;
};

Rig make(const ToyConfig& config, int max_sessions = 4, int max_session_tokens = 0) {
  Rig s;
  s.program = std::make_shared<ToyProgram>(config);
  auto made = CudaExecutor::create(s.program, max_sessions, max_session_tokens);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return s;
  s.executor = std::move(made).value();
  EXPECT_TRUE(s.executor->initialize());
  return s;
}

std::vector<std::int64_t> expected(const std::vector<std::int64_t>& prompt,
                                   const ToyConfig& config) {
  return toy_greedy(prompt, kNewTokens, config.windows, config.vocab);
}

class CudaExecutorScenarioTest : public ::testing::TestWithParam<std::string> {
 protected:
  ToyConfig config() const { return config_named(GetParam()); }
};

TEST_P(CudaExecutorScenarioTest, ConcurrentGenerationsMatchGreedy) {
  Rig s = make(config());
  CudaExecutor& ex = *s.executor;
  EXPECT_EQ(ex.preferred_batch_tokens(), 32u);
  EXPECT_EQ(ex.max_session_tokens(), 63);  // min(64, 255 / 4)
  const auto calls = ex.method_calls();
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls.front().name, "forward_1");
  EXPECT_EQ(calls.back().name, "forward_others");
  EXPECT_EQ(ex.samples_on_device(), GetParam() == "device");

  std::vector<Gen> gens;
  for (const auto& p : kPrompts) gens.push_back(start(ex, p));
  std::vector<std::pair<Gen*, Input>> work;
  for (Gen& g : gens) work.emplace_back(&g, prefill(g, g.prompt->size()));
  ASSERT_TRUE(run(ex, work));
  ASSERT_TRUE(decode_all(ex, {&gens[0], &gens[1], &gens[2], &gens[3]}, kNewTokens));
  std::int64_t total = 0;
  for (const Gen& g : gens) {
    EXPECT_EQ(g.generated, expected(prompt_of(g), config())) << "prompt of " << g.prompt->size();
    total += g.fed;
  }
  const OffGraphKVMetrics kv = ex.kv_metrics();
  EXPECT_EQ(kv.flat_capacity, 256);
  EXPECT_EQ(kv.cells_used, total);
  EXPECT_LE(kv.logical_length, total + 1);
  EXPECT_GE(kv.flat_capacity, kv.logical_length);
  EXPECT_EQ(kv.allocated_bytes, 256u * 128u);
  EXPECT_EQ(kv.sessions, 4);
}

TEST_P(CudaExecutorScenarioTest, SamePromptTwiceInOneBatchGeneratesTheSame) {
  Rig s = make(config());
  Gen a = start(*s.executor, kPrompts[3]);
  Gen b = start(*s.executor, kPrompts[3]);
  ASSERT_TRUE(run(*s.executor, {{&a, prefill(a, 20)}, {&b, prefill(b, 20)}}));
  ASSERT_TRUE(decode_all(*s.executor, {&a, &b}, kNewTokens));
  EXPECT_EQ(a.generated, expected(kPrompts[3], config()));
  EXPECT_EQ(b.generated, a.generated);
}

TEST_P(CudaExecutorScenarioTest, SessionsReuseCellsAcrossRounds) {
  Rig s = make(config());
  std::int32_t first_high_water = 0;
  for (int round = 0; round < 2; ++round) {
    std::vector<Gen> gens;
    for (const auto& p : kPrompts) gens.push_back(start(*s.executor, p));
    std::vector<std::pair<Gen*, Input>> work;
    for (Gen& g : gens) work.emplace_back(&g, prefill(g, g.prompt->size()));
    ASSERT_TRUE(run(*s.executor, work));
    ASSERT_TRUE(decode_all(*s.executor, {&gens[0], &gens[1], &gens[2], &gens[3]}, kNewTokens));
    for (const Gen& g : gens) {
      EXPECT_EQ(g.generated, expected(prompt_of(g), config())) << "round " << round;
      s.executor->close_session(g.sid);
    }
    const OffGraphKVMetrics kv = s.executor->kv_metrics();
    EXPECT_EQ(kv.cells_used, 0);
    EXPECT_EQ(kv.sessions, 0);
    if (round == 0) first_high_water = kv.high_water;
    EXPECT_EQ(kv.high_water, first_high_water) << "freed cells were not reused";
  }
}

// Widths 20, 1, 4, 2, 4, 7, 3 by hand, then joint decodes: every method runs
// and padding rows never disturb the sessions around them.
TEST_P(CudaExecutorScenarioTest, InterleavedMethodsMatchGreedy) {
  Rig s = make(config(), 5);
  CudaExecutor& ex = *s.executor;
  Gen p0 = start(ex, kPrompts[0]), p1 = start(ex, kPrompts[1]), p2 = start(ex, kPrompts[2]),
      p3 = start(ex, kPrompts[3]), p4 = start(ex, kPrompts[2]);
  ASSERT_TRUE(run(ex, {{&p3, prefill(p3, 20)}}));                                   // 20
  ASSERT_TRUE(run(ex, {{&p0, prefill(p0, 1)}}));                                    // 1
  ASSERT_TRUE(run(ex, {{&p2, prefill(p2, 4)}}));                                    // 4, partial
  ASSERT_TRUE(run(ex, {{&p1, prefill(p1, 2)}}));                                    // 2, partial
  ASSERT_TRUE(run(ex, {{&p1, prefill(p1, 1)}, {&p2, prefill(p2, 3)}}));             // 4
  ASSERT_TRUE(run(ex, {{&p4, prefill(p4, 7)}}));                                    // 7
  ASSERT_TRUE(run(ex, {{&p0, decode(p0)}, {&p1, decode(p1)}, {&p3, decode(p3)}}));  // 3
  ASSERT_TRUE(decode_all(ex, {&p0, &p1, &p2, &p3, &p4}, kNewTokens));
  for (const Gen* g : {&p0, &p1, &p2, &p3, &p4}) {
    EXPECT_EQ(g->generated, expected(prompt_of(*g), config())) << "session " << g->sid;
  }
  std::map<std::string, std::uint64_t> by_name;
  for (const ToyProgram::Call& c : s.program->calls) ++by_name[c.method];
  for (const ForwardMethodCalls& m : ex.method_calls()) {
    EXPECT_GE(m.calls, 1u) << m.name << " never ran";
    EXPECT_EQ(m.calls, by_name[m.name]) << m.name;
  }
}

TEST_P(CudaExecutorScenarioTest, ClonesAndRewindsContinueTheirOwnHistory) {
  Rig s = make(config());
  CudaExecutor& ex = *s.executor;
  Gen a = start(ex, kPrompts[2]);
  ASSERT_TRUE(run(ex, {{&a, prefill(a, 7)}}));
  ASSERT_TRUE(decode_all(ex, {&a}, 3));
  const std::int32_t used = ex.kv_metrics().cells_used;
  // A clone of the first 5 positions shares them and continues elsewhere.
  const std::optional<SessionId> c = ex.clone(a.sid, 5);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(ex.kv_metrics().cells_used, used);
  Gen b;
  b.sid = *c;
  b.fed = 5;
  std::vector<std::int64_t> b_prompt(kPrompts[2].begin(), kPrompts[2].begin() + 5);
  b_prompt.push_back(11);
  b.prompt = std::make_shared<const std::vector<Token>>(b_prompt.begin(), b_prompt.end());
  ASSERT_TRUE(run(ex, {{&b, prefill(b, 1)}}));
  ASSERT_TRUE(decode_all(ex, {&a, &b}, 4));
  EXPECT_EQ(a.generated, toy_greedy(kPrompts[2], 4, config().windows, config().vocab));
  EXPECT_EQ(b.generated, toy_greedy(b_prompt, 4, config().windows, config().vocab));
  // Rewinding a to position 3 and feeding other tokens forgets the old tail.
  Gen r = a;
  const std::vector<std::int64_t> tail = {30, 31};
  std::vector<std::int64_t> r_prompt(kPrompts[2].begin(), kPrompts[2].begin() + 3);
  r_prompt.insert(r_prompt.end(), tail.begin(), tail.end());
  r.prompt = std::make_shared<const std::vector<Token>>(r_prompt.begin(), r_prompt.end());
  r.fed = 3;
  r.generated.clear();
  ASSERT_TRUE(run(ex, {{&r, prefill(r, 2)}}));
  ASSERT_TRUE(decode_all(ex, {&r}, 3));
  EXPECT_EQ(r.generated, toy_greedy(r_prompt, 3, config().windows, config().vocab));
}

INSTANTIATE_TEST_SUITE_P(Programs, CudaExecutorScenarioTest,
                         ::testing::Values("dense", "sparse", "device"),
                         [](const auto& info) { return info.param; });

TEST(CudaExecutorTest, PaddingRowsUseTheScratchCellOnly) {
  Rig s = make(dense());
  CudaExecutor& ex = *s.executor;
  Gen a = start(ex, kPrompts[3]);
  ASSERT_TRUE(run(ex, {{&a, prefill(a, 20)}}));
  const auto seq_a = *ex.cache_control().cell_table(0).begin();
  (void)seq_a;
  const std::vector<cache::CellId> a_cells(ex.cache_control().cell_table(0).begin(),
                                           ex.cache_control().cell_table(0).end());
  Gen b = start(ex, kPrompts[2]);
  // 3 real tokens on forward_4 and 5 on forward_8: padding rows go to scratch.
  ASSERT_TRUE(run(ex, {{&b, prefill(b, 3)}}));
  ASSERT_TRUE(run(ex, {{&b, prefill(b, 4)}, {&a, decode(a)}}));
  EXPECT_EQ(s.program->calls[1].method, "forward_4");
  EXPECT_EQ(s.program->calls[1].real, 3);
  EXPECT_EQ(s.program->calls[2].method, "forward_8");
  EXPECT_EQ(s.program->calls[2].real, 5);
  EXPECT_EQ(ex.cache_control().refcount(cache::kScratchCell), 0);
  const auto after = ex.cache_control().cell_table(0);
  ASSERT_EQ(after.size(), 21u);
  EXPECT_TRUE(std::equal(a_cells.begin(), a_cells.end(), after.begin()));
  for (cache::CellId cell : ex.cache_control().cell_table(1)) EXPECT_NE(cell, cache::kScratchCell);
  ASSERT_TRUE(decode_all(ex, {&a, &b}, kNewTokens));
  EXPECT_EQ(a.generated, expected(kPrompts[3], dense()));
  EXPECT_EQ(b.generated, expected(kPrompts[2], dense()));
}

TEST(CudaExecutorTest, SelectorsPadToTheWidthOrTheMinimumChunk) {
  Rig s = make(sparse());
  CudaExecutor& ex = *s.executor;
  EXPECT_EQ(ex.min_selected_rows(), 5);
  Gen a = start(ex, kPrompts[2]);
  Gen b = start(ex, kPrompts[1]);
  // 7 + 3 = 10 tokens on forward_others, two wanted rows padded to 5.
  ASSERT_TRUE(run(ex, {{&a, prefill(a, 7)}, {&b, prefill(b, 3)}}));
  ASSERT_EQ(s.program->calls.size(), 1u);
  EXPECT_EQ(s.program->calls[0].method, "forward_others");
  EXPECT_EQ(s.program->calls[0].selector, (std::vector<std::int64_t>{6, 9, 9, 9, 9}));
  // One decode on forward_1, two on forward_4 (selector padded to 4).
  ASSERT_TRUE(run(ex, {{&a, decode(a)}, {&b, decode(b)}}));
  EXPECT_EQ(s.program->calls[1].method, "forward_4");
  EXPECT_EQ(s.program->calls[1].selector, (std::vector<std::int64_t>{0, 1, 1, 1}));
  // A slice nobody reads still selects its last row.
  Gen c = start(ex, kPrompts[3]);
  ASSERT_TRUE(run(ex, {{&c, prefill(c, 6)}}));
  EXPECT_EQ(s.program->calls[2].selector, (std::vector<std::int64_t>{5, 5, 5, 5, 5}));
}

TEST(CudaExecutorTest, RefusesLimitsThePoolCannotHold) {
  auto program = std::make_shared<ToyProgram>(dense());
  auto too_many = CudaExecutor::create(program, 8, 64);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("512"), std::string_view::npos);
  auto too_long = CudaExecutor::create(program, 1, 65);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("context"), std::string_view::npos);
  auto crowded = CudaExecutor::create(program, 300, 0);
  ASSERT_FALSE(crowded.ok());
  EXPECT_EQ(crowded.status().code(), StatusCode::kInvalidArgument);
  // Exactly the pool minus scratch is fine; zero divides it, capped by context.
  EXPECT_TRUE(CudaExecutor::create(program, 5, 51).ok());
  auto divided = CudaExecutor::create(program, 10, 0);
  ASSERT_TRUE(divided.ok());
  EXPECT_EQ((*divided)->max_session_tokens(), 25);
  auto capped = CudaExecutor::create(program, 1, 0);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ((*capped)->max_session_tokens(), 64);
}

TEST(CudaExecutorTest, SessionsAreBoundedByMaxSessions) {
  Rig s = make(dense(), 2, 10);
  EXPECT_TRUE(s.executor->open_session().has_value());
  EXPECT_TRUE(s.executor->open_session().has_value());
  EXPECT_FALSE(s.executor->open_session().has_value());
}

TEST(CudaExecutorTest, DeviceSamplerDrawsWhatTheHostSamplerDraws) {
  const std::vector<SamplingParams> policies = {{1.0f, 1.0f, 0}, {1.3f, 1.0f, 3}, {0.8f, 0.9f, 0}};
  bool diverged = false;
  for (std::size_t i = 0; i < policies.size(); ++i) {
    std::vector<std::vector<std::int64_t>> drawn;
    for (const ToyConfig& config : {device_sampling(), dense()}) {
      Rig s = make(config);
      CudaExecutor& ex = *s.executor;
      std::vector<Gen> gens;
      for (const auto& p : kPrompts) gens.push_back(start(ex, p));
      for (std::size_t k = 0; k < gens.size(); ++k)
        ex.set_sampling(gens[k].sid, policies[i], i + k);
      ASSERT_TRUE(run(ex, {{&gens[3], prefill(gens[3], 20)}}));
      ASSERT_TRUE(run(ex, {{&gens[0], prefill(gens[0], 1)},
                           {&gens[1], prefill(gens[1], 3)},
                           {&gens[2], prefill(gens[2], 7)}}));
      ASSERT_TRUE(decode_all(ex, {&gens[0], &gens[1], &gens[2], &gens[3]}, kNewTokens));
      std::vector<std::int64_t> all;
      for (const Gen& g : gens) {
        all.insert(all.end(), g.generated.begin(), g.generated.end());
        diverged |= g.generated != expected(prompt_of(g), config);
      }
      drawn.push_back(all);
      if (config.device_logits) {
        bool sampled_on_device = false;
        for (const auto& c : s.program->calls) sampled_on_device |= c.method == "sample";
        EXPECT_TRUE(sampled_on_device);
      }
    }
    EXPECT_EQ(drawn[0], drawn[1]) << "policy " << i;
  }
  EXPECT_TRUE(diverged);
}

// Logit adjustments on "device" logits go through the program's
// sample_penalize before its sampler, only for steps where some session asks
// for them, and draw what the host reference draws; a neutral session in the
// same batch stays on the plain path and decodes greedily as before.
TEST(CudaExecutorTest, DevicePenaltiesDrawWhatTheHostReferenceDraws) {
  const ToyConfig device = device_sampling();
  const std::vector<std::int64_t> greedy_run = expected(kPrompts[1], device);
  std::vector<SamplingParams> policies(4);
  policies[0].repetition_penalty = 1.5f;  // greedy
  policies[1].logit_bias = sampling::make_logit_bias(
      {{static_cast<Token>(greedy_run[0]), -100.0f},
       {static_cast<Token>((greedy_run[0] + 5) % device.vocab), 2.0f}});  // greedy
  policies[2] = SamplingParams{1.0f, 1.0f, 0};
  policies[2].frequency_penalty = 0.7f;
  policies[2].presence_penalty = 0.3f;
  policies[2].min_p = 0.1f;
  policies[3] = SamplingParams{0.8f, 1.0f, 5};
  policies[3].repetition_penalty = 1.2f;
  policies[3].logit_bias = sampling::make_logit_bias({{7, 1.5f}});
  for (std::size_t i = 0; i < policies.size(); ++i) {
    std::vector<std::vector<std::int64_t>> drawn;
    for (const ToyConfig& config : {device, dense()}) {
      Rig s = make(config);
      CudaExecutor& ex = *s.executor;
      Gen a = start(ex, kPrompts[1]), plain = start(ex, kPrompts[0]);
      ex.set_sampling(a.sid, policies[i], 11 + i);
      ex.set_sampling(plain.sid, SamplingParams{}, 1);
      ASSERT_TRUE(run(ex, {{&a, prefill(a, a.prompt->size())}}));
      ASSERT_TRUE(run(ex, {{&plain, prefill(plain, plain.prompt->size())}}));
      ASSERT_TRUE(decode_all(ex, {&a, &plain}, kNewTokens));
      EXPECT_EQ(plain.generated, expected(kPrompts[0], config));
      drawn.push_back(a.generated);
      if (!config.device_logits) continue;
      // The plain session's own step never penalizes; the others always do,
      // each penalize call right before a sampler call.
      std::size_t penalize_calls = 0;
      const auto& calls = s.program->calls;
      for (std::size_t c = 0; c < calls.size(); ++c) {
        if (calls[c].method != program::kPenalizeMethod) continue;
        ++penalize_calls;
        ASSERT_LT(c + 1, calls.size());
        EXPECT_TRUE(calls[c + 1].method == "sample" || calls[c + 1].method == "sample_argmax");
      }
      EXPECT_EQ(penalize_calls, static_cast<std::size_t>(kNewTokens)) << "policy " << i;
    }
    EXPECT_EQ(drawn[0], drawn[1]) << "policy " << i;
    if (i == 1) {
      EXPECT_NE(drawn[0][0], greedy_run[0]) << "logit_bias -100 left the greedy token";
    }
  }
}

// Suppressed ids (min_tokens) through the program's sample method: passed as
// its optional third input only when some row suppresses, never drawn, and
// the draws equal the host sampler's.
TEST(CudaExecutorTest, DeviceSamplerHonoursSuppressedIds) {
  const ToyConfig device = device_sampling();
  // Greedy A loses its whole greedy continuation; sampled B loses eight ids;
  // C suppresses nothing.
  std::set<std::int64_t> banned_a;
  for (std::int64_t t : expected(kPrompts[1], device)) banned_a.insert(t);
  const std::set<std::int64_t> banned_b = {0, 3, 5, 7, 9, 11, 13, 15};
  auto policy = [](SamplingParams p, const std::set<std::int64_t>& ids) {
    for (std::int64_t id : ids) EXPECT_TRUE(p.suppress(static_cast<Token>(id)));
    return p;
  };
  std::vector<std::vector<std::int64_t>> drawn;
  for (const ToyConfig& config : {device, dense()}) {
    Rig s = make(config);
    CudaExecutor& ex = *s.executor;
    Gen a = start(ex, kPrompts[1]), b = start(ex, kPrompts[2]), c = start(ex, kPrompts[0]);
    // Before any suppression the device path keeps the two-input form.
    ex.set_sampling(b.sid, SamplingParams{1.0f, 1.0f, 0}, 3);
    ASSERT_TRUE(run(ex, {{&b, prefill(b, 7)}}));
    if (config.device_logits) {
      ASSERT_EQ(s.program->calls.back().method, "sample");
      EXPECT_EQ(s.program->calls.back().inputs, 2u);
    }
    ex.set_sampling(a.sid, policy(SamplingParams{}, banned_a), std::nullopt);
    ex.set_sampling(b.sid, policy(SamplingParams{1.0f, 1.0f, 0}, banned_b), 3);
    ASSERT_TRUE(run(ex, {{&a, prefill(a, 3)}, {&c, prefill(c, 1)}, {&b, decode(b)}}));
    ASSERT_TRUE(decode_all(ex, {&a, &b, &c}, kNewTokens));
    for (std::int64_t t : a.generated) EXPECT_FALSE(banned_a.contains(t)) << t;
    for (std::int64_t t : b.generated) EXPECT_FALSE(banned_b.contains(t)) << t;
    EXPECT_EQ(c.generated, expected(kPrompts[0], config));
    std::vector<std::int64_t> all = a.generated;
    all.insert(all.end(), b.generated.begin(), b.generated.end());
    all.insert(all.end(), c.generated.begin(), c.generated.end());
    drawn.push_back(all);
    if (!config.device_logits) continue;
    std::size_t with_ids = 0;
    for (const ToyProgram::Call& call : s.program->calls) {
      if (call.method != "sample" || call.inputs != 3) continue;
      ++with_ids;
      ASSERT_EQ(call.suppressed.size(),
                static_cast<std::size_t>(call.width) * kMaxSuppressedTokens);
      // Every row is one session's list (-1 padded): A's, B's or C's empty one.
      for (std::int64_t r = 0; r < call.width; ++r) {
        std::set<std::int64_t> ids;
        for (std::size_t k = 0; k < kMaxSuppressedTokens; ++k) {
          const std::int64_t id =
              call.suppressed[static_cast<std::size_t>(r) * kMaxSuppressedTokens + k];
          if (id >= 0) ids.insert(id);
        }
        EXPECT_TRUE(ids.empty() || ids == banned_a || ids == banned_b) << "row " << r;
      }
    }
    EXPECT_EQ(with_ids, static_cast<std::size_t>(kNewTokens));
  }
  EXPECT_EQ(drawn[0], drawn[1]);
}

// A sampler without the suppressed-ids input is never handed them: a step
// that would need them fails instead (the runner refuses such generations
// first, through can_suppress_tokens()).
TEST(CudaExecutorTest, ATwoInputDeviceSamplerIsNeverCalledWithSuppressedIds) {
  ToyConfig config = device_sampling();
  auto program = std::make_shared<ToyProgram>(config);
  program->metas["sample"].inputs.resize(2);
  program->metas["sample"].optional_inputs = 0;
  auto made = CudaExecutor::create(program, 2, 16);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  CudaExecutor& ex = **made;
  ASSERT_TRUE(ex.initialize());
  EXPECT_FALSE(ex.can_suppress_tokens());
  Gen a = start(ex, kPrompts[1]);
  ex.set_sampling(a.sid, SamplingParams{1.0f, 1.0f, 0}, 5);
  ASSERT_TRUE(run(ex, {{&a, prefill(a, 3)}}));
  ASSERT_EQ(program->calls.back().method, "sample");
  EXPECT_EQ(program->calls.back().inputs, 2u);
  SamplingParams banned{1.0f, 1.0f, 0};
  ASSERT_TRUE(banned.suppress(4));
  ex.set_sampling(a.sid, banned, 5);
  const std::size_t calls = program->calls.size();
  EXPECT_FALSE(run(ex, {{&a, decode(a)}}));
  for (std::size_t i = calls; i < program->calls.size(); ++i) {
    EXPECT_NE(program->calls[i].method, "sample") << "call " << i;
  }
}

TEST(CudaExecutorTest, GreedyDeviceRowsTakeTheArgmaxMethod) {
  Rig s = make(device_sampling());
  Gen a = start(*s.executor, kPrompts[1]);
  ASSERT_TRUE(run(*s.executor, {{&a, prefill(a, 3)}}));
  EXPECT_EQ(s.program->calls.back().method, "sample_argmax");
  s.executor->set_sampling(a.sid, SamplingParams{0.7f, 1.0f, 0}, 1);
  ASSERT_TRUE(run(*s.executor, {{&a, decode(a)}}));
  EXPECT_EQ(s.program->calls.back().method, "sample");
}

TEST(CudaExecutorTest, DeviceLogitsWithoutASamplerFailTheBatch) {
  ToyConfig config = device_sampling();
  config.samplers = false;
  Rig s = make(config);
  Gen a = start(*s.executor, kPrompts[1]);
  EXPECT_FALSE(run(*s.executor, {{&a, prefill(a, 3)}}));
}

TEST(CudaExecutorTest, RefusedBatchesChangeNothingAndFailedForwardsFail) {
  Rig s = make(dense());
  CudaExecutor& ex = *s.executor;
  Gen a = start(ex, kPrompts[2]);
  ASSERT_TRUE(run(ex, {{&a, prefill(a, 7)}}));
  const OffGraphKVMetrics before = ex.kv_metrics();
  Gen gap = a;
  gap.fed = 9;
  BatchInput batch{{decode(gap)}};
  BatchOutput out;
  EXPECT_FALSE(ex.execute(batch, out));
  ASSERT_EQ(out.outputs.size(), 1u);
  EXPECT_FALSE(out.outputs[0].has_value());
  EXPECT_EQ(ex.kv_metrics().cells_used, before.cells_used);
  EXPECT_EQ(s.program->calls.size(), 1u);
  s.program->fail_method = "forward_1";
  EXPECT_FALSE(run(ex, {{&a, decode(a)}}));
}

TEST(CudaExecutorTest, InitializeFailsWhenAMethodWillNotLoadAndExecuteWaitsForIt) {
  auto program = std::make_shared<ToyProgram>(dense());
  auto made = CudaExecutor::create(program, 2, 16);
  ASSERT_TRUE(made.ok());
  CudaExecutor& ex = **made;
  Gen a = start(ex, kPrompts[0]);
  EXPECT_FALSE(run(ex, {{&a, prefill(a, 1)}}));  // not initialized yet
  program->fail_method = "forward_4";
  EXPECT_FALSE(ex.initialize());
  program->fail_method.clear();
  EXPECT_TRUE(ex.initialize());
  EXPECT_TRUE(run(ex, {{&a, prefill(a, 1)}}));
}

}  // namespace
}  // namespace cellm::executor::testing
