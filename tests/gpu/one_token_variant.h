// One-token steps on a variant of the CUDA program (a kernel knob on)
// against the same steps on the GEMV kernel chain (the knob off) and on the
// float32 CPU program, over random weights in the shapes of small model
// configs. The decode stream (decode_stream_gpu_test.cpp) and the fused o
// projection (fused_o_gpu_test.cpp) are such variants; both suites draw their
// cases from the configs here, so one shape is written once.
//
// Thread-safety: single-threaded test code.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_program.h"
#include "backend/cuda/cuda_program.h"
#include "backend/cuda/device_weights.h"
#include "executor/cuda_executor.h"
#include "model/hf_config.h"
#include "raw_driver.h"

namespace cellm::gpu_testing {

// One model config (Hugging Face config.json text) fed a random prompt of
// `prompt` tokens, then `decodes` one-token steps.
struct OneTokenCase {
  const char* name;
  const char* config;
  std::size_t prompt;
  std::size_t decodes;
};

// 64-wide heads, 4 q heads per kv head, llama3 rope scaling.
inline constexpr const char* kLlama64 = R"({"architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 1024, "intermediate_size": 1536, "num_hidden_layers": 3,
  "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 2048,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "hidden_act": "silu",
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 256, "rope_type": "llama3"}})";

// 128-wide heads, 8 q heads per one kv head.
inline constexpr const char* kLlama128 = R"({"architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2,
  "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 128, "vocab_size": 2048,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "hidden_act": "silu"})";

// kLlama128 with 4 q heads per kv head: a 128-wide group whose slice of the o
// projection fits the fused o path's shared memory (kLlama128's group of 8
// does not).
inline constexpr const char* kLlama128Group2 = R"({"architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2,
  "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 2048,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "hidden_act": "silu"})";

// A q/k/v bias, 128-wide heads, 2 q heads per kv head, hidden 1280 (5 * 256).
inline constexpr const char* kQwen2Bias = R"({"architectures": ["Qwen2ForCausalLM"],
  "model_type": "qwen2",
  "hidden_size": 1280, "intermediate_size": 3328, "num_hidden_layers": 2,
  "num_attention_heads": 10, "num_key_value_heads": 5, "head_dim": 128, "vocab_size": 1024,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "tie_word_embeddings": true, "hidden_act": "silu", "use_sliding_window": false})";

// Turns the variant on (`on`) or off in a program's knobs; off is the kernel
// chain the variant is measured against.
using SetVariant = std::function<void(cuda::CudaProgramKnobs& knobs, bool on)>;
// Why a program's one-token steps cannot run the variant, or "" when they
// can (cuda::decode_stream_unavailable and the like).
using VariantUnavailable = const char* (*)(program::Program& program);

// Feeds `count` tokens in steps of at most `chunk`.
inline bool feed_chunked(executor::CudaExecutor& ex, FedSeq& s, std::size_t count,
                         std::size_t chunk) {
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(chunk, count - done);
    if (!feed(ex, {{&s, n}})) return false;
    done += n;
  }
  return true;
}

// The whole check of one case, as the body of a test: the variant's logits of
// every one-token step within 3e-2 relative error of the CPU program's, the
// same bits on a second sequence fed the same tokens, the argmax where the
// CPU's margin is clear, and a worst error not materially above the chain's.
// `variant` names it in messages and in the recorded properties
// worst_<variant>_error and worst_chain_error.
inline void expect_one_token_variant_matches(const OneTokenCase& sc, const char* variant,
                                             const SetVariant& set_variant,
                                             VariantUnavailable unavailable) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto spec = model::spec_from_hf_config_text(sc.config, sc.name);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto host = [&]() -> Result<model::Weights> {
    CELLM_ASSIGN_OR_RETURN(cuda::DeviceWeights d, cuda::random_weights(*spec, 20261201));
    return cuda::download_weights(*spec, d);
  }();
  ASSERT_TRUE(host.ok()) << host.status().to_string();

  program::ProgramOptions options;
  options.static_widths = {1, 2, 4, 8};
  options.max_step = 1024;
  options.kv_cells = 16384;
  // Two GPU programs over the same values: one-token steps on the variant, and on the chain.
  auto variant_program = cuda::load_program(*spec, *host, options);
  ASSERT_TRUE(variant_program.ok()) << variant_program.status().to_string();
  ASSERT_STREQ(unavailable(**variant_program), "") << sc.name << ": " << variant;
  set_variant(*cuda::cuda_program_knobs(**variant_program), true);
  auto chain_program = cuda::load_program(*spec, *host, options);
  ASSERT_TRUE(chain_program.ok()) << chain_program.status().to_string();
  set_variant(*cuda::cuda_program_knobs(**chain_program), false);
  options.device_sampling = false;
  auto cpu_program = cpu::CpuProgram::create(*spec, *host, options);
  ASSERT_TRUE(cpu_program.ok()) << cpu_program.status().to_string();
  auto var = make_test_executor(std::move(variant_program).value(), 3);
  auto chain = make_test_executor(std::move(chain_program).value(), 3);
  auto cpu = make_test_executor(std::move(cpu_program).value(), 3);
  ASSERT_NE(var, nullptr);
  ASSERT_NE(chain, nullptr);
  ASSERT_NE(cpu, nullptr);

  std::mt19937 rng(11);
  std::vector<std::int64_t> inputs;
  for (std::size_t i = 0; i < sc.prompt; ++i) {
    inputs.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(spec->vocab_size)));
  }
  // `twin` is fed exactly what `s` is, on the same program: the variant must
  // give it the same bits.
  FedSeq s, twin, ch, c;
  s.seq = var->cache_control().seq_new().value_or(-1);
  twin.seq = var->cache_control().seq_new().value_or(-1);
  ch.seq = chain->cache_control().seq_new().value_or(-1);
  c.seq = cpu->cache_control().seq_new().value_or(-1);
  s.inputs = twin.inputs = ch.inputs = c.inputs = &inputs;
  ASSERT_TRUE(feed_chunked(*var, s, sc.prompt, 1024));
  ASSERT_TRUE(feed_chunked(*var, twin, sc.prompt, 1024));
  ASSERT_TRUE(feed_chunked(*chain, ch, sc.prompt, 1024));
  ASSERT_TRUE(feed_chunked(*cpu, c, sc.prompt, 1024));
  for (std::size_t i = 0; i < sc.decodes; ++i) {
    const auto& last = c.logits.at(inputs.size() - 1);
    inputs.push_back(std::max_element(last.begin(), last.end()) - last.begin());
    ASSERT_TRUE(feed(*var, {{&s, 1}}));
    ASSERT_TRUE(feed(*var, {{&twin, 1}}));
    ASSERT_TRUE(feed(*chain, {{&ch, 1}}));
    ASSERT_TRUE(feed(*cpu, {{&c, 1}}));
  }

  double worst_variant = 0;
  double worst_chain = 0;
  int argmax_checked = 0;
  // The decode positions: the logits of the token fed at sc.prompt + i.
  for (std::size_t pos = sc.prompt; pos < inputs.size(); ++pos) {
    const auto& ref = c.logits.at(pos);
    const auto& got = s.logits.at(pos);
    const double err = relative_error(got, ref);
    worst_variant = std::max(worst_variant, err);
    worst_chain = std::max(worst_chain, relative_error(ch.logits.at(pos), ref));
    EXPECT_LE(err, 3e-2) << sc.name << " position " << pos;
    EXPECT_EQ(std::memcmp(got.data(), twin.logits.at(pos).data(), got.size() * sizeof(float)), 0)
        << sc.name << " position " << pos << ": two runs of the same step differ";
    if (expect_argmax_where_clear(got, ref, 0.25f,
                                  std::string(sc.name) + " position " + std::to_string(pos))) {
      ++argmax_checked;
    }
  }
  ::testing::Test::RecordProperty(std::string("worst_") + variant + "_error",
                                  std::to_string(worst_variant));
  ::testing::Test::RecordProperty("worst_chain_error", std::to_string(worst_chain));
  // The variant rounds where the chain does; it must not be materially less accurate.
  EXPECT_LE(worst_variant, 1.5 * worst_chain + 1e-3)
      << sc.name << ": " << variant << " " << worst_variant << " against chain " << worst_chain;
  EXPECT_GT(argmax_checked, 0) << "no decode position had a margin above 0.25";
}

}  // namespace cellm::gpu_testing
