// `cellm bench step`'s decode points (bench::ServedDecodeBench) over a Runner
// and a CudaExecutor on the toy program: the asked steps are timed with every
// session decoding in each, greedy and sampled, and a runner that cannot
// decode every session together is an error, not a figure.
#include "bench/bench_step.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "executor/cuda_executor.h"
#include "executor/draft_proposer.h"
#include "executor/toy_program.h"

namespace cellm::bench {
namespace {

constexpr std::int64_t kVocab = 64;

struct Served {
  std::unique_ptr<executor::CudaExecutor> executor;
  std::unique_ptr<Runner> runner;
  ~Served() {
    if (runner) runner->shutdown();
  }
};

// Proposes what the toy program will answer (every draft accepted), so a
// step delivers several tokens.
class ToyOracle final : public executor::DraftProposer {
 public:
  void propose(SessionId, std::span<const Token> history, std::size_t max_tokens,
               std::vector<Token>& out) override {
    std::vector<std::int64_t> h(history.begin(), history.end());
    const executor::testing::ToyConfig config;
    for (std::size_t i = 0; i < max_tokens; ++i) {
      h.push_back(executor::testing::toy_next_token(h, config.windows, kVocab));
      out.push_back(static_cast<Token>(h.back()));
    }
  }
};

// `sessions` sessions of `session_tokens`, of which at most `decodes` decode
// in one step; `proposer` set: the executor speculates with it.
std::unique_ptr<Served> serve(int sessions, int session_tokens, std::size_t decodes,
                              std::shared_ptr<executor::DraftProposer> proposer = nullptr) {
  executor::testing::ToyConfig config;
  config.vocab = kVocab;
  config.max_context = session_tokens;
  config.static_widths = {1, 2, 4, 8};
  config.dynamic_width = 64;
  config.max_cells = static_cast<std::int64_t>(sessions) * session_tokens + 65;
  config.device_logits = true;
  config.samplers = true;
  executor::SpeculationOptions speculation;
  speculation.proposer = std::move(proposer);
  auto made =
      executor::CudaExecutor::create(std::make_shared<executor::testing::ToyProgram>(config),
                                     sessions, session_tokens, std::move(speculation));
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  auto s = std::make_unique<Served>();
  s->executor = std::move(made).value();
  s->runner = std::make_unique<Runner>(*s->executor,
                                       DecodeFirstScheduler::create(decodes + 32, decodes, 16));
  return s;
}

constexpr int kWarmup = 2;
constexpr int kSteps = 16;
// Room for a context of 20 and two timed points.
constexpr int kSessionTokens = 20 + 2 * (kWarmup + kSteps + 4) + 2;

TEST(BenchStepServedTest, TimesTheAskedStepsWithEverySessionDecoding) {
  auto s = serve(3, kSessionTokens, 3);
  ASSERT_NE(s, nullptr);
  Result<ServedDecodeBench> bench = ServedDecodeBench::open(*s->runner, 3, kVocab, 7);
  ASSERT_TRUE(bench.ok()) << bench.status().to_string();
  ASSERT_TRUE(bench->prefill_to(20).is_ok());
  EXPECT_EQ(bench->context(), 20);
  SamplingParams sampled;
  sampled.temperature = 1.0f;
  for (const SamplingParams& sampling : {SamplingParams{}, sampled}) {
    const int before = bench->context();
    Result<ServedDecode> r = bench->time(sampling, kWarmup, kSteps);
    // A result at all means every timed step held one delivery of each
    // session (time() checks it).
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->steps, kSteps);
    EXPECT_GT(r->ms_per_step, 0.0);
    EXPECT_EQ(bench->context(), before + ServedDecodeBench::tokens_per_time(kWarmup, kSteps));
    EXPECT_GT(r->mean_keys, before);
    EXPECT_LT(r->mean_keys, bench->context());
  }
  // Already past 20: nothing to prefill.
  const int held = bench->context();
  EXPECT_TRUE(bench->prefill_to(20).is_ok());
  EXPECT_EQ(bench->context(), held);
}

TEST(BenchStepServedTest, SessionsThatDoNotDecodeTogetherAreAnError) {
  // Three sessions, one decode a step: never all of them in one step.
  auto s = serve(3, kSessionTokens, 1);
  ASSERT_NE(s, nullptr);
  Result<ServedDecodeBench> bench = ServedDecodeBench::open(*s->runner, 3, kVocab, 7);
  ASSERT_TRUE(bench.ok()) << bench.status().to_string();
  ASSERT_TRUE(bench->prefill_to(20).is_ok());
  Result<ServedDecode> r = bench->time(SamplingParams{}, kWarmup, kSteps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("did not decode together"), std::string::npos)
      << r.status().to_string();
}

// With speculation a step may deliver several tokens to a session: the
// bench times tokens, not steps, and counts the steps they took.
TEST(BenchStepServedTest, SpeculativeDecodingIsTimedPerToken) {
  auto s = serve(3, kSessionTokens + 16, 3, std::make_shared<ToyOracle>());
  ASSERT_NE(s, nullptr);
  {
    Result<ServedDecodeBench> bench =
        ServedDecodeBench::open(*s->runner, 3, kVocab, 7, /*speculative=*/true);
    ASSERT_TRUE(bench.ok()) << bench.status().to_string();
    ASSERT_TRUE(bench->prefill_to(20).is_ok());
    Result<ServedDecode> r = bench->time(SamplingParams{}, kWarmup, kSteps);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    // Every draft right: each step delivers several tokens.
    EXPECT_GE(r->steps, 1);
    EXPECT_LT(r->steps, kSteps / 2);
    EXPECT_NEAR(r->tokens_per_step * r->steps, kSteps, 1e-9);
    EXPECT_GT(r->ms_per_step, 0.0);
    std::printf("toy program, every draft right: %d steps for %d tokens\n", r->steps, kSteps);
  }
  // The plain bench's check still holds it to one token a step.
  Result<ServedDecodeBench> plain = ServedDecodeBench::open(*s->runner, 3, kVocab, 9);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  ASSERT_TRUE(plain->prefill_to(20).is_ok());
  Result<ServedDecode> checked = plain->time(SamplingParams{}, kWarmup, kSteps);
  ASSERT_FALSE(checked.ok());
  EXPECT_NE(checked.status().message().find("did not decode together"), std::string::npos)
      << checked.status().to_string();
}

TEST(BenchStepServedTest, MoreSessionsThanTheExecutorHoldsAreRefused) {
  auto s = serve(2, kSessionTokens, 2);
  ASSERT_NE(s, nullptr);
  Result<ServedDecodeBench> bench = ServedDecodeBench::open(*s->runner, 3, kVocab, 7);
  ASSERT_FALSE(bench.ok());
  EXPECT_NE(bench.status().message().find("refused session 3"), std::string::npos)
      << bench.status().to_string();
}

TEST(BenchStepServedTest, RefusesMeaninglessArguments) {
  auto s = serve(1, kSessionTokens, 1);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(ServedDecodeBench::open(*s->runner, 0, kVocab, 7).status().code(),
            StatusCode::kInvalidArgument);
  Result<ServedDecodeBench> bench = ServedDecodeBench::open(*s->runner, 1, kVocab, 7);
  ASSERT_TRUE(bench.ok());
  EXPECT_EQ(bench->time(SamplingParams{}, kWarmup, 0).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cellm::bench
