// The real models a user runs first (scripts/fetch-model: SmolLM2-135M-Instruct
// Q4_1, Gemma 3 270M Q4_K_M) generate on the GPU what the CPU program
// generates: 64 greedy tokens for each of a few prompts, through the engine
// (`cellm run`'s path), with the GGUF converted to bf16 and with its blocks
// kept on the GPU. A first divergence passes only where the CPU itself
// nearly tied: its two most likely tokens at that position lie closer than
// kTieNats in log-probability (the programs round differently: the CPU
// multiplies int8-quantized activations, the GPU bf16 ones). Label gpu.
// On the GPU machine the models come through scripts/gpu-model; a missing
// one skips its cases with the command that brings it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "app/engine.h"
#include "backend/cuda/cuda_program.h"
#include "support/testdata.h"

namespace cellm::app {
namespace {

// log-probability gap under which two candidates count as a tie (nats).
constexpr float kTieNats = 0.25f;
constexpr std::int64_t kTokens = 64;

std::filesystem::path model_path(const std::string& file) {
  return cellm::testing::env_path("CELLMDEV_MODELS_DIR")
             .value_or(cellm::testing::source_dir() / "models") /
         file;
}

struct Generated {
  std::vector<Token> tokens;
  std::vector<TokenLogprobs> logprobs;  // the chosen token's and the two most likely
  std::string error;
};

Generated greedy(Engine& engine, const std::vector<Token>& prompt) {
  Generated run;
  auto session = engine.runner().open_session_async().get();
  if (!session) {
    run.error = "no session";
    return run;
  }
  GenConfig config;
  config.max_new_tokens = kTokens;
  config.sampling.logprobs = 2;
  std::promise<void> done;
  GenerationHandle handle = session->generate_async(
      prompt, config,
      [&run](const GenerationUpdate& u) {
        run.tokens.insert(run.tokens.end(), u.tokens.begin(), u.tokens.end());
        run.logprobs.insert(run.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
        if (!u.error_message.empty()) run.error = u.error_message;
      },
      [&done] { done.set_value(); });
  done.get_future().wait();
  return run;
}

struct Case {
  std::string file;
  std::string fetch;  // scripts/fetch-model's name for it
};

class RealModelsGpuTest : public ::testing::TestWithParam<Case> {};

const std::vector<std::string> kPrompts = {
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
};

std::unique_ptr<Engine> load(const std::filesystem::path& path, const std::string& backend,
                             bool keep_quantized) {
  EngineOptions o;
  o.model = path;
  o.backend = backend;
  o.max_sessions = 2;
  o.max_session_tokens = 256;
  o.prefix_cache_entries = 0;
  o.program.keep_quantized = keep_quantized;
  auto loaded = Engine::load(o);
  EXPECT_TRUE(loaded.ok()) << path << " on " << backend << ": " << loaded.status().to_string();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

TEST_P(RealModelsGpuTest, GreedyTokensOnTheGpuAreTheCpuProgramsUpToANearTie) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Case& c = GetParam();
  const std::filesystem::path path = model_path(c.file);
  if (!std::filesystem::exists(path)) {
    GTEST_SKIP() << path << " is missing: scripts/fetch-model " << c.fetch
                 << " (on the GPU machine: scripts/gpu-model)";
  }
  std::vector<std::vector<Token>> prompts;
  std::vector<Generated> cpu_runs;
  {
    auto cpu = load(path, "cpu", false);
    ASSERT_NE(cpu, nullptr);
    for (const std::string& text : kPrompts) {
      auto ids = cpu->encode(text, true);
      ASSERT_TRUE(ids.ok()) << ids.status().to_string();
      prompts.push_back(*ids);
      cpu_runs.push_back(greedy(*cpu, *ids));
      ASSERT_TRUE(cpu_runs.back().error.empty()) << cpu_runs.back().error;
      ASSERT_EQ(cpu_runs.back().logprobs.size(), cpu_runs.back().tokens.size());
      // Continuations, not instructions: each runs its 64 tokens on the CPU
      // (`cellm run` shows it), so the comparison has something to compare.
      EXPECT_EQ(cpu_runs.back().tokens.size(), static_cast<std::size_t>(kTokens)) << text;
    }
  }
  for (const bool kept : {false, true}) {
    auto gpu = load(path, "cuda", kept);
    ASSERT_NE(gpu, nullptr);
    const char* form = kept ? "blocks kept" : "bf16";
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const Generated run = greedy(*gpu, prompts[p]);
      ASSERT_TRUE(run.error.empty()) << form << ": " << run.error;
      const Generated& want = cpu_runs[p];
      const std::size_t n = std::min(run.tokens.size(), want.tokens.size());
      std::size_t i = 0;
      while (i < n && run.tokens[i] == want.tokens[i]) ++i;
      if (i == n) {
        // Both stopped at the same token (EOS), or both made 64.
        EXPECT_EQ(run.tokens.size(), want.tokens.size()) << form << ", prompt " << p;
        continue;
      }
      const std::vector<TokenLogprob>& top = want.logprobs[i].top;
      ASSERT_GE(top.size(), 2u);
      const float gap = top[0].logprob - top[1].logprob;
      std::printf("%s (%s), prompt %zu: first divergence at token %zu of %zu, CPU gap %.4f nats\n",
                  c.file.c_str(), form, p, i, n, static_cast<double>(gap));
      EXPECT_LT(gap, kTieNats) << c.file << " (" << form << "), prompt " << p << ": token " << i
                               << " is " << run.tokens[i] << " on the GPU and " << want.tokens[i]
                               << " on the CPU, which preferred it by " << gap << " nats";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, RealModelsGpuTest,
    ::testing::Values(Case{"SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2"},
                      Case{"gemma-3-270m-q4_k_m.gguf", "gemma3"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return info.param.fetch;
    });

}  // namespace
}  // namespace cellm::app
