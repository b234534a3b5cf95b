// Randomized check of the CellCache against an independent reference model:
// thousands of valid and invalid verbs, comparing the full state after each,
// plus structural invariants (refcounts = occurrences, cells shared only
// along clone lineage and at the same position).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cache/cache_test_util.h"
#include "cache/cell_cache.h"

namespace cellm::cache {
namespace {

using testing::Step;

// The reference: plain containers, lowest-free by std::set order. Every live
// sequence has an incarnation id that is never reused, and each cell records
// the incarnation that placed it, so sharing can be traced to clones.
class RefCache {
 public:
  RefCache(std::int32_t max_cells, std::int32_t max_seqs, std::int32_t max_len)
      : max_cells_(max_cells), max_len_(max_len), tables_(max_seqs), inc_(max_seqs, -1) {
    reset();
  }

  void reset() {
    for (auto& t : tables_) t.reset();
    rc_.clear();
    free_.clear();
    for (CellId c = 1; c < max_cells_; ++c) free_.insert(c);
    step_.reset();
  }

  bool live(SeqId s) const {
    return s >= 0 && s < static_cast<SeqId>(tables_.size()) && tables_[s].has_value();
  }
  std::int32_t len(SeqId s) const {
    return live(s) ? static_cast<std::int32_t>(tables_[s]->size()) : 0;
  }
  std::optional<SeqId> lowest_free_slot() const {
    for (SeqId s = 0; s < static_cast<SeqId>(tables_.size()); ++s) {
      if (!tables_[s]) return s;
    }
    return std::nullopt;
  }

  std::optional<SeqId> seq_new() {
    const auto slot = lowest_free_slot();
    if (!slot) return std::nullopt;
    tables_[*slot].emplace();
    inc_[*slot] = next_inc_;
    parent_[next_inc_] = -1;
    ++next_inc_;
    step_.reset();
    return slot;
  }

  std::optional<SeqId> seq_clone(SeqId src, std::int32_t upto) {
    if (!live(src) || upto < 0 || upto > len(src)) return std::nullopt;
    const auto slot = lowest_free_slot();
    if (!slot) return std::nullopt;
    tables_[*slot].emplace(tables_[src]->begin(), tables_[src]->begin() + upto);
    for (CellId c : *tables_[*slot]) ++rc_[c];
    inc_[*slot] = next_inc_;
    parent_[next_inc_] = inc_[src];
    ++next_inc_;
    step_.reset();
    return slot;
  }

  void drop(SeqId s, std::int32_t from) {
    auto& t = *tables_[s];
    for (std::size_t p = static_cast<std::size_t>(from); p < t.size(); ++p) {
      if (--rc_[t[p]] == 0) {
        rc_.erase(t[p]);
        free_.insert(t[p]);
      }
    }
    t.resize(static_cast<std::size_t>(from));
  }

  bool seq_rm(SeqId s) {
    if (!live(s)) return false;
    drop(s, 0);
    tables_[s].reset();
    step_.reset();
    return true;
  }

  bool rewind(SeqId s, std::int32_t p) {
    if (!live(s) || p < 0 || p > len(s)) return false;
    drop(s, p);
    step_.reset();
    return true;
  }

  // The code place_step must answer: the first bad token decides, then room.
  StatusCode judge(const Step& step) const {
    if (step.seq_ids.empty()) return StatusCode::kInvalidArgument;
    std::map<SeqId, std::int32_t> next;
    for (std::size_t i = 0; i < step.seq_ids.size(); ++i) {
      const SeqId s = step.seq_ids[i];
      if (s < 0 || s >= static_cast<SeqId>(tables_.size())) return StatusCode::kInvalidArgument;
      if (!live(s)) return StatusCode::kNotFound;
      auto it = next.try_emplace(s, len(s)).first;
      if (step.positions[i] != it->second) return StatusCode::kInvalidArgument;
      if (step.positions[i] >= max_len_) return StatusCode::kOutOfResources;
      ++it->second;
    }
    if (step.seq_ids.size() > free_.size()) return StatusCode::kOutOfResources;
    return StatusCode::kOk;
  }

  StepPlacement place(const Step& step) {
    StepPlacement out{step.seq_ids, step.positions, {}};
    for (SeqId s : step.seq_ids) {
      const CellId c = *free_.begin();
      free_.erase(free_.begin());
      rc_[c] = 1;
      placer_[c] = inc_[s];
      tables_[s]->push_back(c);
      out.cells.push_back(c);
    }
    placements_ += step.seq_ids.size();
    high_water_ = std::max(high_water_, used_end());
    step_ = out;
    return out;
  }

  std::int32_t used_end() const { return rc_.empty() ? 0 : rc_.rbegin()->first + 1; }

  bool descends(std::int64_t inc, std::int64_t ancestor) const {
    for (; inc >= 0; inc = parent_.at(inc)) {
      if (inc == ancestor) return true;
    }
    return false;
  }

  testing::Snapshot expected() const {
    testing::Snapshot s;
    for (SeqId q = 0; q < static_cast<SeqId>(tables_.size()); ++q) {
      s.live.push_back(live(q));
      s.pos.push_back(len(q));
      s.tables.push_back(live(q) ? *tables_[q] : std::vector<CellId>{});
    }
    for (CellId c = 0; c < max_cells_; ++c) {
      auto it = rc_.find(c);
      s.refcounts.push_back(it == rc_.end() ? 0 : it->second);
    }
    s.metrics.cells_used = static_cast<std::int32_t>(rc_.size());
    s.metrics.cells_free = static_cast<std::int32_t>(free_.size());
    s.metrics.used_end = used_end();
    s.metrics.capacity = max_cells_;
    s.metrics.sequences = 0;
    for (SeqId q = 0; q < static_cast<SeqId>(tables_.size()); ++q) s.metrics.sequences += live(q);
    s.metrics.high_water = high_water_;
    s.metrics.placements = placements_;
    s.step = step_;
    return s;
  }

  std::int32_t max_len() const { return max_len_; }
  std::int32_t max_seqs() const { return static_cast<std::int32_t>(tables_.size()); }
  std::int64_t incarnation(SeqId s) const { return inc_[s]; }
  std::int64_t placer(CellId c) const { return placer_.at(c); }

 private:
  std::int32_t max_cells_;
  std::int32_t max_len_;
  std::vector<std::optional<std::vector<CellId>>> tables_;
  std::vector<std::int64_t> inc_;                // incarnation of each slot
  std::map<std::int64_t, std::int64_t> parent_;  // incarnation -> cloned-from (-1 = new)
  std::map<CellId, std::int64_t> placer_;        // cell -> incarnation that placed it
  std::int64_t next_inc_ = 0;
  std::map<CellId, std::int32_t> rc_;  // owned cells only
  std::set<CellId> free_;
  std::uint64_t placements_ = 0;
  std::int32_t high_water_ = 0;
  std::optional<StepPlacement> step_;
};

// Invariants read from the cache alone, cross-checked with the lineage the
// reference recorded.
void check_structure(const CellCache& cache, const RefCache& ref) {
  const auto& config = cache.config();
  std::map<CellId, std::int32_t> occurrences;
  std::map<CellId, std::int32_t> position_of;
  for (SeqId s = 0; s < config.max_sequences; ++s) {
    const auto table = cache.cell_table(s);
    ASSERT_LE(static_cast<std::int32_t>(table.size()), config.max_seq_len);
    for (std::size_t p = 0; p < table.size(); ++p) {
      const CellId c = table[p];
      ASSERT_GT(c, kScratchCell) << "sequence " << s << " holds the scratch cell";
      ASSERT_LT(c, config.max_cells);
      ++occurrences[c];
      auto [it, first] = position_of.try_emplace(c, static_cast<std::int32_t>(p));
      ASSERT_EQ(it->second, static_cast<std::int32_t>(p))
          << "cell " << c << " shared at two positions";
      ASSERT_TRUE(ref.descends(ref.incarnation(s), ref.placer(c)))
          << "sequence " << s << " shares cell " << c << " without a clone";
    }
  }
  std::int32_t used = 0;
  for (CellId c = 0; c < config.max_cells; ++c) {
    const auto it = occurrences.find(c);
    ASSERT_EQ(cache.refcount(c), it == occurrences.end() ? 0 : it->second) << "cell " << c;
    used += cache.refcount(c) > 0;
  }
  const auto m = cache.metrics();
  ASSERT_EQ(m.cells_used, used);
  ASSERT_EQ(m.cells_used + m.cells_free, config.max_cells - 1);
}

Step random_step(std::mt19937& rng, const RefCache& ref) {
  std::uniform_int_distribution<int> percent(0, 99);
  Step step;
  std::map<SeqId, std::int32_t> next;
  std::vector<SeqId> live;
  for (SeqId s = 0; s < ref.max_seqs(); ++s) {
    if (ref.live(s)) live.push_back(s);
  }
  const int tokens = std::uniform_int_distribution<int>(0, 8)(rng);
  for (int i = 0; i < tokens; ++i) {
    // Mostly live sequences; sometimes any slot or an out-of-range id.
    SeqId s = std::uniform_int_distribution<SeqId>(0, ref.max_seqs() - 1)(rng);
    if (!live.empty() && percent(rng) < 90) {
      s = live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng)];
    }
    if (percent(rng) < 2) s = percent(rng) < 50 ? -1 : ref.max_seqs();
    auto it = next.try_emplace(s, ref.len(s)).first;
    std::int32_t position = it->second;
    const int fault = percent(rng);
    if (fault < 2) {
      position += 1;  // gap
    } else if (fault < 4) {
      position -= 1;  // repeat or held
    } else if (fault < 5) {
      position = -position - 1;
    }
    step.seq_ids.push_back(s);
    step.positions.push_back(position);
    ++it->second;
  }
  return step;
}

void run_random_ops(std::uint32_t seed, std::int32_t max_cells, std::int32_t max_seqs,
                    std::int32_t max_len, int ops) {
  auto cache = testing::make_cache(max_cells, max_seqs, max_len);
  RefCache ref(max_cells, max_seqs, max_len);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> percent(0, 99);
  auto any_seq = [&]() { return std::uniform_int_distribution<SeqId>(-1, max_seqs)(rng); };
  int refusals = 0;
  int placed = 0;
  std::set<StatusCode> refusal_codes;
  for (int op = 0; op < ops; ++op) {
    const int kind = percent(rng);
    std::string what;
    if (kind < 12) {
      what = "seq_new";
      ASSERT_EQ(cache->seq_new(), ref.seq_new()) << what;
    } else if (kind < 24) {
      const SeqId src = any_seq();
      const std::int32_t upto =
          std::uniform_int_distribution<std::int32_t>(-1, ref.len(src) + 1)(rng);
      what = "seq_clone " + std::to_string(src) + " " + std::to_string(upto);
      const auto expected = ref.seq_clone(src, upto);
      refusals += !expected;
      ASSERT_EQ(cache->seq_clone(src, upto), expected) << what;
    } else if (kind < 32) {
      const SeqId s = any_seq();
      what = "seq_rm " + std::to_string(s);
      const bool expected = ref.seq_rm(s);
      refusals += !expected;
      ASSERT_EQ(cache->seq_rm(s), expected) << what;
    } else if (kind < 45) {
      const SeqId s = any_seq();
      const std::int32_t p = std::uniform_int_distribution<std::int32_t>(-1, ref.len(s) + 1)(rng);
      what = "rewind " + std::to_string(s) + " " + std::to_string(p);
      const bool expected = ref.rewind(s, p);
      refusals += !expected;
      ASSERT_EQ(cache->rewind(s, p), expected) << what;
    } else if (kind < 99) {
      const Step step = random_step(rng, ref);
      what = "place_step of " + std::to_string(step.seq_ids.size());
      const StatusCode expected = ref.judge(step);
      ASSERT_EQ(cache->check_step(step.seq_ids, step.positions).code(), expected) << what;
      auto result = testing::place(*cache, step);
      ASSERT_EQ(result.status().code(), expected) << what << ": " << result.status().to_string();
      if (expected == StatusCode::kOk) {
        ASSERT_EQ(*result, ref.place(step)) << what;
        ++placed;
      } else {
        ++refusals;
        refusal_codes.insert(expected);
      }
    } else {
      what = "clear";
      cache->clear();
      ref.reset();
    }
    ASSERT_EQ(testing::snapshot(*cache), ref.expected()) << "after op " << op << ": " << what;
    ASSERT_NO_FATAL_FAILURE(check_structure(*cache, ref)) << "after op " << op << ": " << what;
  }
  // The mix must exercise both paths, or the test proves little.
  EXPECT_GT(refusals, ops / 20);
  EXPECT_GT(placed, ops / 20);
  EXPECT_EQ(refusal_codes,
            (std::set<StatusCode>{StatusCode::kInvalidArgument, StatusCode::kNotFound,
                                  StatusCode::kOutOfResources}));
}

TEST(CellRandomTest, SmallPoolAgreesWithTheReference) {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    run_random_ops(seed, 24, 5, 10, 3000);
  }
}

TEST(CellRandomTest, TightSequenceLimitAgreesWithTheReference) {
  for (std::uint32_t seed : {11u, 12u}) {
    SCOPED_TRACE(seed);
    run_random_ops(seed, 64, 3, 6, 3000);
  }
}

TEST(CellRandomTest, WidePoolAgreesWithTheReference) {
  for (std::uint32_t seed : {21u, 22u}) {
    SCOPED_TRACE(seed);
    run_random_ops(seed, 120, 40, 48, 3000);
  }
}

}  // namespace
}  // namespace cellm::cache
