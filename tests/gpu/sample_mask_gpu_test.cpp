// Constrained decoding on the GPU: the sample_mask kernel equals the host
// reference (sampling/token_mask.h) bit for bit, and masked generations
// through the CudaExecutor draw the same tokens on the device sampler as on
// the host sampler (same GPU logits, same seeds), every token inside its mask.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_program.h"
#include "executor/cuda_executor.h"
#include "model/loader.h"
#include "raw_driver.h"
#include "sampling/sampler.h"
#include "sampling/token_mask.h"
#include "support/golden.h"

namespace cellm::gpu_testing {
namespace {

std::shared_ptr<program::Program> mask_program(const model::LoadedModel& m, bool device_sampling) {
  program::ProgramOptions options;
  options.static_widths = {1, 2, 4, 8, 16, 32};
  options.max_step = 128;
  options.kv_cells = 4096;
  options.device_sampling = device_sampling;
  auto p = cuda::load_program(m.spec, m.weights, options);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (!p.ok()) return nullptr;
  return std::shared_ptr<program::Program>(std::move(p).value());
}

// A mask allowing about `percent` of the ids (seeded).
std::shared_ptr<TokenMask> random_mask(std::int64_t vocab, int percent, std::uint64_t seed) {
  auto m = std::make_shared<TokenMask>();
  m->words.assign(static_cast<std::size_t>((vocab + 31) / 32), 0u);
  std::mt19937_64 rng(seed);
  for (std::int64_t t = 0; t < vocab; ++t) {
    if (static_cast<int>(rng() % 100) < percent) m->words[t / 32] |= 1u << (t % 32);
  }
  return m;
}

class GpuMaskTest : public ::testing::Test {
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

TEST_F(GpuMaskTest, MaskKernelMatchesTheHostReferenceBitForBit) {
  std::shared_ptr<program::Program> program = mask_program(model_, true);
  ASSERT_NE(program, nullptr);
  auto ex = make_test_executor(program, 8);
  ASSERT_NE(ex, nullptr);
  executor::RawTargetStep step;
  for (int i = 0; i < 8; ++i) {
    const cache::SeqId seq = ex->cache_control().seq_new().value_or(-1);
    ASSERT_GE(seq, 0);
    step.tokens.push_back(3 + 11 * i);
    step.positions.push_back(0);
    step.seq_ids.push_back(seq);
    step.logit_indices.push_back(i);
  }
  const bool ok = ex->execute_raw(step, [&](const executor::RawTargetOutput& out) {
    auto before = cuda::copy_to_host(out.logits);
    EXPECT_TRUE(before.ok());
    if (!before.ok()) return false;
    const std::int64_t v = before->dim(1);
    const auto per_row = static_cast<std::size_t>((v + 31) / 32);
    const std::size_t rows = out.selected_indices.size();
    std::vector<std::uint32_t> words;
    std::vector<std::vector<float>> want(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      // Row 0 allows everything (left alone), row 1 a single id, the rest
      // random densities.
      std::vector<std::uint32_t> w(per_row, ~0u);
      if (r == 1) {
        std::fill(w.begin(), w.end(), 0u);
        w[7 / 32] = 1u << 7;
      } else if (r > 1) {
        w = random_mask(v, static_cast<int>(5 + 12 * r), r)->words;
      }
      words.insert(words.end(), w.begin(), w.end());
      const float* src = before->data_as<float>() + static_cast<std::int64_t>(r) * v;
      want[r].assign(src, src + v);
      sampling::apply_token_mask(want[r], w);
    }
    const auto n = static_cast<std::int64_t>(rows);
    const std::vector<Tensor> inputs = {
        out.logits.slice_rows(0, n),
        Tensor::view(words.data(), DType::kI32, {n, static_cast<std::int64_t>(per_row)})};
    auto ran = program->execute(program::kMaskMethod, inputs);
    EXPECT_TRUE(ran.ok()) << ran.status().to_string();
    auto after = cuda::copy_to_host(out.logits);
    EXPECT_TRUE(after.ok());
    if (!ran.ok() || !after.ok()) return false;
    for (std::size_t r = 0; r < rows; ++r) {
      const float* got = after->data_as<float>() + static_cast<std::int64_t>(r) * v;
      EXPECT_EQ(std::memcmp(got, want[r].data(), static_cast<std::size_t>(v) * sizeof(float)), 0)
          << "row " << r << " differs from the host reference";
    }
    // Greedy draws over the masked logits: the host argmax, inside the mask.
    std::vector<float> params(rows * 4, 0.0f);
    auto device = ex->sample_rows(out.logits, rows, params);
    EXPECT_TRUE(device.has_value());
    for (std::size_t r = 0; device && r < rows; ++r) {
      EXPECT_EQ((*device)[r], static_cast<Token>(sampling::argmax_row(want[r]))) << "row " << r;
    }
    if (device) {
      EXPECT_EQ((*device)[1], Token{7});
    }
    return true;
  });
  ASSERT_TRUE(ok);
}

// Three sessions generate 12 tokens under fixed masks, greedy and sampled:
// device sampling (sample_mask, then the sampler) and host sampling draw the
// same tokens, and every token is allowed by its session's mask.
TEST_F(GpuMaskTest, MaskedGenerationsMatchBetweenDeviceAndHostSampling) {
  const std::int64_t vocab = model_.spec.vocab_size;
  auto run = [&](bool device_sampling, float temperature) {
    std::vector<std::vector<Token>> drawn(3);
    auto ex = make_test_executor(mask_program(model_, device_sampling), 8);
    EXPECT_NE(ex, nullptr);
    if (!ex) return drawn;
    std::vector<SessionId> sids;
    std::vector<std::shared_ptr<TokenMask>> masks;
    for (int i = 0; i < 3; ++i) {
      sids.push_back(*ex->open_session());
      masks.push_back(random_mask(vocab, 10 + 30 * i, 40 + static_cast<std::uint64_t>(i)));
      SamplingParams p;
      p.temperature = temperature;
      p.token_mask = masks.back();
      ex->set_sampling(sids.back(), p, static_cast<std::uint64_t>(i + 1));
    }
    std::vector<Position> pos(3, 0);
    for (int step = 0; step < 12; ++step) {
      BatchInput batch;
      for (std::size_t i = 0; i < 3; ++i) {
        Input in;
        in.sid = sids[i];
        in.produce_output = true;
        in.payload = std::make_shared<const std::vector<Token>>(
            1, step == 0 ? static_cast<Token>(5 + i) : drawn[i].back());
        in.size = 1;
        in.position = pos[i];
        batch.inputs.push_back(std::move(in));
      }
      BatchOutput out;
      EXPECT_TRUE(ex->execute(batch, out));
      if (out.outputs.size() != 3) return drawn;
      for (std::size_t i = 0; i < 3; ++i) {
        ++pos[i];
        const Token t = out.outputs[i]->tokens.at(0);
        EXPECT_TRUE(masks[i]->allows(t)) << "session " << i << " drew " << t;
        drawn[i].push_back(t);
        // The mask changes every step, as a grammar's does.
        masks[i]->words = random_mask(vocab, 10 + 30 * static_cast<int>(i), 100 * step + i)->words;
      }
    }
    return drawn;
  };
  for (float temperature : {0.0f, 0.9f}) {
    EXPECT_EQ(run(true, temperature), run(false, temperature)) << "T=" << temperature;
  }
}

}  // namespace
}  // namespace cellm::gpu_testing
