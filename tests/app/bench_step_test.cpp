// `cellm bench step`'s decode points (app::time_served_decode) over a Runner
// and a CudaExecutor on the toy program: the asked steps are timed with every
// session decoding in each, greedy and sampled, and a runner that cannot
// decode every session together is an error, not a figure.
#include "app/bench_step.h"

#include <cstdint>
#include <memory>
#include <utility>

#include <gtest/gtest.h>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "executor/cuda_executor.h"
#include "executor/toy_program.h"

namespace cellm::app {
namespace {

constexpr std::int64_t kVocab = 64;

struct Served {
  std::unique_ptr<executor::CudaExecutor> executor;
  std::unique_ptr<Runner> runner;
  ~Served() {
    if (runner) runner->shutdown();
  }
};

// `sessions` sessions of `session_tokens`, of which at most `decodes` decode
// in one step.
std::unique_ptr<Served> serve(int sessions, int session_tokens, std::size_t decodes) {
  executor::testing::ToyConfig config;
  config.vocab = kVocab;
  config.max_context = session_tokens;
  config.static_widths = {1, 2, 4, 8};
  config.dynamic_width = 64;
  config.max_cells = static_cast<std::int64_t>(sessions) * session_tokens + 65;
  config.device_logits = true;
  config.samplers = true;
  auto made = executor::CudaExecutor::create(
      std::make_shared<executor::testing::ToyProgram>(config), sessions, session_tokens);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  auto s = std::make_unique<Served>();
  s->executor = std::move(made).value();
  s->runner = std::make_unique<Runner>(*s->executor,
                                       DecodeFirstScheduler::create(decodes + 32, decodes, 16));
  return s;
}

ServedDecodeOptions options(int batch) {
  ServedDecodeOptions o;
  o.batch = batch;
  o.context = 20;
  o.warmup_steps = 2;
  o.steps = 16;
  o.vocab = kVocab;
  return o;
}

TEST(BenchStepServedTest, TimesTheAskedStepsWithEverySessionDecoding) {
  for (float temperature : {0.0f, 1.0f}) {
    auto s = serve(3, 20 + 2 + 16 + 4, 3);
    ASSERT_NE(s, nullptr);
    ServedDecodeOptions o = options(3);
    o.sampling.temperature = temperature;
    Result<ServedDecode> r = time_served_decode(*s->runner, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // A result at all means every timed step held one delivery of each
    // session (time_served_decode checks it).
    EXPECT_EQ(r->steps, o.steps) << temperature;
    EXPECT_GT(r->ms_per_step, 0.0);
    // Every session was closed: the same runner times another point.
    Result<ServedDecode> again = time_served_decode(*s->runner, o);
    EXPECT_TRUE(again.ok()) << again.status().to_string();
  }
}

TEST(BenchStepServedTest, SessionsThatDoNotDecodeTogetherAreAnError) {
  // Three sessions, one decode a step: never all of them in one step.
  auto s = serve(3, 20 + 2 + 16 + 4, 1);
  ASSERT_NE(s, nullptr);
  Result<ServedDecode> r = time_served_decode(*s->runner, options(3));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("did not decode together"), std::string::npos)
      << r.status().to_string();
}

TEST(BenchStepServedTest, MoreSessionsThanTheExecutorHoldsAreRefused) {
  auto s = serve(2, 20 + 2 + 16 + 4, 2);
  ASSERT_NE(s, nullptr);
  Result<ServedDecode> r = time_served_decode(*s->runner, options(3));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("refused session"), std::string::npos)
      << r.status().to_string();
}

TEST(BenchStepServedTest, RefusesMeaninglessOptions) {
  auto s = serve(1, 64, 1);
  ASSERT_NE(s, nullptr);
  ServedDecodeOptions o = options(1);
  o.context = 1;
  EXPECT_EQ(time_served_decode(*s->runner, o).status().code(), StatusCode::kInvalidArgument);
  o = options(1);
  o.steps = 0;
  EXPECT_EQ(time_served_decode(*s->runner, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cellm::app
