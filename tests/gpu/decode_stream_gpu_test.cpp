// The decode stream (one-token steps in one persistent kernel) against the
// float32 CPU program and against the GEMV kernel chain, on random-weight
// models small enough for the CPU but shaped to reach every path of the
// kernel: 64- and 128-wide heads, 2 to 8 q heads per kv head, a q/k/v bias,
// llama3 rope scaling, histories of one key range per kv head (written
// directly), of many ranges (merged by the last one) and of ranges longer
// than a warp's batch of keys.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_program.h"
#include "backend/cuda/cuda_program.h"
#include "backend/cuda/device_weights.h"
#include "executor/cuda_executor.h"
#include "model/hf_config.h"
#include "raw_driver.h"

namespace cellm::gpu_testing {
namespace {

struct StreamCase {
  const char* name;
  const char* config;
  std::size_t prompt;
  std::size_t decodes;
};

constexpr const char* kLlama64 = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 1024, "intermediate_size": 1536, "num_hidden_layers": 3,
  "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 2048,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "hidden_act": "silu",
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 256, "rope_type": "llama3"}})";

constexpr const char* kLlama128 = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2,
  "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 128, "vocab_size": 2048,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "hidden_act": "silu"})";

constexpr const char* kQwen2Bias = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 1280, "intermediate_size": 3328, "num_hidden_layers": 2,
  "num_attention_heads": 10, "num_key_value_heads": 5, "head_dim": 128, "vocab_size": 1024,
  "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "tie_word_embeddings": true, "hidden_act": "silu", "use_sliding_window": false})";

class DecodeStreamTest : public ::testing::TestWithParam<StreamCase> {};

// Feeds `count` tokens in steps of at most `chunk`.
bool feed_chunked(executor::CudaExecutor& ex, FedSeq& s, std::size_t count, std::size_t chunk) {
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(chunk, count - done);
    if (!feed(ex, {{&s, n}})) return false;
    done += n;
  }
  return true;
}

TEST_P(DecodeStreamTest, OneTokenStepsMatchTheCpuProgramAndTheKernelChain) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const StreamCase& sc = GetParam();
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
  // Two GPU programs over the same values: one-token steps on the stream, and on the chain.
  auto stream_program = cuda::load_program(*spec, *host, options);
  ASSERT_TRUE(stream_program.ok()) << stream_program.status().to_string();
  ASSERT_STREQ(cuda::decode_stream_unavailable(**stream_program), "");
  cuda::cuda_program_knobs(**stream_program)->kernels.decode_stream = true;
  auto chain_program = cuda::load_program(*spec, *host, options);
  ASSERT_TRUE(chain_program.ok()) << chain_program.status().to_string();
  cuda::cuda_program_knobs(**chain_program)->kernels.decode_stream = false;
  options.device_sampling = false;
  auto cpu_program = cpu::CpuProgram::create(*spec, *host, options);
  ASSERT_TRUE(cpu_program.ok()) << cpu_program.status().to_string();
  auto stream = make_test_executor(std::move(stream_program).value(), 3);
  auto chain = make_test_executor(std::move(chain_program).value(), 3);
  auto cpu = make_test_executor(std::move(cpu_program).value(), 3);
  ASSERT_NE(stream, nullptr);
  ASSERT_NE(chain, nullptr);
  ASSERT_NE(cpu, nullptr);

  std::mt19937 rng(11);
  std::vector<std::int64_t> inputs;
  for (std::size_t i = 0; i < sc.prompt; ++i) {
    inputs.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(spec->vocab_size)));
  }
  // `twin` is fed exactly what `s` is, on the same program: the stream must
  // give it the same bits.
  FedSeq s, twin, ch, c;
  s.seq = stream->cache_control().seq_new().value_or(-1);
  twin.seq = stream->cache_control().seq_new().value_or(-1);
  ch.seq = chain->cache_control().seq_new().value_or(-1);
  c.seq = cpu->cache_control().seq_new().value_or(-1);
  s.inputs = twin.inputs = ch.inputs = c.inputs = &inputs;
  ASSERT_TRUE(feed_chunked(*stream, s, sc.prompt, 1024));
  ASSERT_TRUE(feed_chunked(*stream, twin, sc.prompt, 1024));
  ASSERT_TRUE(feed_chunked(*chain, ch, sc.prompt, 1024));
  ASSERT_TRUE(feed_chunked(*cpu, c, sc.prompt, 1024));
  for (std::size_t i = 0; i < sc.decodes; ++i) {
    const auto& last = c.logits.at(inputs.size() - 1);
    inputs.push_back(std::max_element(last.begin(), last.end()) - last.begin());
    ASSERT_TRUE(feed(*stream, {{&s, 1}}));
    ASSERT_TRUE(feed(*stream, {{&twin, 1}}));
    ASSERT_TRUE(feed(*chain, {{&ch, 1}}));
    ASSERT_TRUE(feed(*cpu, {{&c, 1}}));
  }

  double worst_stream = 0;
  double worst_chain = 0;
  int argmax_checked = 0;
  // The decode positions: the logits of the token fed at sc.prompt + i.
  for (std::size_t pos = sc.prompt; pos < inputs.size(); ++pos) {
    const auto& ref = c.logits.at(pos);
    const auto& got = s.logits.at(pos);
    const double err = relative_error(got, ref);
    worst_stream = std::max(worst_stream, err);
    worst_chain = std::max(worst_chain, relative_error(ch.logits.at(pos), ref));
    EXPECT_LE(err, 3e-2) << sc.name << " position " << pos;
    EXPECT_EQ(std::memcmp(got.data(), twin.logits.at(pos).data(), got.size() * sizeof(float)), 0)
        << sc.name << " position " << pos << ": two runs of the same step differ";
    if (expect_argmax_where_clear(got, ref, 0.25f,
                                  std::string(sc.name) + " position " + std::to_string(pos))) {
      ++argmax_checked;
    }
  }
  RecordProperty("worst_stream_error", std::to_string(worst_stream));
  RecordProperty("worst_chain_error", std::to_string(worst_chain));
  // The stream rounds where the chain does; it must not be materially less accurate.
  EXPECT_LE(worst_stream, 1.5 * worst_chain + 1e-3)
      << sc.name << ": stream " << worst_stream << " against chain " << worst_chain;
  EXPECT_GT(argmax_checked, 0) << "no decode position had a margin above 0.25";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DecodeStreamTest,
    ::testing::Values(
        // Histories of 1..12 keys: one range per kv head, written without a merge.
        StreamCase{"llama_hd64_short", kLlama64, 1, 12},
        // ~4,200 keys: 33 ranges of 128 keys per kv head, four batches per block.
        StreamCase{"llama_hd64_long", kLlama64, 4200, 6},
        // Eight q heads per kv head, 700 keys in 44 ranges.
        StreamCase{"llama_hd128_group8", kLlama128, 700, 8},
        StreamCase{"qwen2_bias_hd128", kQwen2Bias, 300, 8}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cellm::gpu_testing
