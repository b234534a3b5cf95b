// The executors over the real CPU program: greedy continuations through
// interleaved static/dynamic forwards, padding and chunked prefill must equal
// an uncached double-precision reference forward over each history.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "backend/cpu/cpu_program.h"
#include "driver.h"
#include "executor/cuda_executor.h"
#include "executor/module_executor.h"
#include "recording_program.h"
#include "tiny_model.h"

namespace cellm::executor::testing {
namespace {

constexpr int kNewTokens = 4;
const std::vector<std::vector<std::int64_t>> kPrompts = {
    {3}, {5, 9, 1}, {7, 2, 2, 8, 4, 6, 1}, {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                            11, 12, 13, 14, 15, 16, 17, 18, 19, 20}};

// Greedy over the ids not in `suppressed`.
std::vector<std::int64_t> reference_greedy(const cpu::testing::TinyModel& model,
                                           std::vector<std::int64_t> history,
                                           const std::set<std::int64_t>& suppressed = {}) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < kNewTokens; ++i) {
    const auto logits = cpu::testing::reference_logits(model.spec, model.weights, history);
    const auto& last = logits.back();
    std::int64_t next = -1;
    for (std::size_t id = 0; id < last.size(); ++id) {
      const auto t = static_cast<std::int64_t>(id);
      if (suppressed.contains(t)) continue;
      if (next < 0 || last[id] > last[static_cast<std::size_t>(next)]) next = t;
    }
    out.push_back(next);
    history.push_back(next);
  }
  return out;
}

std::shared_ptr<cpu::CpuProgram> make_program(const cpu::testing::TinyModel& model) {
  program::ProgramOptions options;
  options.static_widths = {1, 2, 4, 8};
  options.max_step = 32;
  options.kv_cells = 256;
  auto made = cpu::CpuProgram::create(model.spec, model.weights, options);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  return std::shared_ptr<cpu::CpuProgram>(std::move(made).value());
}

class CpuProgramExecutorTest : public ::testing::TestWithParam<model::Architecture> {};

TEST_P(CpuProgramExecutorTest, InterleavedScheduleMatchesTheReference) {
  const cpu::testing::TinyModel model = cpu::testing::make_tiny_model(GetParam());
  auto made = CudaExecutor::create(make_program(model), 5, 0);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  CudaExecutor& ex = **made;
  ASSERT_TRUE(ex.initialize());
  Gen p0 = start(ex, kPrompts[0]), p1 = start(ex, kPrompts[1]), p2 = start(ex, kPrompts[2]),
      p3 = start(ex, kPrompts[3]), p4 = start(ex, kPrompts[2]);
  ASSERT_TRUE(run(ex, {{&p3, prefill(p3, 20)}}));
  ASSERT_TRUE(run(ex, {{&p0, prefill(p0, 1)}}));
  ASSERT_TRUE(run(ex, {{&p2, prefill(p2, 4)}}));
  ASSERT_TRUE(run(ex, {{&p1, prefill(p1, 2)}}));
  ASSERT_TRUE(run(ex, {{&p1, prefill(p1, 1)}, {&p2, prefill(p2, 3)}}));
  ASSERT_TRUE(run(ex, {{&p4, prefill(p4, 7)}}));
  ASSERT_TRUE(run(ex, {{&p0, decode(p0)}, {&p1, decode(p1)}, {&p3, decode(p3)}}));
  ASSERT_TRUE(decode_all(ex, {&p0, &p1, &p2, &p3, &p4}, kNewTokens));
  for (const Gen* g : {&p0, &p1, &p2, &p3, &p4}) {
    EXPECT_EQ(g->generated, reference_greedy(model, prompt_of(*g))) << "session " << g->sid;
  }
  for (const ForwardMethodCalls& m : ex.method_calls()) EXPECT_GE(m.calls, 1u) << m.name;
}

TEST_P(CpuProgramExecutorTest, ModuleExecutorMatchesTheReference) {
  const cpu::testing::TinyModel model = cpu::testing::make_tiny_model(GetParam());
  auto made = ModuleExecutor::create(make_program(model), 2, 40);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ASSERT_TRUE((*made)->initialize());
  Gen a = start(**made, kPrompts[3]), b = start(**made, kPrompts[1]);
  ASSERT_TRUE(run(**made, {{&a, prefill(a, 20)}, {&b, prefill(b, 3)}}));
  ASSERT_TRUE(decode_all(**made, {&a, &b}, kNewTokens));
  EXPECT_EQ(a.generated, reference_greedy(model, kPrompts[3]));
  EXPECT_EQ(b.generated, reference_greedy(model, kPrompts[1]));
}

SamplingParams suppressing(SamplingParams p, const std::set<std::int64_t>& ids) {
  for (std::int64_t id : ids) EXPECT_TRUE(p.suppress(static_cast<Token>(id)));
  return p;
}

// CudaExecutor's device-sampling path into the CPU program's own `sample`
// (its logits presented as device ones), against the executor's host
// sampler and the reference: suppressed ids are never drawn, greedy rows take
// the reference argmax over the ids left, and a sampled row draws the same
// tokens on both paths (same coins, same suppression).
TEST_P(CpuProgramExecutorTest, DeviceSamplingHonoursSuppressedIds) {
  const cpu::testing::TinyModel model = cpu::testing::make_tiny_model(GetParam());
  const std::vector<std::int64_t> prompt_a = kPrompts[1], prompt_b = kPrompts[2],
                                  prompt_c = kPrompts[3];
  // A (greedy) loses its reference first token and a few low ids; B
  // (sampled) loses eight ids; C (greedy) loses nothing.
  std::set<std::int64_t> banned_a = {reference_greedy(model, prompt_a)[0], 0, 1, 2};
  const std::set<std::int64_t> banned_b = {10, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<std::int64_t> want_a = reference_greedy(model, prompt_a, banned_a);
  ASSERT_NE(want_a, reference_greedy(model, prompt_a));

  std::vector<std::vector<std::int64_t>> drawn_b;
  for (const bool on_device : {true, false}) {
    SCOPED_TRACE(on_device ? "device sampler" : "host sampler");
    auto recording = std::make_shared<RecordingProgram>(make_program(model));
    recording->flag_device_logits(on_device);
    auto made = CudaExecutor::create(recording, 3, 0);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    CudaExecutor& ex = **made;
    ASSERT_TRUE(ex.initialize());
    Gen a = start(ex, prompt_a), b = start(ex, prompt_b), c = start(ex, prompt_c);
    ex.set_sampling(a.sid, suppressing(SamplingParams{}, banned_a), std::nullopt);
    ex.set_sampling(b.sid, suppressing(SamplingParams{1.5f, 1.0f, 0}, banned_b), 5);
    ASSERT_TRUE(run(ex, {{&a, prefill(a, prompt_a.size())},
                         {&b, prefill(b, prompt_b.size())},
                         {&c, prefill(c, prompt_c.size())}}));
    ASSERT_TRUE(decode_all(ex, {&a, &b, &c}, kNewTokens));
    EXPECT_EQ(a.generated, want_a);
    EXPECT_EQ(c.generated, reference_greedy(model, prompt_c));
    for (std::int64_t t : b.generated) EXPECT_FALSE(banned_b.contains(t)) << t;
    drawn_b.push_back(b.generated);

    const auto& calls = recording->sampler_calls();
    if (!on_device) {
      EXPECT_TRUE(calls.empty());
      continue;
    }
    EXPECT_TRUE(ex.samples_on_device());
    ASSERT_EQ(calls.size(), static_cast<std::size_t>(kNewTokens));
    const auto slots = static_cast<std::ptrdiff_t>(kMaxSuppressedTokens);
    for (const auto& call : calls) {
      EXPECT_EQ(call.method, "sample");
      EXPECT_EQ(call.inputs, 3u);
      ASSERT_EQ(call.suppressed.size(), 3 * kMaxSuppressedTokens);
      // One row per session, in whatever order: A's ids, B's ids, and an
      // empty row for C.
      std::vector<std::set<std::int64_t>> rows;
      for (std::ptrdiff_t r = 0; r < 3; ++r) {
        std::set<std::int64_t> ids;
        for (auto it = call.suppressed.begin() + r * slots;
             it != call.suppressed.begin() + (r + 1) * slots; ++it) {
          if (*it >= 0) ids.insert(*it);
        }
        rows.push_back(ids);
      }
      std::sort(rows.begin(), rows.end());
      std::vector<std::set<std::int64_t>> want = {{}, banned_a, banned_b};
      std::sort(want.begin(), want.end());
      EXPECT_EQ(rows, want);
    }
  }
  EXPECT_EQ(drawn_b[0], drawn_b[1]);
}

INSTANTIATE_TEST_SUITE_P(Architectures, CpuProgramExecutorTest,
                         ::testing::Values(model::Architecture::kLlama,
                                           model::Architecture::kMistral,
                                           model::Architecture::kGemma3),
                         [](const auto& info) {
                           switch (info.param) {
                             case model::Architecture::kLlama: return std::string("llama");
                             case model::Architecture::kMistral: return std::string("mistral");
                             case model::Architecture::kGemma3: return std::string("gemma3");
                             case model::Architecture::kQwen2:
                             case model::Architecture::kQwen3:
                             case model::Architecture::kPhi3: break;
                           }
                           return std::string("other");
                         });

}  // namespace
}  // namespace cellm::executor::testing
