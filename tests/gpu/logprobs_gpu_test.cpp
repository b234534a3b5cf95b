// The device logprobs (the CUDA program's sample_logprobs) against the host
// reference (sampling/logprobs.h) on a real fixture model's GPU logits:
// the same top ids in the same order, values within float rounding; and
// whole generations through the CudaExecutor report, with device sampling,
// what host sampling of the same GPU logits reports.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_program.h"
#include "executor/cuda_executor.h"
#include "model/loader.h"
#include "program/program.h"
#include "raw_driver.h"
#include "sampling/logprobs.h"
#include "sampling/penalties.h"
#include "support/golden.h"

namespace cellm::gpu_testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::int64_t kTop = program::kLogprobsMaxTop;

std::shared_ptr<program::Program> logprobs_program(const model::LoadedModel& m,
                                                   bool device_sampling) {
  program::ProgramOptions options;
  options.static_widths = {1, 2, 4, 8, 16};
  options.max_step = 64;
  options.kv_cells = 2048;
  options.device_sampling = device_sampling;
  auto p = cuda::load_program(m.spec, m.weights, options);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return nullptr;
  return std::shared_ptr<program::Program>(std::move(p).value());
}

// Float rounding of a sum over the vocabulary, relative to the value.
void expect_close(float got, float want, const std::string& where) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << where;
    return;
  }
  EXPECT_NEAR(got, want, 2e-5 + 2e-6 * std::fabs(want)) << where;
}

class GpuLogprobsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const auto names = cellm::testing::golden_fixture_names();
    ASSERT_FALSE(names.empty());
    auto m = model::load_model(cellm::testing::golden_root() / names.front());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(m).value();
  }
  model::LoadedModel model_;
};

// Eight rows of real logits: each row's temperature, count and suppressed
// ids differ; one row is skipped; then rows with min_p (sample_penalize)
// leave fewer live ids than asked for, which fill with -inf in id order.
TEST_F(GpuLogprobsTest, KernelMatchesTheHostReference) {
  std::shared_ptr<program::Program> program = logprobs_program(model_, true);
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
  const float temperatures[8] = {0.0f, 1.0f, 0.7f, 1.3f, 0.0f, 0.5f, 2.0f, 1.0f};
  const float counts[8] = {5.0f, 20.0f, 0.0f, 1.0f, -1.0f, 20.0f, 7.0f, 20.0f};
  for (bool min_p : {false, true}) {
    // The second pass feeds position 0 again: rewind what the first one placed.
    for (const cache::SeqId seq : step.seq_ids) {
      ASSERT_TRUE(ex->cache_control().rewind(seq, 0));
    }
    const bool ok = ex->execute_raw(step, [&](const executor::RawTargetOutput& out) {
      const std::size_t rows = out.selected_indices.size();
      if (min_p) {
        // min_p 0.2 at each row's temperature (1 for greedy rows).
        std::vector<float> row_params;
        std::vector<std::int32_t> offsets(rows + 1, 0);
        for (std::size_t r = 0; r < rows; ++r) {
          row_params.insert(row_params.end(),
                            {1.0f, temperatures[r] > 0.0f ? temperatures[r] : 1.0f,
                             sampling::min_p_log_threshold(0.2f)});
        }
        std::vector<std::int32_t> no_entries;
        const auto n = static_cast<std::int64_t>(rows);
        const std::vector<Tensor> inputs = {
            out.logits.slice_rows(0, n),
            Tensor::view(row_params.data(), DType::kF32, {n, program::kPenalizeRowParams}),
            Tensor::view(offsets.data(), DType::kI32, {n + 1}),
            Tensor::view(no_entries.data(), DType::kI32, {0, 4})};
        auto ran = program->execute(program::kPenalizeMethod, inputs);
        EXPECT_TRUE(ran.ok()) << ran.status().to_string();
        if (!ran.ok()) return false;
      }
      auto host = cuda::copy_to_host(out.logits);
      EXPECT_TRUE(host.ok());
      if (!host.ok()) return false;
      const std::int64_t v = host->dim(1);
      std::vector<float> params;
      std::vector<std::int64_t> drawn;
      std::vector<std::int64_t> suppressed(rows * kMaxSuppressedTokens, -1);
      for (std::size_t r = 0; r < rows; ++r) {
        params.insert(params.end(), {temperatures[r], counts[r]});
        const float* row = host->data_as<float>() + static_cast<std::int64_t>(r) * v;
        const auto best = static_cast<std::int64_t>(std::max_element(row, row + v) - row);
        drawn.push_back((best + static_cast<std::int64_t>(r)) % v);  // not always the argmax
        if (r == 3) suppressed[r * kMaxSuppressedTokens] = best;     // its best id is banned
      }
      const auto n = static_cast<std::int64_t>(rows);
      const std::vector<Tensor> inputs = {
          out.logits.slice_rows(0, n), Tensor::view(params.data(), DType::kF32, {n, 2}),
          Tensor::view(drawn.data(), DType::kI64, {n}),
          Tensor::view(suppressed.data(), DType::kI64,
                       {n, static_cast<std::int64_t>(kMaxSuppressedTokens)})};
      auto got = program->execute(program::kLogprobsMethod, inputs);
      EXPECT_TRUE(got.ok()) << got.status().to_string();
      if (!got.ok()) return false;
      const float* values = (*got)[0].data_as<float>();
      const std::int64_t* ids = (*got)[1].data_as<std::int64_t>();
      int filled = 0;
      for (std::size_t r = 0; r < rows; ++r) {
        if (counts[r] < 0.0f) continue;
        const std::string where = std::string(min_p ? "min_p " : "") + "row " + std::to_string(r);
        std::vector<Token> banned;
        if (suppressed[r * kMaxSuppressedTokens] >= 0) {
          banned.push_back(static_cast<Token>(suppressed[r * kMaxSuppressedTokens]));
        }
        TokenLogprobs want;
        sampling::row_logprobs(std::span(host->data_as<float>() + static_cast<std::int64_t>(r) * v,
                                         static_cast<std::size_t>(v)),
                               temperatures[r], banned, static_cast<Token>(drawn[r]),
                               static_cast<int>(counts[r]), want);
        expect_close(values[r * (1 + kTop)], want.logprob, where + " drawn");
        for (std::size_t j = 0; j < static_cast<std::size_t>(kTop); ++j) {
          if (j >= want.top.size()) {
            EXPECT_EQ(ids[r * kTop + j], -1) << where << " slot " << j;
            continue;
          }
          EXPECT_EQ(ids[r * kTop + j], static_cast<std::int64_t>(want.top[j].token))
              << where << " rank " << j;
          expect_close(values[r * (1 + kTop) + 1 + j], want.top[j].logprob,
                       where + " rank " + std::to_string(j));
          filled += want.top[j].logprob == -kInf;
        }
      }
      if (min_p) {
        EXPECT_GT(filled, 0) << "min_p left every row 20 live ids: -inf fill untested";
      }
      return true;
    });
    ASSERT_TRUE(ok) << (min_p ? "with min_p" : "plain");
  }
}

// Three sessions asking for logprobs (greedy with 5 alternatives, sampled
// with top-k and 20, greedy with logit_bias and 0) and one that does not:
// device and host sampling of the same GPU logits draw the same tokens and
// report the same logprobs; the plain session gets none.
TEST_F(GpuLogprobsTest, GenerationsReportTheSameLogprobsOnDeviceAndHost) {
  std::vector<SamplingParams> policies(4);
  policies[0].logprobs = 5;
  policies[1] = SamplingParams{0.8f, 1.0f, 40};
  policies[1].logprobs = 20;
  policies[2].logit_bias = sampling::make_logit_bias({{11, 3.0f}, {12, -2.0f}});
  policies[2].repetition_penalty = 1.2f;
  policies[2].logprobs = 0;
  struct Run {
    std::vector<std::vector<Token>> drawn;
    std::vector<std::vector<TokenLogprobs>> logprobs;
  };
  const auto generate = [&](bool device_sampling) {
    Run run;
    run.drawn.resize(4);
    run.logprobs.resize(4);
    auto ex = make_test_executor(logprobs_program(model_, device_sampling), 8);
    EXPECT_NE(ex, nullptr);
    if (!ex) return run;
    EXPECT_EQ(ex->samples_on_device(), device_sampling);
    std::vector<SessionId> sids;
    std::vector<Position> pos(4, 0);
    for (std::size_t i = 0; i < 4; ++i) {
      sids.push_back(*ex->open_session());
      ex->set_sampling(sids.back(), policies[i], 7 + i);
    }
    for (int s = 0; s < 10; ++s) {
      BatchInput batch;
      for (std::size_t i = 0; i < 4; ++i) {
        Input in;
        in.sid = sids[i];
        in.produce_output = true;
        in.payload = std::make_shared<const std::vector<Token>>(
            s == 0 ? std::vector<Token>{static_cast<Token>(4 + i), 9, 21}
                   : std::vector<Token>{run.drawn[i].back()});
        in.size = s == 0 ? 3 : 1;
        in.position = pos[i];
        batch.inputs.push_back(std::move(in));
      }
      BatchOutput out;
      EXPECT_TRUE(ex->execute(batch, out));
      if (out.outputs.size() != 4) return run;
      for (std::size_t i = 0; i < 4; ++i) {
        pos[i] += s == 0 ? 3 : 1;
        run.drawn[i].push_back(out.outputs[i]->tokens.at(0));
        for (const TokenLogprobs& lp : out.outputs[i]->logprobs) run.logprobs[i].push_back(lp);
      }
    }
    return run;
  };
  const Run host = generate(false);
  const Run device = generate(true);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(device.drawn[i], host.drawn[i]) << "session " << i;
    if (!policies[i].wants_logprobs()) {
      EXPECT_TRUE(device.logprobs[i].empty() && host.logprobs[i].empty()) << "session " << i;
      continue;
    }
    ASSERT_EQ(device.logprobs[i].size(), device.drawn[i].size()) << "session " << i;
    ASSERT_EQ(host.logprobs[i].size(), host.drawn[i].size()) << "session " << i;
    for (std::size_t t = 0; t < device.logprobs[i].size(); ++t) {
      const TokenLogprobs& d = device.logprobs[i][t];
      const TokenLogprobs& h = host.logprobs[i][t];
      const std::string where = "session " + std::to_string(i) + " token " + std::to_string(t);
      EXPECT_EQ(d.token, h.token) << where;
      EXPECT_LE(d.logprob, 0.0f) << where;
      expect_close(d.logprob, h.logprob, where);
      ASSERT_EQ(d.top.size(), static_cast<std::size_t>(policies[i].logprobs)) << where;
      ASSERT_EQ(h.top.size(), d.top.size()) << where;
      for (std::size_t j = 0; j < d.top.size(); ++j) {
        EXPECT_EQ(d.top[j].token, h.top[j].token) << where << " rank " << j;
        expect_close(d.top[j].logprob, h.top[j].logprob, where);
      }
      if (policies[i].temperature <= 0.0f && !d.top.empty()) {
        EXPECT_EQ(d.top[0].token, d.token) << where << ": greedy draws its top id";
      }
    }
  }
}

}  // namespace
}  // namespace cellm::gpu_testing
