// app::step_budget: the step sizes `cellm serve` and `cellm bench serve` share.
#include "app/step_budget.h"

#include <string>

#include <gtest/gtest.h>

namespace cellm::app {
namespace {

bool mentions(const Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST(StepBudgetTest, ZerosTakeTheDefaults) {
  auto b = step_budget(0, 0, 64);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->decodes, 64u);
  EXPECT_EQ(b->chunk, static_cast<std::size_t>(kDefaultPrefillChunk));
  EXPECT_EQ(b->batch, 64u + 2 * static_cast<std::size_t>(kDefaultPrefillChunk));
  auto scheduler = make_scheduler(*b);
  ASSERT_NE(scheduler, nullptr);
  EXPECT_EQ(scheduler->max_batch_tokens(), b->batch);
  EXPECT_EQ(scheduler->max_decode_sequences(), 64u);
  EXPECT_EQ(scheduler->max_prefill_chunk_size(), b->chunk);
}

TEST(StepBudgetTest, TheWidestForwardCapsTheChunk) {
  auto b = step_budget(2048, 0, 8, 512);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->chunk, 512u);
  EXPECT_EQ(b->batch, 8u + 2 * 512u);
  auto given = step_budget(100, 300, 8, 512);
  ASSERT_TRUE(given.ok());
  EXPECT_EQ(given->chunk, 100u);
  EXPECT_EQ(given->batch, 300u);
}

TEST(StepBudgetTest, TheExactMinimumIsAcceptedAndOneLessIsNot) {
  EXPECT_TRUE(step_budget(128, 64 + 128, 64).ok());
  const Status s = step_budget(128, 64 + 127, 64).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(s, "at least 192")) << s.to_string();
}

TEST(StepBudgetTest, NegativeValuesAreRefusedWithTheDefaultNamed) {
  const Status chunk = step_budget(-1, 0, 4).status();
  EXPECT_EQ(chunk.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(mentions(chunk, std::to_string(kDefaultPrefillChunk))) << chunk.to_string();
  EXPECT_FALSE(step_budget(0, -1, 4).ok());
  EXPECT_FALSE(step_budget(0, 0, 0).ok());
  EXPECT_FALSE(step_budget(0, 0, 4, 0).ok());
}

}  // namespace
}  // namespace cellm::app
