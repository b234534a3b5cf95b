// app::measure_perplexity through a Runner over the CPU reference program on
// a golden fixture, against the perplexity of Hugging Face's float64 logits
// (the fixture's expected.safetensors) over the same tokens: one window of
// the fixture's longest case, its second half scored. Also the refusals.
#include "app/perplexity.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "app/executor_factory.h"
#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "support/golden.h"

namespace cellm::app {
namespace {

// Mean negative log-likelihood of inputs[p + 1] under golden logits row p,
// for p in [from, to), in float64.
double golden_nll(const testing::GoldenCase& c, std::size_t from, std::size_t to) {
  const std::int64_t vocab = c.logits.dim(1);
  const float* rows = c.logits.data_as<float>();
  double sum = 0.0;
  for (std::size_t p = from; p < to; ++p) {
    const float* row = rows + static_cast<std::int64_t>(p) * vocab;
    double max = row[0];
    for (std::int64_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
    double z = 0.0;
    for (std::int64_t v = 0; v < vocab; ++v) z += std::exp(static_cast<double>(row[v]) - max);
    const double logp = static_cast<double>(row[c.inputs[p + 1]]) - max - std::log(z);
    sum -= logp;
  }
  return sum / static_cast<double>(to - from);
}

class PerplexityTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto dir = testing::golden_root() / GetParam();
    auto cases = testing::load_golden_cases(dir);
    ASSERT_TRUE(cases.ok()) << cases.status().to_string();
    cases_ = std::move(cases).value();
    CudaExecutorConfig config;
    config.model_path = dir.string();
    config.backend = "cpu";
    config.cpu_program = "reference";
    config.max_sessions = 4;
    config.max_session_tokens = 512;
    auto le = create_executor(config);
    ASSERT_TRUE(le.ok()) << le.status().to_string();
    loaded_ = std::make_unique<LoadedExecutor>(std::move(le).value());
    runner_ =
        std::make_unique<Runner>(*loaded_->executor, DecodeFirstScheduler::create(256, 4, 64));
  }
  void TearDown() override {
    if (runner_) runner_->shutdown();
  }

  std::vector<testing::GoldenCase> cases_;
  std::unique_ptr<LoadedExecutor> loaded_;
  std::unique_ptr<Runner> runner_;
};

TEST_P(PerplexityTest, OneWindowMatchesTheReferenceLogits) {
  const auto longest = std::max_element(
      cases_.begin(), cases_.end(),
      [](const auto& a, const auto& b) { return a.inputs.size() < b.inputs.size(); });
  const std::vector<Token> tokens(longest->inputs.begin(), longest->inputs.end());
  const auto n = static_cast<std::int32_t>(tokens.size());
  ASSERT_GE(n, 8);
  PerplexityOptions o;
  o.context = n;  // one window, the inputs as they are (BOS included where the case has one)
  auto r = measure_perplexity(*runner_, tokens, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->windows, 1);
  EXPECT_EQ(r->scored, n - n / 2);
  const double want =
      golden_nll(*longest, static_cast<std::size_t>(n / 2 - 1), static_cast<std::size_t>(n - 1));
  // The float32 program against float64 logits: 1e-4 per logit (testdata).
  EXPECT_NEAR(r->nll_mean, want, 1e-3 * std::max(1.0, want)) << GetParam();
  EXPECT_NEAR(r->perplexity, std::exp(want), 1e-3 * std::exp(want));
  EXPECT_GT(r->nll_stderr, 0.0);
}

TEST_P(PerplexityTest, WindowsSplitTheTextAndTooLittleTextIsRefused) {
  const auto& c = cases_.front();
  std::vector<Token> tokens(c.inputs.begin(), c.inputs.end());
  PerplexityOptions o;
  o.context = 4;
  o.bos = tokens.front();
  auto r = measure_perplexity(*runner_, tokens, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Three text tokens a window after the BOS, two of them scored.
  EXPECT_EQ(r->windows, static_cast<std::int32_t>(tokens.size() / 3));
  EXPECT_EQ(r->scored, 2 * static_cast<std::int64_t>(r->windows));
  o.max_windows = 1;
  r = measure_perplexity(*runner_, tokens, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->windows, 1);

  o.context = static_cast<std::int32_t>(tokens.size()) + 2;
  auto refused = measure_perplexity(*runner_, tokens, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("smaller --context"), std::string::npos)
      << refused.status().to_string();
  o.context = 2;
  EXPECT_FALSE(measure_perplexity(*runner_, tokens, o).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PerplexityTest, ::testing::Values("llama", "qwen3", "gemma3"));

}  // namespace
}  // namespace cellm::app
