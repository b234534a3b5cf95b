// Every refused CellCache call leaves the whole observable state (tables,
// refcounts, metrics, the current step) exactly as it was.
#include <gtest/gtest.h>

#include <vector>

#include "cache/cache_test_util.h"
#include "cache/cell_cache.h"

namespace cellm::cache {
namespace {

using testing::extend;
using testing::make_cache;
using testing::place;
using testing::snapshot;
using testing::Step;

// Two live sequences (0: 3 tokens, 1: 2 tokens) with a placed current step,
// so a refusal that wrongly clears the step is caught too.
class CellRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = make_cache(12, 3, 6);
    ASSERT_EQ(cache_->seq_new(), 0);
    ASSERT_EQ(cache_->seq_new(), 1);
    ASSERT_TRUE(place(*cache_, Step{}.add(0, 0, 3).add(1, 0, 2)).ok());
    ASSERT_NE(cache_->current_step(), nullptr);
    before_ = snapshot(*cache_);
  }

  void expect_refused(const Step& step, StatusCode code) {
    const Status checked = cache_->check_step(step.seq_ids, step.positions);
    EXPECT_EQ(checked.code(), code) << checked.to_string();
    EXPECT_EQ(snapshot(*cache_), before_);
    auto placed = place(*cache_, step);
    ASSERT_FALSE(placed.ok());
    EXPECT_EQ(placed.status().code(), code) << placed.status().to_string();
    EXPECT_FALSE(placed.status().message().empty());
    EXPECT_EQ(snapshot(*cache_), before_);
  }

  std::unique_ptr<CellCache> cache_;
  testing::Snapshot before_;
};

TEST(CellConfigTest, CreateRejectsBadConfigs) {
  for (const CellCacheConfig& bad :
       {CellCacheConfig{1, 1, 1}, CellCacheConfig{0, 1, 1}, CellCacheConfig{8, 0, 1},
        CellCacheConfig{8, 1, 0}, CellCacheConfig{8, -3, 4}}) {
    EXPECT_EQ(bad.validate().code(), StatusCode::kInvalidArgument);
    auto cache = CellCache::create(bad);
    ASSERT_FALSE(cache.ok());
    EXPECT_EQ(cache.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE((CellCacheConfig{2, 1, 1}).validate().is_ok());
}

TEST_F(CellRefusalTest, AGapIsRefused) {
  expect_refused(Step{}.add(0, 4), StatusCode::kInvalidArgument);
}

TEST_F(CellRefusalTest, APositionTheSequenceHoldsIsRefused) {
  expect_refused(Step{}.add(0, 2), StatusCode::kInvalidArgument);
  expect_refused(Step{}.add(1, 0), StatusCode::kInvalidArgument);
}

TEST_F(CellRefusalTest, ARepeatWithinTheStepIsRefused) {
  expect_refused(Step{}.add(0, 3).add(0, 3), StatusCode::kInvalidArgument);
}

TEST_F(CellRefusalTest, DescendingPositionsAreRefused) {
  expect_refused(Step{}.add(1, 3).add(1, 2), StatusCode::kInvalidArgument);
}

TEST_F(CellRefusalTest, OneBadTokenRefusesTheWholeStep) {
  // Valid tokens for both sequences, then a gap at the end.
  expect_refused(Step{}.add(0, 3).add(1, 2).add(1, 4), StatusCode::kInvalidArgument);
}

TEST_F(CellRefusalTest, DeadOrOutOfRangeSequencesAreRefused) {
  expect_refused(Step{}.add(2, 0), StatusCode::kNotFound);
  expect_refused(Step{}.add(0, 3).add(-1, 0), StatusCode::kInvalidArgument);
  expect_refused(Step{}.add(3, 0), StatusCode::kInvalidArgument);
}

TEST_F(CellRefusalTest, MismatchedOrEmptyStepsAreRefused) {
  const std::vector<SeqId> ids = {0, 0};
  const std::vector<std::int32_t> positions = {3};
  EXPECT_EQ(cache_->check_step(ids, positions).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache_->place_step(ids, positions).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(snapshot(*cache_), before_);
  expect_refused(Step{}, StatusCode::kInvalidArgument);
}

TEST_F(CellRefusalTest, MaxSeqLenIsRefused) {
  // max_seq_len 6: sequence 0 holds 0..2, so positions 3..5 fit and 6 does not.
  expect_refused(Step{}.add(0, 3, 4), StatusCode::kOutOfResources);
  auto fits = place(*cache_, Step{}.add(0, 3, 3));
  ASSERT_TRUE(fits.ok()) << fits.status().to_string();
  EXPECT_EQ(cache_->pos(0), 6);
  before_ = snapshot(*cache_);
  expect_refused(Step{}.add(0, 6), StatusCode::kOutOfResources);
}

TEST_F(CellRefusalTest, CapacityIsRefused) {
  // 11 placeable cells, 5 used: 6 free.
  ASSERT_EQ(cache_->metrics().cells_free, 6);
  ASSERT_EQ(cache_->seq_new(), 2);
  before_ = snapshot(*cache_);
  expect_refused(Step{}.add(0, 3, 3).add(2, 0, 4), StatusCode::kOutOfResources);
  // Exactly filling the pool works and then even one more token is refused.
  ASSERT_TRUE(place(*cache_, Step{}.add(0, 3, 3).add(2, 0, 3)).ok());
  EXPECT_EQ(cache_->metrics().cells_free, 0);
  EXPECT_EQ(cache_->metrics().used_end, 12);
  before_ = snapshot(*cache_);
  expect_refused(Step{}.add(1, 2), StatusCode::kOutOfResources);
}

TEST_F(CellRefusalTest, CheckStepAcceptsWhatPlaceStepPlacesAndChangesNothing) {
  const Step ok = Step{}.add(1, 2).add(0, 3, 2);
  EXPECT_TRUE(cache_->check_step(ok.seq_ids, ok.positions).is_ok());
  EXPECT_TRUE(cache_->check_step(ok.seq_ids, ok.positions).is_ok());  // scratch was reset
  EXPECT_EQ(snapshot(*cache_), before_);
  EXPECT_TRUE(place(*cache_, ok).ok());
}

TEST_F(CellRefusalTest, AFailedCheckDoesNotPoisonTheNext) {
  expect_refused(Step{}.add(0, 3).add(0, 5), StatusCode::kInvalidArgument);
  // The refused step saw sequence 0 once; a later check must start afresh.
  const Step ok = Step{}.add(0, 3);
  EXPECT_TRUE(cache_->check_step(ok.seq_ids, ok.positions).is_ok());
}

TEST_F(CellRefusalTest, SeqNewRefusedWhenEverySlotIsLive) {
  ASSERT_EQ(cache_->seq_new(), 2);
  extend(*cache_, 2, 1);
  before_ = snapshot(*cache_);
  EXPECT_EQ(cache_->seq_new(), std::nullopt);
  EXPECT_EQ(snapshot(*cache_), before_);
  EXPECT_EQ(cache_->seq_clone(0, 1), std::nullopt);
  EXPECT_EQ(snapshot(*cache_), before_);
}

TEST_F(CellRefusalTest, CloneRefusals) {
  EXPECT_EQ(cache_->seq_clone(2, 0), std::nullopt);   // not live
  EXPECT_EQ(cache_->seq_clone(-1, 0), std::nullopt);  // outside the slots
  EXPECT_EQ(cache_->seq_clone(7, 0), std::nullopt);
  EXPECT_EQ(cache_->seq_clone(0, 4), std::nullopt);  // past pos(0) = 3
  EXPECT_EQ(cache_->seq_clone(0, -1), std::nullopt);
  EXPECT_EQ(snapshot(*cache_), before_);
}

TEST_F(CellRefusalTest, RmRefusals) {
  EXPECT_FALSE(cache_->seq_rm(2));
  EXPECT_FALSE(cache_->seq_rm(-1));
  EXPECT_FALSE(cache_->seq_rm(3));
  EXPECT_EQ(snapshot(*cache_), before_);
  ASSERT_TRUE(cache_->seq_rm(1));
  before_ = snapshot(*cache_);
  EXPECT_FALSE(cache_->seq_rm(1));  // twice
  EXPECT_EQ(snapshot(*cache_), before_);
}

TEST_F(CellRefusalTest, RewindRefusals) {
  EXPECT_FALSE(cache_->rewind(0, 4));  // past the end
  EXPECT_FALSE(cache_->rewind(0, -1));
  EXPECT_FALSE(cache_->rewind(2, 0));  // not live
  EXPECT_FALSE(cache_->rewind(-5, 0));
  EXPECT_FALSE(cache_->rewind(9, 0));
  EXPECT_EQ(snapshot(*cache_), before_);
}

TEST_F(CellRefusalTest, OutOfPoolCellsReportZero) {
  EXPECT_EQ(cache_->refcount(-1), 0);
  EXPECT_EQ(cache_->refcount(12), 0);
  EXPECT_EQ(cache_->refcount(kScratchCell), 0);
  EXPECT_TRUE(cache_->cell_table(-1).empty());
  EXPECT_TRUE(cache_->cell_table(3).empty());
  EXPECT_EQ(cache_->pos(-1), 0);
  EXPECT_FALSE(cache_->is_live(3));
}

TEST_F(CellRefusalTest, RefusalMessagesNameTheSequenceAndPosition) {
  const Step gap = Step{}.add(1, 5);
  const Status status = cache_->check_step(gap.seq_ids, gap.positions);
  const std::string message(status.message());
  EXPECT_NE(message.find("sequence 1"), std::string::npos) << message;
  EXPECT_NE(message.find("position 5"), std::string::npos) << message;
  EXPECT_NE(message.find("expected position 2"), std::string::npos) << message;
}

}  // namespace
}  // namespace cellm::cache
