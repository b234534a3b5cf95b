// decode_greedy on the CUDA program (program.h): steps chained on the device,
// each step's token rows the previous step's argmax, must draw exactly what
// the same steps draw one at a time through execute_raw and argmax_rows on
// the same program, for one row (the lm_head GEMV takes the argmax inside the
// graph) and several (the argmax kernel after it), replayed or launched
// eagerly, over more steps than one call takes and in graphs of several
// chained steps or of one.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_program.h"
#include "backend/cuda/device_weights.h"
#include "core/env.h"
#include "executor/cuda_executor.h"
#include "model/hf_config.h"
#include "raw_driver.h"

namespace cellm::gpu_testing {
namespace {

// 64-wide heads, 4 q heads per kv head, llama3 rope scaling.
constexpr const char* kLlama64 = R"({"architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 1024, "intermediate_size": 1536, "num_hidden_layers": 3,
  "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 2048,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "hidden_act": "silu",
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 256, "rope_type": "llama3"}})";

struct ChainCase {
  int rows;
  bool graphs;
  bool head_argmax;
};

std::string case_name(const ::testing::TestParamInfo<ChainCase>& info) {
  const ChainCase& c = info.param;
  return "rows" + std::to_string(c.rows) + (c.graphs ? "_graphs" : "_eager") +
         (c.head_argmax ? "_headargmax" : "_argmaxkernel");
}

class DecodeGreedyGpuTest : public ::testing::TestWithParam<ChainCase> {};

TEST_P(DecodeGreedyGpuTest, ChainedStepsDrawWhatOneStepAtATimeDraws) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const ChainCase& c = GetParam();
  auto spec = model::spec_from_hf_config_text(kLlama64, "llama64");
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto weights = cuda::random_weights(*spec, 20261203);
  ASSERT_TRUE(weights.ok()) << weights.status().to_string();
  program::ProgramOptions options;
  options.static_widths = {1, 2, 4, 8};
  options.max_step = 1024;
  options.kv_cells = 16384;
  options.cuda_graphs = c.graphs;
  options.cuda_kernels = knobs().kernels;  // the environment's, as other programs take them
  options.cuda_kernels->head_argmax = c.head_argmax;
  auto program = cuda::make_program(*spec, std::move(weights).value(), options);
  ASSERT_TRUE(program.ok()) << program.status().to_string();
  auto ex = make_test_executor(std::move(program).value(), 2 * c.rows);
  ASSERT_NE(ex, nullptr);
  ASSERT_TRUE(ex->decodes_on_device(static_cast<std::size_t>(c.rows)));

  // Two copies of each prompt: one set decoded chained, one step by step.
  std::mt19937 rng(5);
  cache::CellCache& cache = ex->cache_control();
  std::vector<std::vector<std::int64_t>> prompts;
  std::vector<FedSeq> fed(static_cast<std::size_t>(2 * c.rows));
  std::vector<cache::SeqId> chained, stepped;
  std::vector<Token> first;
  for (int r = 0; r < c.rows; ++r) {
    std::vector<std::int64_t> p;
    for (int i = 0; i < 9 + 7 * r; ++i) {
      p.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(spec->vocab_size)));
    }
    prompts.push_back(std::move(p));
    first.push_back(rng() % static_cast<unsigned>(spec->vocab_size));
  }
  for (std::size_t i = 0; i < fed.size(); ++i) {
    fed[i].seq = cache.seq_new().value_or(-1);
    fed[i].inputs = &prompts[i % static_cast<std::size_t>(c.rows)];
    ASSERT_TRUE(feed(*ex, {{&fed[i], fed[i].inputs->size()}}));
    (i < static_cast<std::size_t>(c.rows) ? chained : stepped).push_back(fed[i].seq);
  }

  // Two calls of decode_greedy: 64 steps (eight graphs of eight chained
  // steps), then 13 (one such graph, then five graphs of one step).
  constexpr int kSteps = 77;
  auto ids = ex->decode_greedy(chained, first, kSteps);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  ASSERT_EQ(ids->size(), static_cast<std::size_t>(kSteps));

  std::vector<Token> next = first;
  for (int s = 0; s < kSteps; ++s) {
    executor::RawTargetStep step;
    for (int r = 0; r < c.rows; ++r) {
      const cache::SeqId seq = stepped[static_cast<std::size_t>(r)];
      step.tokens.push_back(static_cast<std::int64_t>(next[static_cast<std::size_t>(r)]));
      step.positions.push_back(cache.pos(seq));
      step.seq_ids.push_back(seq);
      step.logit_indices.push_back(r);
    }
    std::optional<std::vector<Token>> drawn;
    ASSERT_TRUE(ex->execute_raw(step, [&](const executor::RawTargetOutput& out) {
      drawn = ex->argmax_rows(out.logits, out.selected_indices.size());
      return drawn.has_value();
    }));
    ASSERT_TRUE(drawn.has_value());
    ASSERT_EQ(*drawn, (*ids)[static_cast<std::size_t>(s)]) << "step " << s;
    next = *drawn;
  }
  for (int r = 0; r < c.rows; ++r) {
    EXPECT_EQ(cache.pos(chained[static_cast<std::size_t>(r)]),
              cache.pos(stepped[static_cast<std::size_t>(r)]));
  }
}

INSTANTIATE_TEST_SUITE_P(Chains, DecodeGreedyGpuTest,
                         ::testing::Values(ChainCase{1, true, true}, ChainCase{1, true, false},
                                           ChainCase{1, false, true}, ChainCase{3, true, true},
                                           ChainCase{3, false, true}, ChainCase{8, true, true}),
                         case_name);

}  // namespace
}  // namespace cellm::gpu_testing
