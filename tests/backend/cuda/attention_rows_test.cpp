// split_attention_rows: which rows of an eager step the split-KV kernel takes;
// first_step_positions: where each row's keys of this step begin.
// Host only (no device needed).
#include "backend/cuda/attention_rows.h"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>

namespace cellm::cuda {
namespace {

std::vector<std::int32_t> split(const std::vector<std::int32_t>& slots, std::int32_t max_lead,
                                std::int32_t* lead) {
  std::vector<std::int32_t> order(slots.size(), -7);
  std::vector<std::int32_t> scratch;
  *lead = split_attention_rows(slots, max_lead, order, scratch);
  return order;
}

TEST(AttentionRowsTest, DecodesAndShortChunksLeadLongChunksAndPaddingFollow) {
  // Slot 3 decodes (1 row), slot 5 feeds a chunk of 20, slot 1 a chunk of 4,
  // slot 0 decodes; two padding rows at the end.
  std::vector<std::int32_t> slots = {3};
  slots.insert(slots.end(), 20, 5);
  slots.insert(slots.end(), 4, 1);
  slots.push_back(0);
  slots.insert(slots.end(), 2, -1);
  std::int32_t lead = 0;
  const auto order = split(slots, 1000, &lead);
  ASSERT_EQ(lead, 6);
  EXPECT_EQ(order[0], 0);                                       // slot 3
  for (int i = 0; i < 4; ++i) EXPECT_EQ(order[1 + i], 21 + i);  // slot 1's chunk, in order
  EXPECT_EQ(order[5], 25);                                      // slot 0
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[6 + i], 1 + i);  // slot 5's chunk, in order
  EXPECT_EQ(order[26], 26);
  EXPECT_EQ(order[27], 27);
}

TEST(AttentionRowsTest, EveryRowAppearsOnce) {
  std::vector<std::int32_t> slots;
  for (int i = 0; i < 300; ++i) slots.push_back(i % 7 == 0 ? 9 : i % 40);  // slot 9: 43 rows
  for (std::int32_t max_lead : {0, 1, 100, 1000}) {
    std::int32_t lead = 0;
    auto order = split(slots, max_lead, &lead);
    EXPECT_LE(lead, max_lead);
    for (std::int32_t i = 0; i < lead; ++i) {
      EXPECT_NE(slots[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])], 9)
          << "slot 9 has " << kPrefillKernelMinRows << "+ rows and belongs to the prefill kernel";
    }
    std::sort(order.begin(), order.end());
    std::vector<std::int32_t> all(slots.size());
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(order, all) << "max_lead " << max_lead;
  }
}

TEST(AttentionRowsTest, TheThresholdIsPerSequenceNotPerRun) {
  // Slot 2's 16 rows are split in two runs of 8; together they reach the
  // threshold, so none of them leads.
  std::vector<std::int32_t> slots(8, 2);
  slots.insert(slots.end(), 3, 4);
  slots.insert(slots.end(), 8, 2);
  std::int32_t lead = 0;
  const auto order = split(slots, 1000, &lead);
  ASSERT_EQ(lead, 3);
  EXPECT_EQ(order[0], 8);
  EXPECT_EQ(order[1], 9);
  EXPECT_EQ(order[2], 10);
}

TEST(AttentionRowsTest, NoRowsNoLead) {
  std::int32_t lead = 5;
  EXPECT_TRUE(split({}, 10, &lead).empty());
  EXPECT_EQ(lead, 0);
  EXPECT_TRUE(split({-1, -1}, 10, &lead).size() == 2);
  EXPECT_EQ(lead, 0);
}

TEST(FirstStepPositionsTest, EachRowGetsItsSequencesFirstRowInTheStep) {
  // Slot 4 decodes at 30; slot 2 feeds positions 7..9 out of order; slot 0
  // decodes at 0; a padding row.
  const std::vector<std::int32_t> slots = {4, 2, 2, 0, 2, -1};
  const std::vector<std::int32_t> positions = {30, 9, 7, 0, 8, 0};
  std::vector<std::int32_t> fresh(slots.size(), -5);
  std::vector<std::int32_t> scratch = {99, 99};  // stale contents are ignored
  first_step_positions(slots, positions, fresh, scratch);
  EXPECT_EQ(fresh, (std::vector<std::int32_t>{30, 7, 7, 0, 7, 0}));
}

TEST(FirstStepPositionsTest, NegativePositionsWaitForEverything) {
  const std::vector<std::int32_t> slots = {1, 1};
  const std::vector<std::int32_t> positions = {-1, 5};
  std::vector<std::int32_t> fresh(2);
  std::vector<std::int32_t> scratch;
  first_step_positions(slots, positions, fresh, scratch);
  EXPECT_EQ(fresh, (std::vector<std::int32_t>{0, 0}));
}

}  // namespace
}  // namespace cellm::cuda
