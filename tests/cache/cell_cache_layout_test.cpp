// Cell layout scenarios (batching_spec §6.11 Cell* and §3.4) restated for
// refcounted cells and per-sequence cell tables. Expected cells follow from
// the lowest-free rule by hand.
#include <gtest/gtest.h>

#include <set>
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
using testing::table_of;
using Cells = std::vector<CellId>;

TEST(CellLayoutTest, FreshCacheIsEmpty) {
  auto cache = make_cache(8, 4, 16);
  const auto m = cache->metrics();
  EXPECT_EQ(m.cells_used, 0);
  EXPECT_EQ(m.cells_free, 7);  // the scratch cell is never free
  EXPECT_EQ(m.used_end, 0);
  EXPECT_EQ(m.capacity, 8);
  EXPECT_EQ(m.sequences, 0);
  EXPECT_EQ(m.high_water, 0);
  EXPECT_EQ(m.placements, 0u);
  EXPECT_EQ(cache->current_step(), nullptr);
  for (SeqId s = 0; s < 4; ++s) {
    EXPECT_FALSE(cache->is_live(s));
    EXPECT_EQ(cache->pos(s), 0);
    EXPECT_TRUE(cache->cell_table(s).empty());
  }
}

TEST(CellLayoutTest, SingleSequenceTableHoldsItsPrefixAndSkipsScratch) {
  auto cache = make_cache(8, 2, 16);
  const SeqId a = *cache->seq_new();
  EXPECT_EQ(a, 0);
  EXPECT_TRUE(cache->is_live(a));
  EXPECT_EQ(cache->pos(a), 0);
  auto placed = place(*cache, Step{}.add(a, 0, 4));
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  EXPECT_EQ(placed->cells, (Cells{1, 2, 3, 4}));
  EXPECT_EQ(placed->seq_ids, (std::vector<SeqId>{a, a, a, a}));
  EXPECT_EQ(placed->positions, (std::vector<std::int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(table_of(*cache, a), (Cells{1, 2, 3, 4}));
  EXPECT_EQ(cache->pos(a), 4);
  EXPECT_EQ(cache->refcount(kScratchCell), 0);
  for (CellId c = 1; c <= 4; ++c) EXPECT_EQ(cache->refcount(c), 1);
  EXPECT_EQ(cache->attend_range(a, 2, 0), (PositionRange{0, 3}));
  EXPECT_EQ(
      std::vector<CellId>(cache->attend_cells(a, 2, 0).begin(), cache->attend_cells(a, 2, 0).end()),
      (Cells{1, 2, 3}));
  const auto m = cache->metrics();
  EXPECT_EQ(m.cells_used, 4);
  EXPECT_EQ(m.cells_free, 3);
  EXPECT_EQ(m.used_end, 5);
  EXPECT_EQ(m.high_water, 5);
  EXPECT_EQ(m.placements, 4u);
  EXPECT_EQ(m.sequences, 1);
}

TEST(CellLayoutTest, SequencesAtTheSamePositionsNeverShareCells) {
  auto cache = make_cache(16, 4, 16);
  const SeqId a = *cache->seq_new();
  const SeqId b = *cache->seq_new();
  EXPECT_EQ(b, 1);
  // A batched prefill: both at positions 0..2, interleaved on the token axis.
  auto placed = place(*cache, Step{}.add(a, 0).add(b, 0).add(a, 1).add(b, 1).add(a, 2).add(b, 2));
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  EXPECT_EQ(placed->cells, (Cells{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(table_of(*cache, a), (Cells{1, 3, 5}));
  EXPECT_EQ(table_of(*cache, b), (Cells{2, 4, 6}));
  for (CellId c = 1; c <= 6; ++c) EXPECT_EQ(cache->refcount(c), 1);
  // Each query sees only its own sequence's cells.
  const auto seen_a = cache->attend_cells(a, 2, 0);
  const auto seen_b = cache->attend_cells(b, 2, 0);
  std::set<CellId> overlap(seen_a.begin(), seen_a.end());
  for (CellId c : seen_b) EXPECT_EQ(overlap.count(c), 0u) << c;
}

TEST(CellLayoutTest, DecodeAndPrefillShareOneStep) {
  auto cache = make_cache(16, 4, 16);
  const SeqId a = *cache->seq_new();
  const SeqId b = *cache->seq_new();
  extend(*cache, a, 3);  // cells 1..3
  auto placed = place(*cache, Step{}.add(a, 3).add(b, 0, 3));
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  EXPECT_EQ(placed->seq_ids, (std::vector<SeqId>{a, b, b, b}));
  EXPECT_EQ(placed->positions, (std::vector<std::int32_t>{3, 0, 1, 2}));
  EXPECT_EQ(placed->cells, (Cells{4, 5, 6, 7}));
  EXPECT_EQ(table_of(*cache, a), (Cells{1, 2, 3, 4}));
  EXPECT_EQ(table_of(*cache, b), (Cells{5, 6, 7}));
  EXPECT_EQ(cache->pos(a), 4);
  EXPECT_EQ(cache->pos(b), 3);
  EXPECT_EQ(cache->metrics().placements, 7u);
}

TEST(CellLayoutTest, OnePlacementServesEveryLayerUntilTheNextVerb) {
  auto cache = make_cache(16, 2, 16);
  const SeqId a = *cache->seq_new();
  auto placed = place(*cache, Step{}.add(a, 0, 3));
  ASSERT_TRUE(placed.ok());
  // Layers with different windows read the same step; only the range differs.
  const StepPlacement* first = cache->current_step();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(*first, *placed);
  EXPECT_EQ(cache->attend_range(a, 2, 0), (PositionRange{0, 3}));
  EXPECT_EQ(cache->attend_range(a, 2, 2), (PositionRange{1, 3}));
  EXPECT_EQ(cache->current_step(), first);
  EXPECT_EQ(*cache->current_step(), *placed);
}

TEST(CellLayoutTest, ForkSharesCellsAndRefcountsThem) {
  auto cache = make_cache(16, 4, 16);
  const SeqId src = *cache->seq_new();
  extend(*cache, src, 3);  // 1, 2, 3
  const auto fork = cache->seq_clone(src, 3);
  ASSERT_TRUE(fork.has_value());
  EXPECT_EQ(*fork, 1);
  EXPECT_EQ(table_of(*cache, *fork), (Cells{1, 2, 3}));
  EXPECT_EQ(cache->pos(*fork), 3);
  for (CellId c = 1; c <= 3; ++c) EXPECT_EQ(cache->refcount(c), 2);
  // Sharing allocates nothing.
  EXPECT_EQ(cache->metrics().cells_used, 3);
  EXPECT_EQ(cache->metrics().placements, 3u);
  // Later writes of either branch are private.
  EXPECT_EQ(extend(*cache, src, 1), (Cells{4}));
  EXPECT_EQ(extend(*cache, *fork, 1), (Cells{5}));
  EXPECT_EQ(cache->refcount(4), 1);
  EXPECT_EQ(cache->refcount(5), 1);
  // Removing the source keeps the shared cells alive for the fork.
  ASSERT_TRUE(cache->seq_rm(src));
  EXPECT_EQ(table_of(*cache, *fork), (Cells{1, 2, 3, 5}));
  for (CellId c = 1; c <= 3; ++c) EXPECT_EQ(cache->refcount(c), 1);
  EXPECT_EQ(cache->refcount(4), 0);
  EXPECT_EQ(cache->metrics().cells_used, 4);
  ASSERT_TRUE(cache->seq_rm(*fork));
  EXPECT_EQ(cache->metrics().cells_used, 0);
  EXPECT_EQ(cache->metrics().cells_free, 15);
  EXPECT_EQ(cache->metrics().used_end, 0);
  for (CellId c = 0; c < 16; ++c) EXPECT_EQ(cache->refcount(c), 0);
}

TEST(CellLayoutTest, ForkCanShareAPrefixOnly) {
  auto cache = make_cache(16, 4, 16);
  const SeqId src = *cache->seq_new();
  extend(*cache, src, 4);  // 1..4
  const auto fork = cache->seq_clone(src, 2);
  ASSERT_TRUE(fork.has_value());
  EXPECT_EQ(table_of(*cache, *fork), (Cells{1, 2}));
  EXPECT_EQ(cache->pos(*fork), 2);
  EXPECT_EQ(cache->refcount(1), 2);
  EXPECT_EQ(cache->refcount(2), 2);
  EXPECT_EQ(cache->refcount(3), 1);
  EXPECT_EQ(cache->refcount(4), 1);
  // The fork continues at its own position 2 into a new cell.
  auto placed = place(*cache, Step{}.add(*fork, 2));
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  EXPECT_EQ(placed->cells, (Cells{5}));
  // An empty clone is a new empty sequence.
  const auto empty = cache->seq_clone(src, 0);
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(cache->pos(*empty), 0);
  EXPECT_TRUE(cache->cell_table(*empty).empty());
}

TEST(CellLayoutTest, SeqIdsAreHandedOutLowestFirstAndReusedAfterRemoval) {
  auto cache = make_cache(8, 3, 4);
  EXPECT_EQ(cache->seq_new(), 0);
  EXPECT_EQ(cache->seq_new(), 1);
  EXPECT_EQ(cache->seq_new(), 2);
  EXPECT_EQ(cache->seq_new(), std::nullopt);
  EXPECT_EQ(cache->metrics().sequences, 3);
  ASSERT_TRUE(cache->seq_rm(1));
  EXPECT_FALSE(cache->is_live(1));
  ASSERT_TRUE(cache->seq_rm(0));
  EXPECT_EQ(cache->metrics().sequences, 1);
  EXPECT_EQ(cache->seq_new(), 0);
  EXPECT_EQ(cache->seq_clone(2, 0), 1);  // clones take the lowest free id too
  EXPECT_EQ(cache->seq_new(), std::nullopt);
  // A reused id starts empty.
  EXPECT_EQ(cache->pos(0), 0);
}

TEST(CellLayoutTest, RewindFreesOnlyTheDroppedPositions) {
  auto cache = make_cache(16, 2, 16);
  const SeqId a = *cache->seq_new();
  extend(*cache, a, 5);  // 1..5
  ASSERT_TRUE(cache->rewind(a, 2));
  EXPECT_EQ(cache->pos(a), 2);
  EXPECT_EQ(table_of(*cache, a), (Cells{1, 2}));
  EXPECT_EQ(cache->refcount(1), 1);
  EXPECT_EQ(cache->refcount(2), 1);
  for (CellId c = 3; c <= 5; ++c) EXPECT_EQ(cache->refcount(c), 0);
  const auto m = cache->metrics();
  EXPECT_EQ(m.cells_used, 2);
  EXPECT_EQ(m.used_end, 3);
  EXPECT_EQ(m.high_water, 6);  // the extent once reached stays recorded
  // Rewinding to the current length is a successful no-op; to 0 empties it.
  EXPECT_TRUE(cache->rewind(a, 2));
  EXPECT_EQ(cache->pos(a), 2);
  EXPECT_TRUE(cache->rewind(a, 0));
  EXPECT_EQ(cache->pos(a), 0);
  EXPECT_TRUE(cache->is_live(a));
  EXPECT_EQ(cache->metrics().cells_used, 0);
}

TEST(CellLayoutTest, RewindingACloneKeepsTheSourcesCells) {
  auto cache = make_cache(16, 2, 16);
  const SeqId src = *cache->seq_new();
  extend(*cache, src, 4);  // 1..4
  const SeqId fork = *cache->seq_clone(src, 4);
  ASSERT_TRUE(cache->rewind(fork, 1));
  EXPECT_EQ(table_of(*cache, src), (Cells{1, 2, 3, 4}));
  EXPECT_EQ(table_of(*cache, fork), (Cells{1}));
  EXPECT_EQ(cache->refcount(1), 2);
  for (CellId c = 2; c <= 4; ++c) EXPECT_EQ(cache->refcount(c), 1);
  EXPECT_EQ(cache->metrics().cells_used, 4);
  // The fork's rewritten positions take fresh cells, never the source's.
  EXPECT_EQ(extend(*cache, fork, 2), (Cells{5, 6}));
  EXPECT_EQ(table_of(*cache, src), (Cells{1, 2, 3, 4}));
}

TEST(CellLayoutTest, HolesRefillLowestFirstAndTablesStayInPositionOrder) {
  auto cache = make_cache(16, 3, 16);
  const SeqId a = *cache->seq_new();
  const SeqId b = *cache->seq_new();
  const SeqId c = *cache->seq_new();
  extend(*cache, a, 2);  // 1, 2
  extend(*cache, b, 3);  // 3, 4, 5
  extend(*cache, c, 2);  // 6, 7
  ASSERT_TRUE(cache->seq_rm(b));
  ASSERT_TRUE(cache->rewind(a, 1));         // frees 2
  EXPECT_EQ(cache->metrics().used_end, 8);  // cell 7 still in use
  // Freed holes fill before the extent grows: a@1 -> 2, c@2 -> 3, c@3 -> 4.
  auto placed = place(*cache, Step{}.add(a, 1).add(c, 2, 2));
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  EXPECT_EQ(placed->cells, (Cells{2, 3, 4}));
  EXPECT_EQ(table_of(*cache, c), (Cells{6, 7, 3, 4}));  // positions, not cell order
  EXPECT_EQ(cache->attend_range(c, 3, 3), (PositionRange{1, 4}));
  EXPECT_EQ(
      std::vector<CellId>(cache->attend_cells(c, 3, 3).begin(), cache->attend_cells(c, 3, 3).end()),
      (Cells{7, 3, 4}));
  EXPECT_EQ(cache->metrics().used_end, 8);
  // Only now does the extent grow.
  EXPECT_EQ(extend(*cache, a, 3), (Cells{5, 8, 9}));
  EXPECT_EQ(cache->metrics().used_end, 10);
}

TEST(CellLayoutTest, UsedEndShrinksWhenTheTopCellsAreFreed) {
  auto cache = make_cache(16, 2, 16);
  const SeqId a = *cache->seq_new();
  const SeqId b = *cache->seq_new();
  extend(*cache, a, 2);  // 1, 2
  extend(*cache, b, 3);  // 3, 4, 5
  EXPECT_EQ(cache->metrics().used_end, 6);
  ASSERT_TRUE(cache->seq_rm(b));
  EXPECT_EQ(cache->metrics().used_end, 3);
  EXPECT_EQ(cache->metrics().high_water, 6);
}

TEST(CellLayoutTest, WindowBoundsEachQueryByPosition) {
  auto cache = make_cache(32, 2, 32);
  const SeqId a = *cache->seq_new();
  extend(*cache, a, 10);
  for (std::int32_t p = 0; p < 10; ++p) {
    EXPECT_EQ(cache->attend_range(a, p, 0), (PositionRange{0, p + 1})) << p;
    EXPECT_EQ(cache->attend_range(a, p, 1), (PositionRange{p, p + 1})) << p;
    const std::int32_t begin4 = p >= 3 ? p - 3 : 0;
    EXPECT_EQ(cache->attend_range(a, p, 4), (PositionRange{begin4, p + 1})) << p;
    EXPECT_EQ(cache->attend_cells(a, p, 4).size(), static_cast<std::size_t>(p + 1 - begin4));
    EXPECT_EQ(cache->attend_range(a, p, 100), (PositionRange{0, p + 1})) << p;
  }
}

TEST(CellLayoutTest, AttendRangeRefusesWhatTheSequenceDoesNotHold) {
  auto cache = make_cache(8, 2, 8);
  const SeqId a = *cache->seq_new();
  extend(*cache, a, 3);
  EXPECT_EQ(cache->attend_range(a, 3, 0), std::nullopt);  // not placed yet
  EXPECT_EQ(cache->attend_range(a, -1, 0), std::nullopt);
  EXPECT_EQ(cache->attend_range(a, 1, -2), std::nullopt);  // negative window
  EXPECT_EQ(cache->attend_range(1, 0, 0), std::nullopt);   // not live
  EXPECT_EQ(cache->attend_range(99, 0, 0), std::nullopt);  // outside the slots
  EXPECT_TRUE(cache->attend_cells(a, 3, 0).empty());
}

TEST(CellLayoutTest, WindowsNeverEvictSoOldClonesAndRewindsStillWork) {
  auto cache = make_cache(32, 2, 32);
  const SeqId a = *cache->seq_new();
  extend(*cache, a, 12);
  // A window of 4 narrows what a query attends but every cell stays owned.
  EXPECT_EQ(cache->attend_range(a, 11, 4), (PositionRange{8, 12}));
  EXPECT_EQ(cache->metrics().cells_used, 12);
  const auto fork = cache->seq_clone(a, 2);
  ASSERT_TRUE(fork.has_value());
  EXPECT_EQ(cache->attend_range(*fork, 1, 4), (PositionRange{0, 2}));
  EXPECT_TRUE(cache->rewind(a, 1));
  EXPECT_EQ(table_of(*cache, a), (Cells{1}));
}

TEST(CellLayoutTest, CloneSurvivesSourceAppendAndBranchWrites) {
  // §6.12: the clone's view (shared prefix + its own tokens) is unaffected by
  // what the source writes after the fork, on flat and windowed layers alike.
  auto cache = make_cache(32, 2, 32);
  const SeqId src = *cache->seq_new();
  extend(*cache, src, 5);  // 1..5
  const SeqId fork = *cache->seq_clone(src, 3);
  EXPECT_EQ(extend(*cache, src, 2), (Cells{6, 7}));
  EXPECT_EQ(extend(*cache, fork, 3), (Cells{8, 9, 10}));
  const auto flat = cache->attend_cells(fork, 5, 0);
  EXPECT_EQ(Cells(flat.begin(), flat.end()), (Cells{1, 2, 3, 8, 9, 10}));
  const auto windowed = cache->attend_cells(fork, 5, 4);
  EXPECT_EQ(Cells(windowed.begin(), windowed.end()), (Cells{3, 8, 9, 10}));
  const auto source = cache->attend_cells(src, 6, 0);
  EXPECT_EQ(Cells(source.begin(), source.end()), (Cells{1, 2, 3, 4, 5, 6, 7}));
}

TEST(CellLayoutTest, SourceIdReuseDoesNotChangeTheClone) {
  auto cache = make_cache(16, 2, 16);
  const SeqId src = *cache->seq_new();
  extend(*cache, src, 3);  // 1..3
  const SeqId fork = *cache->seq_clone(src, 3);
  ASSERT_TRUE(cache->seq_rm(src));
  const SeqId reused = *cache->seq_new();
  EXPECT_EQ(reused, src);
  EXPECT_EQ(cache->pos(reused), 0);
  EXPECT_EQ(extend(*cache, reused, 2), (Cells{4, 5}));
  EXPECT_EQ(table_of(*cache, fork), (Cells{1, 2, 3}));
  for (CellId c = 1; c <= 3; ++c) EXPECT_EQ(cache->refcount(c), 1);
}

TEST(CellLayoutTest, ClearReturnsEveryCellAndSequence) {
  auto cache = make_cache(16, 3, 16);
  const SeqId a = *cache->seq_new();
  extend(*cache, a, 4);
  const SeqId fork = *cache->seq_clone(a, 3);
  extend(*cache, fork, 2);
  cache->clear();
  const auto m = cache->metrics();
  EXPECT_EQ(m.cells_used, 0);
  EXPECT_EQ(m.cells_free, 15);
  EXPECT_EQ(m.used_end, 0);
  EXPECT_EQ(m.sequences, 0);
  EXPECT_EQ(m.high_water, 7);  // lifetime counters survive clear
  EXPECT_EQ(m.placements, 6u);
  EXPECT_EQ(cache->current_step(), nullptr);
  for (SeqId s = 0; s < 3; ++s) EXPECT_FALSE(cache->is_live(s));
  for (CellId c = 0; c < 16; ++c) EXPECT_EQ(cache->refcount(c), 0);
  // Everything is usable again from the bottom.
  EXPECT_EQ(cache->seq_new(), 0);
  EXPECT_EQ(extend(*cache, 0, 2), (Cells{1, 2}));
}

TEST(CellLayoutTest, CurrentStepIsClearedByEveryOtherSuccessfulVerb) {
  auto cache = make_cache(32, 4, 32);
  const SeqId a = *cache->seq_new();
  extend(*cache, a, 3);
  auto replace = [&]() {
    extend(*cache, a, 1);
    ASSERT_NE(cache->current_step(), nullptr);
  };
  replace();
  ASSERT_TRUE(cache->seq_new().has_value());
  EXPECT_EQ(cache->current_step(), nullptr);
  replace();
  ASSERT_TRUE(cache->seq_clone(a, 1).has_value());
  EXPECT_EQ(cache->current_step(), nullptr);
  replace();
  ASSERT_TRUE(cache->seq_rm(1));
  EXPECT_EQ(cache->current_step(), nullptr);
  replace();
  ASSERT_TRUE(cache->rewind(a, cache->pos(a)));  // even a no-op rewind
  EXPECT_EQ(cache->current_step(), nullptr);
  replace();
  cache->clear();
  EXPECT_EQ(cache->current_step(), nullptr);
}

TEST(CellLayoutTest, EachPlacementReplacesTheCurrentStep) {
  auto cache = make_cache(16, 2, 16);
  const SeqId a = *cache->seq_new();
  extend(*cache, a, 2);
  auto second = place(*cache, Step{}.add(a, 2));
  ASSERT_TRUE(second.ok());
  ASSERT_NE(cache->current_step(), nullptr);
  EXPECT_EQ(cache->current_step()->cells, (Cells{3}));
  EXPECT_EQ(cache->current_step()->positions, (std::vector<std::int32_t>{2}));
}

TEST(CellLayoutTest, AtLeast256SequencesDecodeInOneStep) {
  constexpr std::int32_t kSeqs = 300;
  auto cache = make_cache(kSeqs * 4 + 1, kSeqs, 4);
  Step prefill;
  for (SeqId s = 0; s < kSeqs; ++s) {
    ASSERT_EQ(cache->seq_new(), s);
    prefill.add(s, 0, 3);
  }
  ASSERT_TRUE(place(*cache, prefill).ok());
  Step decode;
  for (SeqId s = kSeqs; s-- > 0;) decode.add(s, 3);  // any order across sequences
  auto placed = place(*cache, decode);
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  EXPECT_EQ(cache->metrics().cells_free, 0);
  EXPECT_EQ(cache->metrics().used_end, kSeqs * 4 + 1);
  for (SeqId s = 0; s < kSeqs; ++s) {
    EXPECT_EQ(cache->pos(s), 4);
    // Prefill gave s cells 3s+1..3s+3; the reversed decode gave the last
    // sequence the first free cell.
    EXPECT_EQ(table_of(*cache, s),
              (Cells{3 * s + 1, 3 * s + 2, 3 * s + 3, 3 * kSeqs + (kSeqs - s)}));
  }
}

}  // namespace
}  // namespace cellm::cache

namespace cellm::cache {
namespace {

TEST(CellCacheEpochTest, NewAndClonedSequencesBumpTheirSlotsEpoch) {
  auto cache = CellCache::create({/*max_cells=*/16, /*max_sequences=*/2, /*max_seq_len=*/8});
  ASSERT_TRUE(cache.ok());
  CellCache& c = **cache;
  const SeqId a = *c.seq_new();
  const std::uint64_t e0 = c.seq_epoch(a);
  const std::int32_t pos[] = {0, 1};
  const SeqId ids[] = {a, a};
  ASSERT_TRUE(c.place_step(ids, pos).ok());
  EXPECT_EQ(c.seq_epoch(a), e0) << "placing extends the row; no reload needed";
  ASSERT_TRUE(c.rewind(a, 1));
  EXPECT_EQ(c.seq_epoch(a), e0) << "a rewind keeps the entries below it";
  const SeqId b = *c.seq_clone(a, 1);
  const std::uint64_t eb = c.seq_epoch(b);
  ASSERT_TRUE(c.seq_rm(b));
  const SeqId b2 = *c.seq_new();
  EXPECT_EQ(b2, b);
  EXPECT_NE(c.seq_epoch(b2), eb) << "a reused slot holds a different sequence";
  EXPECT_EQ(c.seq_epoch(-1), 0u);
}

}  // namespace
}  // namespace cellm::cache
