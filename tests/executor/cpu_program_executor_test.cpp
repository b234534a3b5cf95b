// The executors over the real CPU program: greedy continuations through
// interleaved static/dynamic forwards, padding and chunked prefill must equal
// an uncached double-precision reference forward over each history.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cpu/cpu_program.h"
#include "driver.h"
#include "executor/cuda_executor.h"
#include "executor/module_executor.h"
#include "tiny_model.h"

namespace cellm::executor::testing {
namespace {

constexpr int kNewTokens = 4;
const std::vector<std::vector<std::int64_t>> kPrompts = {
    {3}, {5, 9, 1}, {7, 2, 2, 8, 4, 6, 1}, {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                            11, 12, 13, 14, 15, 16, 17, 18, 19, 20}};

std::vector<std::int64_t> reference_greedy(const cpu::testing::TinyModel& model,
                                           std::vector<std::int64_t> history) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < kNewTokens; ++i) {
    const auto logits = cpu::testing::reference_logits(model.spec, model.weights, history);
    const auto& last = logits.back();
    const auto next = std::max_element(last.begin(), last.end()) - last.begin();
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
