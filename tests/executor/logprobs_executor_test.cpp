// Logprobs through the CudaExecutor on both sampling paths of the toy
// program: host logits (SessionTable draws) and "device" logits (the
// program's sample_logprobs after its sampler). A session whose policy asks
// gets one entry per drawn token, equal to the host reference over the row
// the toy produced; a session that does not ask gets none, and a step where
// no session asks never calls sample_logprobs.
#include <gtest/gtest.h>

#include "driver.h"
#include "executor/cuda_executor.h"
#include "sampling/logprobs.h"
#include "toy_program.h"

namespace cellm::executor::testing {
namespace {

constexpr int kNewTokens = 5;
const std::vector<std::int64_t> kPromptA = {5, 9, 1};
const std::vector<std::int64_t> kPromptB = {7, 2, 2, 8};
const std::vector<std::int64_t> kPromptC = {3};

ToyConfig host_config() {
  return ToyConfig{};
}
ToyConfig device_config() {
  ToyConfig c;
  c.device_logits = true;
  c.samplers = true;
  return c;
}

std::unique_ptr<CudaExecutor> make_executor(std::shared_ptr<ToyProgram> program) {
  auto made = CudaExecutor::create(std::move(program), 4, 0);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  auto ex = std::move(made).value();
  EXPECT_TRUE(ex->initialize());
  return ex;
}

// The reference entries for `g`: each drawn token against the row the toy
// returns after the prompt and the tokens drawn before it.
std::vector<TokenLogprobs> reference(const Gen& g, const ToyConfig& config, float temperature,
                                     int count) {
  std::vector<std::int64_t> history(g.prompt->begin(), g.prompt->end());
  std::vector<TokenLogprobs> out;
  for (std::int64_t drawn : g.generated) {
    const std::int64_t next = toy_next_token(history, config.windows, config.vocab);
    const std::vector<float> row = toy_logits(next, config.vocab);
    TokenLogprobs lp;
    sampling::row_logprobs(row, temperature, {}, static_cast<Token>(drawn), count, lp);
    out.push_back(lp);
    history.push_back(drawn);
  }
  return out;
}

void expect_same(const std::vector<TokenLogprobs>& got, const std::vector<TokenLogprobs>& want,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].token, want[i].token) << what << " token " << i;
    EXPECT_FLOAT_EQ(got[i].logprob, want[i].logprob) << what << " token " << i;
    ASSERT_EQ(got[i].top.size(), want[i].top.size()) << what << " token " << i;
    for (std::size_t j = 0; j < got[i].top.size(); ++j) {
      EXPECT_EQ(got[i].top[j].token, want[i].top[j].token) << what << " token " << i;
      EXPECT_FLOAT_EQ(got[i].top[j].logprob, want[i].top[j].logprob) << what << " token " << i;
    }
  }
}

std::size_t logprob_calls(const ToyProgram& program) {
  std::size_t n = 0;
  for (const auto& c : program.calls) n += c.method == program::kLogprobsMethod;
  return n;
}

TEST(LogprobsExecutorTest, EntriesEqualTheReferenceOnBothPaths) {
  for (const ToyConfig& config : {host_config(), device_config()}) {
    auto program = std::make_shared<ToyProgram>(config);
    auto ex = make_executor(program);
    ASSERT_NE(ex, nullptr);
    Gen a = start(*ex, kPromptA), b = start(*ex, kPromptB), c = start(*ex, kPromptC);
    SamplingParams greedy;
    greedy.logprobs = 4;
    SamplingParams sampled{0.9f, 1.0f, 6};
    sampled.logprobs = 0;
    ex->set_sampling(a.sid, greedy, 1);
    ex->set_sampling(b.sid, sampled, 2);
    ex->set_sampling(c.sid, SamplingParams{}, 3);
    // C alone first: nobody asks, so no sample_logprobs call.
    ASSERT_TRUE(run(*ex, {{&c, prefill(c, c.prompt->size())}}));
    ASSERT_TRUE(decode_all(*ex, {&c}, kNewTokens));
    EXPECT_EQ(logprob_calls(*program), 0u);
    EXPECT_TRUE(c.logprobs.empty());
    ASSERT_TRUE(run(*ex, {{&a, prefill(a, a.prompt->size())}, {&b, prefill(b, b.prompt->size())}}));
    ASSERT_TRUE(decode_all(*ex, {&a, &b}, kNewTokens));
    const char* path = config.device_logits ? "device" : "host";
    expect_same(a.logprobs, reference(a, config, 0.0f, 4), path);
    expect_same(b.logprobs, reference(b, config, 0.9f, 0), path);
    for (std::size_t i = 0; i < a.logprobs.size(); ++i) {
      // Greedy: the drawn token heads its own top list.
      ASSERT_FALSE(a.logprobs[i].top.empty());
      EXPECT_EQ(a.logprobs[i].top[0].token, static_cast<Token>(a.generated[i])) << path;
      EXPECT_EQ(a.logprobs[i].top[0].logprob, a.logprobs[i].logprob) << path;
      EXPECT_LE(a.logprobs[i].logprob, 0.0f);
    }
    if (config.device_logits) {
      // One call per step that drew for A or B (they step together).
      EXPECT_EQ(logprob_calls(*program), static_cast<std::size_t>(kNewTokens));
    }
  }
}

TEST(LogprobsExecutorTest, DeviceLogitsWithoutTheMethodFailTheStepThatAsks) {
  auto program = std::make_shared<ToyProgram>(device_config());
  program->metas.erase(std::string(program::kLogprobsMethod));
  auto ex = make_executor(program);
  ASSERT_NE(ex, nullptr);
  Gen plain = start(*ex, kPromptC), asking = start(*ex, kPromptA);
  ex->set_sampling(plain.sid, SamplingParams{}, 1);
  SamplingParams wants;
  wants.logprobs = 2;
  ex->set_sampling(asking.sid, wants, 2);
  ASSERT_TRUE(run(*ex, {{&plain, prefill(plain, plain.prompt->size())}}));
  EXPECT_FALSE(run(*ex, {{&asking, prefill(asking, asking.prompt->size())}}));
}

TEST(LogprobsExecutorTest, AnOutOfRangeCountIsNotInstalled) {
  auto program = std::make_shared<ToyProgram>(host_config());
  auto ex = make_executor(program);
  ASSERT_NE(ex, nullptr);
  Gen a = start(*ex, kPromptA);
  SamplingParams bad;
  bad.logprobs = kMaxTopLogprobs + 1;
  ex->set_sampling(a.sid, bad, 1);  // refused (logged): the session keeps no policy
  ASSERT_TRUE(run(*ex, {{&a, prefill(a, a.prompt->size())}}));
  EXPECT_TRUE(a.logprobs.empty());
}

}  // namespace
}  // namespace cellm::executor::testing
