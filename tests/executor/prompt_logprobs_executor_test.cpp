// Prompt logprobs (SamplingParams::prompt_logprobs, OpenAI's echo with
// logprobs) through the CudaExecutor on both logits homes of the toy
// program: every prompt row whose next token the payload holds is scored
// against the row the toy returns for that prefix (the host reference at
// temperature 0), across chunks fed in separate steps, and the scores ride
// on the session's next output; a session whose policy does not ask gets
// none, in the same batch.
#include <gtest/gtest.h>

#include "driver.h"
#include "executor/cuda_executor.h"
#include "sampling/logprobs.h"
#include "toy_program.h"

namespace cellm::executor::testing {
namespace {

ToyConfig device_config() {
  ToyConfig c;
  c.device_logits = true;
  c.samplers = true;
  return c;
}

// The reference: prompt[i + 1] scored on the toy's row after prompt[0..i].
std::vector<TokenLogprobs> reference(const std::vector<std::int64_t>& prompt,
                                     const ToyConfig& config, int count) {
  std::vector<TokenLogprobs> out;
  for (std::size_t i = 0; i + 1 < prompt.size(); ++i) {
    const std::vector<std::int64_t> prefix(prompt.begin(),
                                           prompt.begin() + static_cast<std::ptrdiff_t>(i + 1));
    const std::vector<float> row =
        toy_logits(toy_next_token(prefix, config.windows, config.vocab), config.vocab);
    TokenLogprobs lp;
    sampling::row_logprobs(row, 0.0f, {}, static_cast<Token>(prompt[i + 1]), count, lp);
    out.push_back(lp);
  }
  return out;
}

TEST(PromptLogprobsExecutorTest, ChunkedPromptRowsEqualTheReferenceOnBothPaths) {
  const std::vector<std::int64_t> prompt = {5, 9, 1, 7, 2, 2, 8};
  const std::vector<std::int64_t> other = {3, 4, 6};
  for (const ToyConfig& config : {ToyConfig{}, device_config()}) {
    const char* path = config.device_logits ? "device" : "host";
    auto program = std::make_shared<ToyProgram>(config);
    auto made = CudaExecutor::create(program, 4, 0);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    auto ex = std::move(made).value();
    ASSERT_TRUE(ex->initialize());
    Gen a = start(*ex, prompt), b = start(*ex, other);
    SamplingParams scored;
    scored.logprobs = 3;
    scored.prompt_logprobs = true;
    ex->set_sampling(a.sid, scored, 1);
    SamplingParams plain;
    plain.logprobs = 2;  // logprobs of draws only: no prompt rows
    ex->set_sampling(b.sid, plain, 2);

    // A's first chunk alone (no output: its scores wait), then its second
    // chunk beside B's whole prompt.
    BatchInput first;
    first.inputs.push_back(prefill(a, 4));
    BatchOutput out;
    ASSERT_TRUE(ex->execute(first, out)) << path;
    ASSERT_EQ(out.outputs.size(), 1u);
    EXPECT_FALSE(out.outputs[0].has_value()) << path;
    a.fed = 4;
    BatchInput second;
    second.inputs.push_back(prefill(a, prompt.size() - 4));
    second.inputs.push_back(prefill(b, other.size()));
    ASSERT_TRUE(ex->execute(second, out)) << path;
    ASSERT_EQ(out.outputs.size(), 2u);
    ASSERT_TRUE(out.outputs[0] && out.outputs[1]) << path;

    const std::vector<TokenLogprobs> want = reference(prompt, config, 3);
    const std::vector<TokenLogprobs>& got = out.outputs[0]->prompt_logprobs;
    ASSERT_EQ(got.size(), want.size()) << path;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].token, want[i].token) << path << " row " << i;
      EXPECT_FLOAT_EQ(got[i].logprob, want[i].logprob) << path << " row " << i;
      ASSERT_EQ(got[i].top.size(), 3u) << path << " row " << i;
      for (std::size_t j = 0; j < 3; ++j) {
        EXPECT_EQ(got[i].top[j].token, want[i].top[j].token) << path << " row " << i;
        EXPECT_FLOAT_EQ(got[i].top[j].logprob, want[i].top[j].logprob) << path << " row " << i;
      }
    }
    // The draw itself is what it would be without the prompt rows.
    ASSERT_EQ(out.outputs[0]->tokens.size(), 1u);
    EXPECT_EQ(static_cast<std::int64_t>(out.outputs[0]->tokens[0]),
              toy_next_token(prompt, config.windows, config.vocab))
        << path;
    EXPECT_EQ(out.outputs[0]->logprobs.size(), 1u) << path;
    EXPECT_TRUE(out.outputs[1]->prompt_logprobs.empty()) << path;
    EXPECT_EQ(out.outputs[1]->logprobs.size(), 1u) << path;
    EXPECT_EQ(static_cast<std::int64_t>(out.outputs[1]->tokens[0]),
              toy_next_token(other, config.windows, config.vocab))
        << path;

    // A decode step feeds no prompt rows: no scores again.
    a.fed = static_cast<Position>(prompt.size());
    a.generated.push_back(static_cast<std::int64_t>(out.outputs[0]->tokens[0]));
    BatchInput step;
    step.inputs.push_back(decode(a));
    ASSERT_TRUE(ex->execute(step, out)) << path;
    ASSERT_TRUE(out.outputs[0]) << path;
    EXPECT_TRUE(out.outputs[0]->prompt_logprobs.empty()) << path;
  }
}

}  // namespace
}  // namespace cellm::executor::testing
