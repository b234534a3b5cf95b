// The device sampler against the host algorithm (logit adjustments
// included), and graph replay against eager execution, on a real fixture
// model through the CudaExecutor.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_program.h"
#include "executor/cuda_executor.h"
#include "model/loader.h"
#include "raw_driver.h"
#include "sampling/penalties.h"
#include "sampling/sampler.h"
#include "sampling/xorshift.h"
#include "support/golden.h"

namespace cellm::gpu_testing {
namespace {

struct Policy {
  float temperature;
  float top_p;
  int top_k;
};
constexpr Policy kPolicies[] = {{1.0f, 1.0f, 0}, {1.3f, 1.0f, 3}, {0.8f, 0.9f, 0}};

std::shared_ptr<program::Program> fixture_program(const model::LoadedModel& m, bool device_sampling,
                                                  bool graphs) {
  program::ProgramOptions options;
  options.static_widths = {1, 2, 4, 8, 16, 32};
  options.max_step = 128;
  options.kv_cells = 4096;
  options.device_sampling = device_sampling;
  options.cuda_graphs = graphs;
  auto p = cuda::load_program(m.spec, m.weights, options);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return nullptr;
  return std::shared_ptr<program::Program>(std::move(p).value());
}

class GpuSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const auto names = cellm::testing::golden_fixture_names();
    ASSERT_FALSE(names.empty());
    // qwen2 has bf16 weights; any fixture works, the first one is enough.
    const std::string name =
        std::find(names.begin(), names.end(), "qwen2") != names.end() ? "qwen2" : names.front();
    auto m = model::load_model(cellm::testing::golden_root() / name);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
  }
  model::LoadedModel model_;
};

TEST_F(GpuSamplerTest, DeviceSamplerDrawsWhatTheHostAlgorithmDraws) {
  auto ex = make_test_executor(fixture_program(model_, true, true), 8);
  ASSERT_NE(ex, nullptr);
  std::vector<std::int64_t> tokens = {3, 17, 42, 9, 100, 7, 250, 33};
  FedSeq seqs[8];
  std::vector<std::vector<std::int64_t>> inputs(8);
  executor::RawTargetStep step;
  for (int i = 0; i < 8; ++i) {
    seqs[i].seq = ex->cache_control().seq_new().value_or(-1);
    ASSERT_GE(seqs[i].seq, 0);
    step.tokens.push_back(tokens[static_cast<std::size_t>(i)]);
    step.positions.push_back(0);
    step.seq_ids.push_back(seqs[i].seq);
    step.logit_indices.push_back(i);
  }
  int differs_from_greedy = 0;
  int draws = 0;
  const bool ok = ex->execute_raw(step, [&](const executor::RawTargetOutput& out) {
    auto host = cuda::copy_to_host(out.logits);
    EXPECT_TRUE(host.ok());
    const std::int64_t v = host->dim(1);
    const auto rows = out.selected_indices.size();
    for (const Policy& policy : kPolicies) {
      for (std::uint64_t seed = 1; seed <= 16; ++seed) {
        sampling::Xorshift64Star rng(seed);
        std::vector<float> params;
        for (std::size_t r = 0; r < rows; ++r) {
          params.insert(params.end(), {policy.temperature, policy.top_p,
                                       static_cast<float>(policy.top_k), rng.next_f32()});
        }
        auto device = ex->sample_rows(out.logits, rows, params);
        EXPECT_TRUE(device.has_value());
        if (!device) return false;
        for (std::size_t r = 0; r < rows; ++r) {
          std::span<const float> row(host->data_as<float>() + static_cast<std::int64_t>(r) * v,
                                     static_cast<std::size_t>(v));
          const std::int64_t want = sampling::sample_row(row, policy.temperature, policy.top_p,
                                                         policy.top_k, params[r * 4 + 3]);
          EXPECT_EQ((*device)[r], static_cast<Token>(want))
              << "T=" << policy.temperature << " top_k=" << policy.top_k
              << " top_p=" << policy.top_p << " seed " << seed << " row " << r;
          const std::int64_t greedy = sampling::sample_row(row, 0.0f, 1.0f, 0, 0.0f);
          differs_from_greedy += want != greedy;
          ++draws;
        }
      }
    }
    auto argmax = ex->argmax_rows(out.logits, rows);
    EXPECT_TRUE(argmax.has_value());
    for (std::size_t r = 0; argmax && r < rows; ++r) {
      std::span<const float> row(host->data_as<float>() + static_cast<std::int64_t>(r) * v,
                                 static_cast<std::size_t>(v));
      EXPECT_EQ((*argmax)[r], static_cast<Token>(sampling::sample_row(row, 0.0f, 1.0f, 0, 0.0f)));
    }
    return true;
  });
  ASSERT_TRUE(ok);
  EXPECT_GT(draws, 0);
  EXPECT_GT(differs_from_greedy, 0) << "every draw was the argmax: the policies were not exercised";
}

// A greedy one-token step on a captured graph takes its token from the
// lm_head GEMV (CudaForward::takes_argmax) instead of launching the argmax:
// the same token the host's argmax picks from the same logits, step after
// step (the GEMV's counter is reused), and a two-row step still launches it.
TEST_F(GpuSamplerTest, OneTokenGraphStepsTakeTheArgmaxFromTheLmHead) {
  auto program = fixture_program(model_, true, true);
  ASSERT_NE(program, nullptr);
  auto ex = make_test_executor(program, 2);
  ASSERT_NE(ex, nullptr);
  const cuda::CudaProgramStats* stats = cuda::cuda_program_stats(*program);
  ASSERT_NE(stats, nullptr);
  const cache::SeqId a = ex->cache_control().seq_new().value_or(-1);
  const cache::SeqId b = ex->cache_control().seq_new().value_or(-1);
  ASSERT_GE(b, 0);
  std::int64_t token = 5;
  // (sequence, position) rows of one step.
  using Rows = std::vector<std::pair<cache::SeqId, std::int64_t>>;
  const auto step_and_check = [&](const Rows& rows_in) {
    const std::int64_t position = rows_in[0].second;
    executor::RawTargetStep step;
    for (std::size_t i = 0; i < rows_in.size(); ++i) {
      step.tokens.push_back(token);
      step.positions.push_back(rows_in[i].second);
      step.seq_ids.push_back(rows_in[i].first);
      step.logit_indices.push_back(static_cast<std::int64_t>(i));
    }
    const bool ok = ex->execute_raw(step, [&](const executor::RawTargetOutput& out) {
      const std::size_t rows = out.selected_indices.size();
      auto argmax = ex->argmax_rows(out.logits, rows);
      EXPECT_TRUE(argmax.has_value());
      auto host = cuda::copy_to_host(out.logits);
      EXPECT_TRUE(host.ok());
      if (!argmax || !host.ok()) return false;
      const std::int64_t v = host->dim(1);
      for (std::size_t r = 0; r < rows; ++r) {
        std::span<const float> row(host->data_as<float>() + static_cast<std::int64_t>(r) * v,
                                   static_cast<std::size_t>(v));
        EXPECT_EQ((*argmax)[r], static_cast<Token>(sampling::sample_row(row, 0.0f, 1.0f, 0, 0.0f)))
            << "position " << position << " row " << r;
      }
      token = (*argmax)[0];
      return true;
    });
    EXPECT_TRUE(ok);
  };
  for (std::int64_t position = 0; position < 12; ++position) step_and_check({{a, position}});
  EXPECT_EQ(stats->argmax_from_lm_head, 12u);
  EXPECT_EQ(stats->argmax_launched, 0u);
  step_and_check({{a, 12}, {b, 0}});  // two rows: the lm_head takes no argmax
  EXPECT_EQ(stats->argmax_from_lm_head, 12u);
  EXPECT_EQ(stats->argmax_launched, 1u);
}

// Three seeded sessions generating 12 tokens each through execute(), on the
// device sampler or on the host one (the logits come from the GPU either way).
std::vector<std::vector<Token>> generate(const model::LoadedModel& model, bool device_sampling,
                                         const SamplingParams& params) {
  std::vector<std::vector<Token>> drawn(3);
  auto ex = make_test_executor(fixture_program(model, device_sampling, true), 8);
  EXPECT_NE(ex, nullptr);
  if (!ex) return drawn;
  EXPECT_EQ(ex->samples_on_device(), device_sampling);
  std::vector<SessionId> sids;
  std::vector<std::shared_ptr<const std::vector<Token>>> prompts;
  for (int i = 0; i < 3; ++i) {
    sids.push_back(*ex->open_session());
    ex->set_sampling(sids.back(), params, static_cast<std::uint64_t>(i + 1));
    prompts.push_back(std::make_shared<const std::vector<Token>>(
        std::vector<Token>{static_cast<Token>(5 + i), 9, static_cast<Token>(20 * i + 1)}));
  }
  std::vector<Position> pos(3, 0);
  for (int step = 0; step < 12; ++step) {
    BatchInput batch;
    for (std::size_t i = 0; i < 3; ++i) {
      Input in;
      in.sid = sids[i];
      in.produce_output = true;
      if (step == 0) {
        in.payload = prompts[i];
        in.size = 3;
      } else {
        in.payload = std::make_shared<const std::vector<Token>>(1, drawn[i].back());
        in.size = 1;
        in.position = pos[i];
      }
      batch.inputs.push_back(std::move(in));
    }
    BatchOutput out;
    EXPECT_TRUE(ex->execute(batch, out));
    if (out.outputs.size() != 3) return drawn;
    for (std::size_t i = 0; i < 3; ++i) {
      pos[i] += step == 0 ? 3 : 1;
      drawn[i].push_back(out.outputs[i]->tokens.at(0));
    }
  }
  return drawn;
}

// Sampling on the device and on the host (same GPU logits, same seeds) must
// draw the same tokens.
TEST_F(GpuSamplerTest, SeededGenerationsMatchBetweenDeviceAndHostSampling) {
  for (const Policy& policy : kPolicies) {
    const SamplingParams params{policy.temperature, policy.top_p, policy.top_k};
    EXPECT_EQ(generate(model_, false, params), generate(model_, true, params))
        << "T=" << policy.temperature << " top_k=" << policy.top_k << " top_p=" << policy.top_p;
  }
}

// Suppressed ids (min_tokens keeps stop tokens out this way) through the
// program's `sample` method: the ids the unsuppressed greedy run drew first
// are banned; the device must never draw them, must agree with the host
// sampler, and must change the continuation, greedy and sampled.
TEST_F(GpuSamplerTest, SuppressedIdsAreNeverDrawnAndMatchTheHostSampler) {
  const auto free_run = generate(model_, true, SamplingParams{});
  SamplingParams banned;
  for (const auto& seq : free_run) {
    for (Token t : seq) {
      if (banned.suppressed_count < 4) banned.suppress(t);
    }
  }
  ASSERT_GT(banned.suppressed_count, 0u);
  for (const Policy& policy : {Policy{0.0f, 1.0f, 0}, kPolicies[0], kPolicies[2]}) {
    SamplingParams params = banned;
    params.temperature = policy.temperature;
    params.top_p = policy.top_p;
    params.top_k = policy.top_k;
    const auto device = generate(model_, true, params);
    EXPECT_EQ(generate(model_, false, params), device) << "T=" << policy.temperature;
    for (const auto& seq : device) {
      for (Token t : seq) EXPECT_FALSE(params.suppresses(t)) << "drew suppressed id " << t;
    }
    if (policy.temperature == 0.0f) {
      EXPECT_NE(device, free_run);
    }
  }
}

// The device's logit adjustments (sample_penalize) equal the host
// reference bit for bit, row by row, for every kind of entry and min_p at
// several temperatures; the draws over the adjusted logits then match too.
TEST_F(GpuSamplerTest, PenalizeKernelMatchesTheHostReferenceBitForBit) {
  std::shared_ptr<program::Program> program = fixture_program(model_, true, true);
  ASSERT_NE(program, nullptr);
  auto ex = make_test_executor(program, 8);
  ASSERT_NE(ex, nullptr);
  executor::RawTargetStep step;
  const std::int64_t tokens[8] = {3, 17, 42, 9, 100, 7, 250, 33};
  for (int i = 0; i < 8; ++i) {
    const cache::SeqId seq = ex->cache_control().seq_new().value_or(-1);
    ASSERT_GE(seq, 0);
    step.tokens.push_back(tokens[i]);
    step.positions.push_back(0);
    step.seq_ids.push_back(seq);
    step.logit_indices.push_back(i);
  }
  // Row r: a policy and a history mixing prompt and output tokens.
  const auto policy_of = [](std::size_t r) {
    SamplingParams p;
    p.temperature = r % 4 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>(r);
    p.repetition_penalty = r % 3 == 0 ? 1.0f : 1.1f + 0.1f * static_cast<float>(r);
    p.frequency_penalty = r % 2 == 0 ? 0.0f : -0.5f + 0.3f * static_cast<float>(r);
    p.presence_penalty = r == 5 ? 0.0f : 0.2f * static_cast<float>(r) - 0.6f;
    p.min_p = r % 2 == 0 ? 0.05f * static_cast<float>(r) : 0.0f;
    std::vector<LogitBias> bias;
    for (Token t = 1; t < 40; t += 7) bias.push_back({t * (r + 1), static_cast<float>(t) - 20.0f});
    p.logit_bias = sampling::make_logit_bias(bias);
    if (r == 6) (void)p.suppress(0);
    return p;
  };
  const bool ok = ex->execute_raw(step, [&](const executor::RawTargetOutput& out) {
    auto before = cuda::copy_to_host(out.logits);
    EXPECT_TRUE(before.ok());
    if (!before.ok()) return false;
    const std::int64_t v = before->dim(1);
    const std::size_t rows = out.selected_indices.size();
    std::vector<sampling::PenaltyEntry> entries;
    std::vector<float> row_params;
    std::vector<std::int32_t> offsets = {0};
    std::vector<std::vector<float>> want(rows);
    std::vector<sampling::PenaltyEntry> row_entries;
    for (std::size_t r = 0; r < rows; ++r) {
      const SamplingParams p = policy_of(r);
      sampling::TokenCounts counts;
      for (int i = 0; i < 30; ++i) {
        counts.add(static_cast<Token>((i * 13 + static_cast<int>(r)) % v), i >= 20);
      }
      sampling::build_entries(p, counts, v, row_entries);
      entries.insert(entries.end(), row_entries.begin(), row_entries.end());
      offsets.push_back(static_cast<std::int32_t>(entries.size()));
      row_params.insert(row_params.end(), {p.repetition_penalty, p.temperature,
                                           sampling::min_p_log_threshold(p.min_p)});
      const float* src = before->data_as<float>() + static_cast<std::int64_t>(r) * v;
      want[r].assign(src, src + v);
      sampling::adjust_row(want[r], p, row_entries);
    }
    const auto n = static_cast<std::int64_t>(rows);
    const std::vector<Tensor> inputs = {
        out.logits.slice_rows(0, n),
        Tensor::view(row_params.data(), DType::kF32, {n, program::kPenalizeRowParams}),
        Tensor::view(offsets.data(), DType::kI32, {n + 1}),
        Tensor::view(entries.data(), DType::kI32, {static_cast<std::int64_t>(entries.size()), 4})};
    auto ran = program->execute(program::kPenalizeMethod, inputs);
    EXPECT_TRUE(ran.ok()) << ran.status().to_string();
    auto after = cuda::copy_to_host(out.logits);
    EXPECT_TRUE(after.ok());
    if (!ran.ok() || !after.ok()) return false;
    int dropped = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      const float* got = after->data_as<float>() + static_cast<std::int64_t>(r) * v;
      EXPECT_EQ(std::memcmp(got, want[r].data(), static_cast<std::size_t>(v) * sizeof(float)), 0)
          << "row " << r << " differs from the host reference";
      dropped += static_cast<int>(
          std::count(want[r].begin(), want[r].end(), -std::numeric_limits<float>::infinity()));
    }
    EXPECT_GT(dropped, 0) << "min_p dropped nothing: the test does not exercise it";
    // The draws over the adjusted logits.
    sampling::Xorshift64Star rng(99);
    std::vector<float> params;
    for (std::size_t r = 0; r < rows; ++r) {
      const SamplingParams p = policy_of(r);
      params.insert(params.end(), {p.temperature, 1.0f, 0.0f, rng.next_f32()});
    }
    auto device = ex->sample_rows(out.logits, rows, params);
    EXPECT_TRUE(device.has_value());
    for (std::size_t r = 0; device && r < rows; ++r) {
      EXPECT_EQ((*device)[r], static_cast<Token>(sampling::sample_row(want[r], params[r * 4], 1.0f,
                                                                      0, params[r * 4 + 3])))
          << "row " << r;
    }
    return true;
  });
  ASSERT_TRUE(ok);
}

// Seeded generations with every parameter of the sampling set: the device
// (sample_penalize, then the device sampler) draws what the host reference
// draws from the same GPU logits, and the parameters change the output.
TEST_F(GpuSamplerTest, EveryParameterMatchesBetweenDeviceAndHostSampling) {
  const auto free_run = generate(model_, true, SamplingParams{});
  std::vector<SamplingParams> policies(6);
  policies[0].repetition_penalty = 1.3f;  // greedy
  policies[1].logit_bias = sampling::make_logit_bias(
      {{free_run[0][0], -100.0f}, {free_run[1][0], -100.0f}, {free_run[2][0], -100.0f}});
  policies[2] = SamplingParams{1.0f, 1.0f, 0};
  policies[2].frequency_penalty = 1.5f;
  policies[2].presence_penalty = 0.5f;
  policies[2].min_p = 0.05f;
  policies[3] = SamplingParams{0.8f, 0.9f, 0};
  policies[3].repetition_penalty = 1.2f;
  policies[3].min_p = 0.1f;
  policies[3].logit_bias = sampling::make_logit_bias({{free_run[0][1], 5.0f}});
  policies[4] = SamplingParams{1.3f, 1.0f, 3};
  policies[4].presence_penalty = -1.0f;
  policies[5] = policies[1];  // greedy bias with a suppressed id on top
  (void)policies[5].suppress(free_run[0][1]);
  for (std::size_t i = 0; i < policies.size(); ++i) {
    const auto device = generate(model_, true, policies[i]);
    EXPECT_EQ(generate(model_, false, policies[i]), device) << "policy " << i;
    if (i == 1 || i == 5) {
      EXPECT_NE(device, free_run) << "policy " << i;
      for (std::size_t s = 0; s < 3; ++s) EXPECT_NE(device[s][0], free_run[s][0]);
    }
  }
}

TEST_F(GpuSamplerTest, GraphReplayEqualsEagerBitForBit) {
  std::vector<std::int64_t> inputs(80);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    inputs[i] = static_cast<std::int64_t>((i * 37 + 11) % 300);
  std::map<std::size_t, std::vector<float>> got[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    auto ex = make_test_executor(fixture_program(model_, true, graphs == 1), 8);
    ASSERT_NE(ex, nullptr);
    FedSeq a, b;
    a.seq = ex->cache_control().seq_new().value_or(-1);
    b.seq = ex->cache_control().seq_new().value_or(-1);
    a.inputs = b.inputs = &inputs;
    // Widths 1, 3 (padded to 4), 6 (padded to 8), 20 (two sequences), 45 (dynamic).
    ASSERT_TRUE(feed(*ex, {{&a, 1}}));
    ASSERT_TRUE(feed(*ex, {{&a, 3}}));
    ASSERT_TRUE(feed(*ex, {{&a, 2}, {&b, 4}}));
    ASSERT_TRUE(feed(*ex, {{&a, 10}, {&b, 10}}));
    ASSERT_TRUE(feed(*ex, {{&a, 30}, {&b, 15}}));
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(feed(*ex, {{&a, 1}, {&b, 1}}));
    for (auto& [pos, row] : a.logits) got[graphs][pos] = row;
    for (auto& [pos, row] : b.logits) got[graphs][1000 + pos] = row;
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  for (auto& [key, row] : got[0]) {
    const auto& other = got[1][key];
    ASSERT_EQ(row.size(), other.size());
    EXPECT_EQ(std::memcmp(row.data(), other.data(), row.size() * sizeof(float)), 0)
        << "row " << key << " differs between graph replay and eager execution";
  }
}

// The decode attention's split count is baked into a graph and follows the
// step's longest session (ForwardShape::key_span), so a session decoding past
// 128 and 256 keys moves on to graphs of other split counts; each must replay
// what an eager step of the same split computes.
TEST_F(GpuSamplerTest, GraphsFollowTheSessionLengthAndReplayWhatEagerComputes) {
  std::vector<std::int64_t> inputs(300);
  for (std::size_t i = 0; i < inputs.size(); ++i)
    inputs[i] = static_cast<std::int64_t>((i * 53 + 7) % 300);
  constexpr std::size_t kPrompt = 40;  // a dynamic (eager) step, then one token a step
  std::vector<std::vector<float>> rows[2];
  for (int graphs = 0; graphs < 2; ++graphs) {
    std::shared_ptr<program::Program> program = fixture_program(model_, true, graphs == 1);
    ASSERT_NE(program, nullptr);
    auto ex = make_test_executor(program, 2);
    ASSERT_NE(ex, nullptr);
    FedSeq a;
    a.seq = ex->cache_control().seq_new().value_or(-1);
    a.inputs = &inputs;
    ASSERT_TRUE(feed(*ex, {{&a, kPrompt}}));
    for (std::size_t pos = kPrompt; pos < inputs.size(); ++pos) {
      ASSERT_TRUE(feed(*ex, {{&a, 1}}));
      // Every 20th row whole, so the test holds a few MB.
      if (pos % 20 == 0 || pos == inputs.size() - 1) rows[graphs].push_back(a.logits[pos]);
      a.logits.clear();
    }
    const cuda::CudaProgramStats* stats = cuda::cuda_program_stats(*program);
    ASSERT_NE(stats, nullptr);
    if (graphs == 1) {
      // Six static widths; on a device of more than a few SMs, 256 keys take
      // more splits than 64 at every width.
      EXPECT_GT(stats->graphs_captured, 6u)
          << "one graph a width: the split count does not follow the session's length";
    } else {
      EXPECT_EQ(stats->graphs_captured, 0u);
    }
  }
  ASSERT_EQ(rows[0].size(), rows[1].size());
  for (std::size_t i = 0; i < rows[0].size(); ++i) {
    ASSERT_EQ(rows[0][i].size(), rows[1][i].size());
    EXPECT_EQ(std::memcmp(rows[0][i].data(), rows[1][i].data(), rows[0][i].size() * sizeof(float)),
              0)
        << "sampled row " << i << " differs between graph replay and eager execution";
  }
}

}  // namespace
}  // namespace cellm::gpu_testing
