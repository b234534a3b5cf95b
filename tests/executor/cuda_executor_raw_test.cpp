// execute_raw, argmax_rows and sample_rows: the model-adapter surface.
#include <gtest/gtest.h>

#include <numeric>

#include "executor/cuda_executor.h"
#include "sampling/sampler.h"
#include "toy_program.h"

namespace cellm::executor::testing {
namespace {

std::unique_ptr<CudaExecutor> make(std::shared_ptr<ToyProgram> program) {
  auto ex = make_toy_executor(std::move(program));
  EXPECT_NE(ex, nullptr);
  return ex;
}

std::int64_t argmax_of(const Tensor& logits, std::int64_t row) {
  std::vector<float> r;
  sampling::row_to_f32(Tensor::view(logits.data(), logits.dtype(), logits.shape()), row, r);
  return sampling::argmax_row(r);
}

// Two caller-owned sequences in one step: a 6-token prompt and a 4-token one.
struct RawFixture {
  std::vector<std::int64_t> a = {4, 8, 15, 16, 23, 12};
  std::vector<std::int64_t> b = {9, 9, 2, 7};
  RawTargetStep step(cache::SeqId sa, cache::SeqId sb) const {
    RawTargetStep s;
    for (std::size_t i = 0; i < a.size(); ++i) {
      s.tokens.push_back(a[i]);
      s.positions.push_back(static_cast<std::int64_t>(i));
      s.seq_ids.push_back(sa);
    }
    for (std::size_t i = 0; i < b.size(); ++i) {
      s.tokens.push_back(b[i]);
      s.positions.push_back(static_cast<std::int64_t>(i));
      s.seq_ids.push_back(sb);
    }
    return s;
  }
  // The token the toy predicts after step row `row`.
  std::int64_t next_after(std::int64_t row, const ToyConfig& c) const {
    const bool in_a = row < static_cast<std::int64_t>(a.size());
    const auto& seq = in_a ? a : b;
    const std::int64_t upto = in_a ? row : row - static_cast<std::int64_t>(a.size());
    return toy_next_token(std::span(seq.data(), static_cast<std::size_t>(upto + 1)), c.windows,
                          c.vocab);
  }
};

TEST(ExecuteRawTest, RepeatedReorderedAndDiscardedRowsMapBack) {
  ToyConfig config;
  config.taps = true;
  auto program = std::make_shared<ToyProgram>(config);
  auto ex = make(program);
  cache::CellCache& cache = ex->cache_control();
  const cache::SeqId sa = *cache.seq_new(), sb = *cache.seq_new();
  RawFixture f;
  RawTargetStep step = f.step(sa, sb);
  step.logit_indices = {9, -1, 3, 3, 0, 5};
  int forwards = 0;
  const bool ok = ex->execute_raw(step, [&](const RawTargetOutput& out) {
    ++forwards;
    EXPECT_EQ(out.offset, 0);
    EXPECT_EQ(out.length, 10);
    EXPECT_EQ(out.selected_indices, (std::vector<std::size_t>{0, 2, 3, 4, 5}));
    EXPECT_GE(out.logits.dim(0), 5);
    for (std::size_t r = 0; r < out.selected_indices.size(); ++r) {
      const std::int64_t row = step.logit_indices[out.selected_indices[r]];
      EXPECT_EQ(argmax_of(out.logits, static_cast<std::int64_t>(r)), f.next_after(row, config))
          << "row " << r;
    }
    EXPECT_NE(out.taps, nullptr);
    if (out.taps != nullptr) {
      for (std::int64_t i = 0; i < 10; ++i) {
        EXPECT_EQ(out.taps->data_as<float>()[2 * i], static_cast<float>(step.tokens[i]));
        EXPECT_EQ(out.taps->data_as<float>()[2 * i + 1], static_cast<float>(step.positions[i]));
      }
    }
    return true;
  });
  EXPECT_TRUE(ok);
  EXPECT_EQ(forwards, 1);
  EXPECT_EQ(cache.pos(sa), 6);
  EXPECT_EQ(cache.pos(sb), 4);
}

TEST(ExecuteRawTest, WideStepsSliceAndPaddingRowsShowInTheTaps) {
  ToyConfig config;
  config.taps = true;
  auto program = std::make_shared<ToyProgram>(config);
  auto ex = make(program);
  const cache::SeqId seq = *ex->cache_control().seq_new();
  RawTargetStep step;
  for (std::int64_t i = 0; i < 35; ++i) {
    step.tokens.push_back(i % 31);
    step.positions.push_back(i);
    step.seq_ids.push_back(seq);
  }
  step.logit_indices = {34, 31, 2};
  std::vector<std::int64_t> offsets;
  ASSERT_TRUE(ex->execute_raw(step, [&](const RawTargetOutput& out) {
    offsets.push_back(out.offset);
    if (out.offset == 0) {
      EXPECT_EQ(out.length, 32);
      EXPECT_EQ(out.selected_indices, (std::vector<std::size_t>{1, 2}));
    } else {
      EXPECT_EQ(out.length, 3);
      EXPECT_EQ(out.selected_indices, (std::vector<std::size_t>{0}));
      // forward_4: the fourth row is padding (token 0 at position 0).
      EXPECT_EQ(out.taps->dim(0), 4);
      EXPECT_EQ(out.taps->data_as<float>()[6], 0.0f);
      EXPECT_EQ(out.taps->data_as<float>()[7], 0.0f);
      std::vector<std::int64_t> history(step.tokens.begin(), step.tokens.end());
      EXPECT_EQ(argmax_of(out.logits, 0), toy_next_token(history, config.windows, config.vocab));
    }
    return true;
  }));
  EXPECT_EQ(offsets, (std::vector<std::int64_t>{0, 32}));
  EXPECT_EQ(program->calls.back().method, "forward_4");
}

TEST(ExecuteRawTest, RefusesMalformedStepsAndReentry) {
  auto program = std::make_shared<ToyProgram>(ToyConfig{});
  auto ex = make(program);
  cache::CellCache& cache = ex->cache_control();
  const cache::SeqId sa = *cache.seq_new(), sb = *cache.seq_new();
  RawFixture f;
  const auto accept = [](const RawTargetOutput&) { return true; };
  RawTargetStep bad = f.step(sa, sb);
  bad.logit_indices = {10};
  EXPECT_FALSE(ex->execute_raw(bad, accept));
  bad.logit_indices = {-2};
  EXPECT_FALSE(ex->execute_raw(bad, accept));
  bad = f.step(sa, sb);
  bad.positions.pop_back();
  EXPECT_FALSE(ex->execute_raw(bad, accept));
  bad = f.step(sa, sb);
  bad.tokens[1] = 32;
  EXPECT_FALSE(ex->execute_raw(bad, accept));
  bad = f.step(sa, sb);
  bad.positions[2] = 7;  // a gap: the cache refuses the placement
  EXPECT_FALSE(ex->execute_raw(bad, accept));
  EXPECT_FALSE(ex->execute_raw(RawTargetStep{}, accept));
  EXPECT_EQ(cache.pos(sa), 0);
  EXPECT_EQ(cache.pos(sb), 0);
  EXPECT_TRUE(program->calls.empty());

  RawTargetStep good = f.step(sa, sb);
  good.logit_indices = {5};
  bool inner = true;
  EXPECT_TRUE(ex->execute_raw(good, [&](const RawTargetOutput&) {
    inner = ex->execute_raw(good, accept);
    return true;
  }));
  EXPECT_FALSE(inner);
  // A callback that refuses fails the step.
  RawTargetStep next;
  next.tokens = {1};
  next.positions = {6};
  next.seq_ids = {sa};
  EXPECT_FALSE(ex->execute_raw(next, [](const RawTargetOutput&) { return false; }));
}

TEST(RowSamplingTest, HostLogitsAreSampledOnTheHost) {
  auto program = std::make_shared<ToyProgram>(ToyConfig{});
  auto ex = make(program);
  Tensor logits = Tensor::empty(DType::kF32, {3, 32});
  for (std::int64_t r = 0; r < 3; ++r) {
    const std::vector<float> row = toy_logits(5 * r + 1, 32);
    std::copy(row.begin(), row.end(), logits.data_as<float>() + r * 32);
  }
  EXPECT_EQ(ex->argmax_rows(logits, 3), (std::vector<Token>{1, 6, 11}));
  EXPECT_EQ(ex->argmax_rows(logits, 2), (std::vector<Token>{1, 6}));
  EXPECT_FALSE(ex->argmax_rows(logits, 4).has_value());
  EXPECT_FALSE(ex->argmax_rows(Tensor::empty(DType::kF32, {3, 31}), 1).has_value());
  const std::vector<float> params = {0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 1.0f,
                                     0.0f, 0.3f, 1.5f, 0.8f, 0.0f, 0.9f};
  const auto tokens = ex->sample_rows(logits, 3, params);
  ASSERT_TRUE(tokens.has_value());
  auto reference = sampling::sample_rows(logits, Tensor::view(params.data(), DType::kF32, {3, 4}));
  ASSERT_TRUE(reference.ok());
  EXPECT_EQ(*tokens, std::vector<Token>(reference->begin(), reference->end()));
  EXPECT_EQ((*tokens)[0], 1u);
  EXPECT_FALSE(ex->sample_rows(logits, 3, std::vector<float>(8)).has_value());
  EXPECT_TRUE(program->calls.empty());
}

TEST(RowSamplingTest, DeviceLogitsGoThroughTheProgramsSamplers) {
  ToyConfig config;
  config.device_logits = true;
  config.samplers = true;
  auto program = std::make_shared<ToyProgram>(config);
  auto ex = make(program);
  std::vector<float> storage(2 * 32);
  for (std::int64_t r = 0; r < 2; ++r) {
    const std::vector<float> row = toy_logits(r + 20, 32);
    std::copy(row.begin(), row.end(), storage.begin() + r * 32);
  }
  const Tensor logits = Tensor::view(storage.data(), DType::kF32, {2, 32}, Device::kCuda);
  EXPECT_EQ(ex->argmax_rows(logits, 2), (std::vector<Token>{20, 21}));
  EXPECT_EQ(program->calls.back().method, "sample_argmax");
  const std::vector<float> greedy = {0.0f, 1.0f, 0.0f, 0.0f, -1.0f, 1.0f, 0.0f, 0.0f};
  EXPECT_EQ(ex->sample_rows(logits, 2, greedy), (std::vector<Token>{20, 21}));
  EXPECT_EQ(program->calls.back().method, "sample_argmax");
  const std::vector<float> hot = {1.0f, 1.0f, 2.0f, 0.7f, 0.0f, 1.0f, 0.0f, 0.0f};
  const auto drawn = ex->sample_rows(logits, 2, hot);
  EXPECT_EQ(program->calls.back().method, "sample");
  ASSERT_TRUE(drawn.has_value());
  const std::vector<float> row0(storage.begin(), storage.begin() + 32);
  EXPECT_EQ((*drawn)[0], static_cast<Token>(sampling::sample_row(row0, 1.0f, 1.0f, 2, 0.7f)));
  EXPECT_EQ((*drawn)[1], 21u);
}

TEST(RowSamplingTest, DeviceLogitsWithoutSamplersAreRefused) {
  auto program = std::make_shared<ToyProgram>(ToyConfig{});
  auto ex = make(program);
  std::vector<float> storage(32);
  const Tensor logits = Tensor::view(storage.data(), DType::kF32, {1, 32}, Device::kCuda);
  EXPECT_FALSE(ex->argmax_rows(logits, 1).has_value());
  EXPECT_FALSE(ex->sample_rows(logits, 1, {1.0f, 1.0f, 0.0f, 0.5f}).has_value());
}

}  // namespace
}  // namespace cellm::executor::testing
