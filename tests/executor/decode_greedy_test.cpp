// CudaExecutor::decode_greedy over the toy program: the same ids through the
// program's decode_greedy method (chunks of kDecodeGreedyMaxSteps steps, the
// cache placed step-major) and step by step through execute_raw, and bad
// calls refused before anything is placed.
#include <vector>

#include <gtest/gtest.h>

#include "executor/cuda_executor.h"
#include "toy_program.h"

namespace cellm::executor::testing {
namespace {

ToyConfig chain_config(bool on_device) {
  ToyConfig c;
  c.max_context = 128;
  c.max_cells = 512;
  c.samplers = on_device;
  c.device_logits = on_device;
  c.decode_greedy = on_device;
  return c;
}

// Two prompts prefilled through execute_raw; returns each one's last token.
std::vector<Token> prefill(CudaExecutor& ex, const std::vector<cache::SeqId>& seqs,
                           const std::vector<std::vector<std::int64_t>>& prompts) {
  RawTargetStep step;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    for (std::size_t i = 0; i + 1 < prompts[s].size(); ++i) {
      step.tokens.push_back(prompts[s][i]);
      step.positions.push_back(static_cast<std::int64_t>(i));
      step.seq_ids.push_back(seqs[s]);
    }
  }
  EXPECT_TRUE(ex.execute_raw(step, [](const RawTargetOutput&) { return true; }));
  std::vector<Token> last;
  for (const auto& p : prompts) last.push_back(static_cast<Token>(p.back()));
  return last;
}

class DecodeGreedyTest : public ::testing::TestWithParam<bool> {};

TEST_P(DecodeGreedyTest, MatchesTheToysGreedyContinuation) {
  const bool on_device = GetParam();
  auto program = std::make_shared<ToyProgram>(chain_config(on_device));
  auto ex = make_toy_executor(program);
  ASSERT_NE(ex, nullptr);
  cache::CellCache& cache = ex->cache_control();
  const std::vector<cache::SeqId> seqs = {*cache.seq_new(), *cache.seq_new(), *cache.seq_new()};
  const std::vector<std::vector<std::int64_t>> prompts = {{3, 1, 4, 1, 5}, {2, 7}, {9, 9, 9}};
  const std::vector<Token> last = prefill(*ex, seqs, prompts);
  EXPECT_EQ(ex->decodes_on_device(seqs.size()), on_device);
  program->calls.clear();

  constexpr int kSteps = 70;  // past one chunk of kDecodeGreedyMaxSteps
  auto ids = ex->decode_greedy(seqs, last, kSteps);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  ASSERT_EQ(ids->size(), static_cast<std::size_t>(kSteps));
  const ToyConfig& c = program->config();
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const std::vector<std::int64_t> want = toy_greedy(prompts[s], kSteps, c.windows, c.vocab);
    for (int i = 0; i < kSteps; ++i) {
      ASSERT_EQ((*ids)[static_cast<std::size_t>(i)].size(), seqs.size());
      EXPECT_EQ((*ids)[static_cast<std::size_t>(i)][s], static_cast<Token>(want[i]))
          << "sequence " << s << " step " << i;
    }
    // Every step's token was committed: the sequence grew by kSteps.
    EXPECT_EQ(cache.pos(seqs[s]), static_cast<std::int32_t>(prompts[s].size()) - 1 + kSteps);
  }
  if (on_device) {
    ASSERT_EQ(program->calls.size(), 2u);
    EXPECT_EQ(program->calls[0].method, program::kDecodeGreedyMethod);
    EXPECT_EQ(program->calls[0].real, program::kDecodeGreedyMaxSteps * 3);
    EXPECT_EQ(program->calls[1].real, (kSteps - program::kDecodeGreedyMaxSteps) * 3);
  } else {
    // One forward a step (three rows pad to forward_4) and no sampler: host logits.
    ASSERT_EQ(program->calls.size(), static_cast<std::size_t>(kSteps));
    EXPECT_EQ(program->calls[0].method, "forward_4");
  }
}

TEST_P(DecodeGreedyTest, RefusesBadCallsBeforePlacingAnything) {
  auto program = std::make_shared<ToyProgram>(chain_config(GetParam()));
  auto ex = make_toy_executor(program);
  ASSERT_NE(ex, nullptr);
  cache::CellCache& cache = ex->cache_control();
  const std::vector<cache::SeqId> seqs = {*cache.seq_new(), *cache.seq_new()};
  const std::vector<Token> tokens = {1, 2};
  EXPECT_EQ(ex->decode_greedy({}, {}, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ex->decode_greedy(seqs, std::vector<Token>{1}, 4).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ex->decode_greedy(seqs, tokens, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ex->decode_greedy(seqs, std::vector<Token>{1, 32}, 4).status().code(),
            StatusCode::kInvalidArgument);
  // A sequence that is not live: the cache refuses the placement.
  const std::vector<cache::SeqId> dead = {seqs[0], 3};
  EXPECT_FALSE(ex->decode_greedy(dead, tokens, 4).ok());
  EXPECT_EQ(cache.pos(seqs[0]), 0);
  EXPECT_EQ(cache.pos(seqs[1]), 0);
  EXPECT_TRUE(program->calls.empty());

  // Not from inside execute_raw's callback.
  RawTargetStep step;
  step.tokens = {5};
  step.positions = {0};
  step.seq_ids = {seqs[0]};
  Status inner = Status::ok();
  EXPECT_TRUE(ex->execute_raw(step, [&](const RawTargetOutput&) {
    inner =
        ex->decode_greedy(std::vector<cache::SeqId>{seqs[1]}, std::vector<Token>{1}, 2).status();
    return true;
  }));
  EXPECT_EQ(inner.code(), StatusCode::kUnavailable);
  EXPECT_EQ(cache.pos(seqs[1]), 0);
}

TEST_P(DecodeGreedyTest, AFailedCallLeavesTheSequencesWhereTheyWere) {
  const bool on_device = GetParam();
  auto program = std::make_shared<ToyProgram>(chain_config(on_device));
  auto ex = make_toy_executor(program);
  ASSERT_NE(ex, nullptr);
  cache::CellCache& cache = ex->cache_control();
  const std::vector<cache::SeqId> seqs = {*cache.seq_new(), *cache.seq_new()};
  const std::vector<std::vector<std::int64_t>> prompts = {{6, 2, 8}, {1, 1}};
  const std::vector<Token> last = prefill(*ex, seqs, prompts);
  const std::int32_t free_before = cache.metrics().cells_free;
  // The program fails the call after the executor placed its steps (the
  // first 64-step chunk on the device, the first step's forward otherwise).
  program->fail_method = on_device ? std::string(program::kDecodeGreedyMethod) : "forward_2";
  EXPECT_FALSE(ex->decode_greedy(seqs, last, 70).ok());
  EXPECT_EQ(cache.pos(seqs[0]), 2);
  EXPECT_EQ(cache.pos(seqs[1]), 1);
  EXPECT_EQ(cache.metrics().cells_free, free_before);
  // Both continue from there as if the call had not happened.
  program->fail_method.clear();
  auto ids = ex->decode_greedy(seqs, last, 5);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  const ToyConfig& c = program->config();
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const std::vector<std::int64_t> want = toy_greedy(prompts[s], 5, c.windows, c.vocab);
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ((*ids)[static_cast<std::size_t>(i)][s], static_cast<Token>(want[i]))
          << "sequence " << s << " step " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, DecodeGreedyTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Chained" : "StepByStep"; });

TEST(DecodeGreedyTest, RowsWiderThanTheMethodGoStepByStep) {
  ToyConfig c = chain_config(true);
  c.static_widths = {1, 2};  // decode_greedy takes at most two rows
  auto program = std::make_shared<ToyProgram>(c);
  auto ex = make_toy_executor(program);
  ASSERT_NE(ex, nullptr);
  cache::CellCache& cache = ex->cache_control();
  const std::vector<cache::SeqId> seqs = {*cache.seq_new(), *cache.seq_new(), *cache.seq_new()};
  EXPECT_TRUE(ex->decodes_on_device(2));
  EXPECT_FALSE(ex->decodes_on_device(3));
  auto ids = ex->decode_greedy(seqs, std::vector<Token>{4, 5, 6}, 3);
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const std::vector<std::int64_t> want =
        toy_greedy({static_cast<std::int64_t>(4 + s)}, 3, c.windows, c.vocab);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ((*ids)[static_cast<std::size_t>(i)][s], static_cast<Token>(want[i]));
    }
  }
  for (const ToyProgram::Call& call : program->calls) {
    EXPECT_NE(call.method, program::kDecodeGreedyMethod);
  }
}

}  // namespace
}  // namespace cellm::executor::testing
