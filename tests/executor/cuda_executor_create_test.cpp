// Every malformed program CudaExecutor::create must refuse, each with its
// own code and a message naming what is wrong (batching_spec §4.1).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "executor/cuda_executor.h"
#include "toy_program.h"

namespace cellm::executor::testing {
namespace {

using program::MethodMeta;
using program::TensorSpec;

struct Case {
  std::string name;
  std::function<void(ToyProgram&)> break_it;
  StatusCode code;
  std::string fragment;
};

ToyConfig with_samplers() {
  ToyConfig c;
  c.samplers = true;
  return c;
}

void expect_refused(const Case& c, int max_sessions = 2, int max_session_tokens = 16) {
  SCOPED_TRACE(c.name);
  auto program = std::make_shared<ToyProgram>(with_samplers());
  c.break_it(*program);
  auto made = CudaExecutor::create(program, max_sessions, max_session_tokens);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), c.code) << made.status().to_string();
  EXPECT_NE(made.status().message().find(c.fragment), std::string_view::npos)
      << "'" << c.fragment << "' missing from: " << made.status().message();
}

TEST(CudaExecutorCreateTest, AWellFormedProgramIsAccepted) {
  auto program = std::make_shared<ToyProgram>(with_samplers());
  // Names that only look like forwards are not forwards.
  program->metas["forward_x"] = MethodMeta{};
  program->metas["forward_0"] = MethodMeta{};
  program->metas["forward_99999999999"] = MethodMeta{};
  program->metas["forward_"] = MethodMeta{};
  auto made = CudaExecutor::create(program, 2, 16);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ((*made)->method_calls().size(), 5u);
  EXPECT_TRUE((*made)->samples_on_device());
  EXPECT_EQ((*made)->vocab_size(), 32);
}

TEST(CudaExecutorCreateTest, ASamplerWithoutTheSuppressedIdsInputIsAccepted) {
  auto program = std::make_shared<ToyProgram>(with_samplers());
  program->metas["sample"].inputs.resize(2);
  program->metas["sample"].optional_inputs = 0;
  auto made = CudaExecutor::create(program, 2, 16);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_TRUE((*made)->samples_on_device());
}

// min_new_tokens needs suppressed ids; the runner asks before it installs them.
TEST(CudaExecutorCreateTest, OnlyATwoInputDeviceSamplerCannotSuppressTokens) {
  ToyConfig device = with_samplers();
  device.device_logits = true;
  auto two = std::make_shared<ToyProgram>(device);
  two->metas["sample"].inputs.resize(2);
  two->metas["sample"].optional_inputs = 0;
  auto three = std::make_shared<ToyProgram>(device);
  ToyConfig host;
  host.samplers = false;
  auto none = std::make_shared<ToyProgram>(host);
  for (auto [program, expected] : {std::pair{two, false}, {three, true}, {none, true}}) {
    SCOPED_TRACE(program->metas.contains("sample")
                     ? std::to_string(program->metas["sample"].inputs.size()) + " sample inputs"
                     : std::string("host sampler"));
    auto made = CudaExecutor::create(program, 2, 16);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    const Executor& ex = **made;
    // Known from create on, and initialize() does not change it.
    EXPECT_EQ(ex.can_suppress_tokens(), expected);
    ASSERT_TRUE((*made)->initialize());
    EXPECT_EQ(ex.can_suppress_tokens(), expected);
    EXPECT_EQ((*made)->samples_on_device(), program != none);
  }
}

TEST(CudaExecutorCreateTest, RefusesBadArguments) {
  auto made = CudaExecutor::create(nullptr, 1, 1);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  auto program = std::make_shared<ToyProgram>(ToyConfig{});
  for (auto [sessions, tokens] : {std::pair{0, 16}, {-1, 16}, {2, -1}}) {
    auto r = CudaExecutor::create(program, sessions, tokens);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  auto overflow = CudaExecutor::create(program, 1 << 20, 1 << 20);
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), StatusCode::kInvalidArgument);
}

TEST(CudaExecutorCreateTest, RefusesMalformedPrograms) {
  const auto meta = [](ToyProgram& p, const char* name) -> MethodMeta& { return p.metas[name]; };
  const std::vector<Case> cases = {
      {"no context", [](ToyProgram& p) { p.constants.erase("get_max_context_len"); },
       StatusCode::kInvalidProgram, "get_max_context_len"},
      {"no pool", [](ToyProgram& p) { p.constants.erase("get_offgraph_kv_max_cells"); },
       StatusCode::kInvalidProgram, "get_offgraph_kv_max_cells"},
      {"pool of one", [](ToyProgram& p) { p.constants["get_offgraph_kv_max_cells"] = 1; },
       StatusCode::kInvalidProgram, "scratch"},
      {"two inputs", [&](ToyProgram& p) { meta(p, "forward_4").inputs.pop_back(); },
       StatusCode::kInvalidProgram, "forward_4: takes 2 inputs"},
      {"float tokens", [&](ToyProgram& p) { meta(p, "forward_2").inputs[0].dtype = DType::kF32; },
       StatusCode::kInvalidProgram, "forward_2: input 0 (tokens)"},
      {"tokens of rank 1", [&](ToyProgram& p) { meta(p, "forward_2").inputs[0].shape = {2}; },
       StatusCode::kInvalidProgram, "input 0"},
      {"positions of another width",
       [&](ToyProgram& p) { meta(p, "forward_8").inputs[1].shape = {7}; },
       StatusCode::kInvalidProgram, "forward_8: input 1 (positions)"},
      {"selector of rank 2",
       [&](ToyProgram& p) {
         meta(p, "forward_1").inputs[2].shape = {1, 1};
       },
       StatusCode::kInvalidProgram, "forward_1: input 2 (selector)"},
      {"no outputs", [&](ToyProgram& p) { meta(p, "forward_1").outputs.clear(); },
       StatusCode::kInvalidProgram, "output 0"},
      {"int logits", [&](ToyProgram& p) { meta(p, "forward_1").outputs[0].dtype = DType::kI32; },
       StatusCode::kInvalidProgram, "output 0 (logits)"},
      {"two backends", [&](ToyProgram& p) { meta(p, "forward_4").backends.push_back("other"); },
       StatusCode::kInvalidProgram, "exactly one"},
      {"mixed backends", [&](ToyProgram& p) { meta(p, "forward_8").backends = {"other"}; },
       StatusCode::kInvalidProgram, "backend"},
      {"static width disagrees with its name",
       [&](ToyProgram& p) {
         MethodMeta& m = meta(p, "forward_4");
         m.inputs[0].shape = {1, 5};
         m.inputs[1].shape = {5};
       },
       StatusCode::kInvalidProgram, "forward_4: a static method must take exactly 4"},
      {"dynamic static", [&](ToyProgram& p) { meta(p, "forward_4").dynamic = true; },
       StatusCode::kInvalidProgram, "forward_4"},
      {"static dynamic", [&](ToyProgram& p) { meta(p, "forward_others").dynamic = false; },
       StatusCode::kInvalidProgram, "forward_others: must have a dynamic"},
      {"vocab disagreement",
       [&](ToyProgram& p) {
         meta(p, "forward_2").outputs[0].shape = {2, 31};
       },
       StatusCode::kInvalidProgram, "vocabulary"},
      {"no static method",
       [](ToyProgram& p) {
         for (const char* n : {"forward_1", "forward_2", "forward_4", "forward_8"})
           p.metas.erase(n);
       },
       StatusCode::kInvalidProgram, "no static"},
      {"dynamic not wider",
       [&](ToyProgram& p) {
         MethodMeta& m = meta(p, "forward_others");
         m.inputs[0].shape = {1, 8};
         m.inputs[1].shape = {8};
       },
       StatusCode::kInvalidProgram, "wider than forward_8"},
      {"widest step fills the pool",
       [](ToyProgram& p) { p.constants["get_offgraph_kv_max_cells"] = 32; },
       StatusCode::kInvalidProgram, "narrower than the pool"},
      {"minimum chunk too wide", [](ToyProgram& p) { p.constants["get_min_prefill_chunk"] = 33; },
       StatusCode::kInvalidProgram, "get_min_prefill_chunk"},
      {"published vocab disagrees", [](ToyProgram& p) { p.constants["get_vocab_size"] = 33; },
       StatusCode::kInvalidProgram, "get_vocab_size is 33"},
      {"sampler params of width 3",
       [&](ToyProgram& p) {
         meta(p, "sample").inputs[1].shape = {64, 3};
       },
       StatusCode::kInvalidProgram, "sample: input 1 (params)"},
      {"sampler suppressed ids of width 4",
       [&](ToyProgram& p) {
         meta(p, "sample").inputs[2].shape = {64, 4};
       },
       StatusCode::kInvalidProgram, "sample: input 2 (suppressed ids)"},
      {"sampler suppressed ids as floats",
       [&](ToyProgram& p) { meta(p, "sample").inputs[2].dtype = DType::kF32; },
       StatusCode::kInvalidProgram, "sample: input 2 (suppressed ids)"},
      {"sampler requiring its suppressed ids",
       [&](ToyProgram& p) { meta(p, "sample").optional_inputs = 0; }, StatusCode::kInvalidProgram,
       "must be optional"},
      {"sampler with four inputs",
       [&](ToyProgram& p) { meta(p, "sample").inputs.push_back(TensorSpec{}); },
       StatusCode::kInvalidProgram, "sample: takes 4 inputs"},
      {"sampler returning floats",
       [&](ToyProgram& p) { meta(p, "sample").outputs[0].dtype = DType::kF32; },
       StatusCode::kInvalidProgram, "sample: must return"},
      {"sampler tokens left on the device",
       [&](ToyProgram& p) { meta(p, "sample").outputs[0].device = Device::kCuda; },
       StatusCode::kInvalidProgram, "host"},
      {"argmax with two inputs",
       [&](ToyProgram& p) { meta(p, "sample_argmax").inputs.push_back(TensorSpec{}); },
       StatusCode::kInvalidProgram, "sample_argmax: takes 2 inputs"},
      {"argmax without sample", [](ToyProgram& p) { p.metas.erase("sample"); },
       StatusCode::kInvalidProgram, "sample_argmax is exported without sample"},
      {"no cache layers", [](ToyProgram& p) { p.layout.layer_windows.clear(); },
       StatusCode::kInvalidProgram, "no layers"},
      {"negative window",
       [](ToyProgram& p) {
         p.layout.layer_windows = {0, -4};
       },
       StatusCode::kInvalidProgram, "layer 1"},
  };
  for (const Case& c : cases) expect_refused(c);
}

TEST(CudaExecutorCreateTest, ListedMethodsWithoutMetadataAreMalformed) {
  class Hiding : public ToyProgram {
   public:
    using ToyProgram::ToyProgram;
    Result<MethodMeta> method_meta(std::string_view method) const override {
      if (method == "forward_2") return internal_error("metadata lost");
      return ToyProgram::method_meta(method);
    }
  };
  auto program = std::make_shared<Hiding>(ToyConfig{});
  auto made = CudaExecutor::create(program, 2, 16);
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidProgram);
  EXPECT_NE(made.status().message().find("forward_2"), std::string_view::npos);
}

}  // namespace
}  // namespace cellm::executor::testing
