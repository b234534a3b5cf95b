// Helpers shared by the cache tests: a full copy of a CellCache's observable
// state (to prove that refused calls change nothing) and small step builders.
//
// Thread-safety: test-only; single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cache/cell_cache.h"

namespace cellm::cache::testing {

struct Snapshot {
  std::vector<bool> live;                   // [max_sequences]
  std::vector<std::int32_t> pos;            // [max_sequences]
  std::vector<std::vector<CellId>> tables;  // [max_sequences]
  std::vector<std::int32_t> refcounts;      // [max_cells]
  CellCacheMetrics metrics;
  std::optional<StepPlacement> step;
  friend bool operator==(const Snapshot&, const Snapshot&) = default;
};

inline Snapshot snapshot(const CellCache& cache) {
  Snapshot s;
  const auto& config = cache.config();
  for (SeqId seq = 0; seq < config.max_sequences; ++seq) {
    s.live.push_back(cache.is_live(seq));
    s.pos.push_back(cache.pos(seq));
    const auto table = cache.cell_table(seq);
    s.tables.emplace_back(table.begin(), table.end());
  }
  for (CellId cell = 0; cell < config.max_cells; ++cell)
    s.refcounts.push_back(cache.refcount(cell));
  s.metrics = cache.metrics();
  if (const StepPlacement* step = cache.current_step()) s.step = *step;
  return s;
}

inline std::ostream& operator<<(std::ostream& os, const Snapshot& s) {
  os << "{metrics used=" << s.metrics.cells_used << " free=" << s.metrics.cells_free
     << " used_end=" << s.metrics.used_end << " seqs=" << s.metrics.sequences
     << " placements=" << s.metrics.placements << "; tables";
  for (std::size_t i = 0; i < s.tables.size(); ++i) {
    if (!s.live[i]) continue;
    os << " " << i << ":[";
    for (CellId c : s.tables[i]) os << c << ",";
    os << "]";
  }
  os << "; step=" << (s.step ? "set" : "none") << "}";
  return os;
}

inline std::unique_ptr<CellCache> make_cache(std::int32_t max_cells, std::int32_t max_sequences,
                                             std::int32_t max_seq_len) {
  auto cache = CellCache::create({max_cells, max_sequences, max_seq_len});
  EXPECT_TRUE(cache.ok()) << cache.status().to_string();
  return std::move(cache).value();
}

// The tokens of one step, appended sequence by sequence.
struct Step {
  std::vector<SeqId> seq_ids;
  std::vector<std::int32_t> positions;

  // Positions [first, first + count) of seq.
  Step& add(SeqId seq, std::int32_t first, std::int32_t count = 1) {
    for (std::int32_t i = 0; i < count; ++i) {
      seq_ids.push_back(seq);
      positions.push_back(first + i);
    }
    return *this;
  }
};

inline Result<StepPlacement> place(CellCache& cache, const Step& step) {
  return cache.place_step(step.seq_ids, step.positions);
}

// Places `count` tokens continuing seq, expecting success.
inline std::vector<CellId> extend(CellCache& cache, SeqId seq, std::int32_t count) {
  auto placed = place(cache, Step{}.add(seq, cache.pos(seq), count));
  EXPECT_TRUE(placed.ok()) << placed.status().to_string();
  return placed.ok() ? placed->cells : std::vector<CellId>{};
}

inline std::vector<CellId> table_of(const CellCache& cache, SeqId seq) {
  const auto table = cache.cell_table(seq);
  return {table.begin(), table.end()};
}

}  // namespace cellm::cache::testing
