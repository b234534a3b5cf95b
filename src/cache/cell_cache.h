// CellCache: host-side bookkeeping of the KV pool shared by every sequence.
//
// The pool has `max_cells` cells per layer; a cell holds one token's K and V.
// Cell 0 is a scratch cell: padding rows of static-width forwards write and
// read it, and it is never handed to a sequence. Every other cell has a
// reference count. Each sequence owns an ordered cell table (position ->
// cell) and its length is the table's size. Cells are immutable while owned,
// so clones share them without copying any KV bytes:
//   - place_step gives each new token the lowest free cell and appends it to
//     its sequence's table (positions must continue each sequence exactly);
//   - clone(src, upto) copies the first `upto` table entries and bumps their
//     reference counts;
//   - rewind(seq, pos) drops entries at and after `pos`; a cell returns to the
//     free list when its count reaches zero.
// A query of sequence s at position p on a layer with window w attends
// table[s][max(0, p - w + 1) .. p] (w = 0: the whole prefix); windows never
// evict (rewinds and clones always work).
//
// Every refused call changes nothing. Costs: place_step O(tokens log cells),
// clone O(upto), rewind O(dropped), seq_new O(log sequences).
//
// Thread-safety: not thread-safe; one owner (the engine thread) calls it
// between forwards.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "cellm/status.h"

namespace cellm::cache {

using SeqId = std::int32_t;  // a sequence slot in [0, max_sequences); reused after seq_rm
using CellId = std::int32_t;

inline constexpr CellId kScratchCell = 0;

struct CellCacheConfig {
  std::int32_t max_cells = 0;      // pool size, scratch cell included (>= 2)
  std::int32_t max_sequences = 0;  // live sequences at once (>= 1)
  std::int32_t max_seq_len = 0;    // longest cell table (>= 1): a sequence's position limit
  Status validate() const;
};

struct CellCacheMetrics {
  std::int32_t cells_used = 0;   // cells with a positive reference count
  std::int32_t cells_free = 0;   // cells that can be placed (scratch excluded)
  std::int32_t used_end = 0;     // one past the highest used cell (0 if none): the read extent
  std::int32_t capacity = 0;     // max_cells
  std::int32_t sequences = 0;    // live sequences
  std::int32_t high_water = 0;   // largest used_end ever seen
  std::uint64_t placements = 0;  // tokens placed since creation
  friend bool operator==(const CellCacheMetrics&, const CellCacheMetrics&) = default;
};

// Positions [begin, end) of one sequence that a query attends.
struct PositionRange {
  std::int32_t begin = 0;
  std::int32_t end = 0;
  friend bool operator==(const PositionRange&, const PositionRange&) = default;
};

// One placed step: token i of sequence seq_ids[i] at positions[i] went to
// cells[i]. The program of the forward that follows reads it (padding rows
// beyond cells.size() use the scratch cell).
struct StepPlacement {
  std::vector<SeqId> seq_ids;
  std::vector<std::int32_t> positions;
  std::vector<CellId> cells;
  friend bool operator==(const StepPlacement&, const StepPlacement&) = default;
};

class CellCache {
 public:
  static Result<std::unique_ptr<CellCache>> create(const CellCacheConfig& config);
  ~CellCache();
  CellCache(const CellCache&) = delete;
  CellCache& operator=(const CellCache&) = delete;

  const CellCacheConfig& config() const;

  // A new empty sequence (lowest free slot); nullopt when all slots are live.
  std::optional<SeqId> seq_new();
  // A new sequence sharing src's first `upto` cells (no bytes move); nullopt
  // when src is not live, upto > pos(src), or no slot is free.
  std::optional<SeqId> seq_clone(SeqId src, std::int32_t upto);
  // Releases the sequence and every cell only it held. False if not live.
  bool seq_rm(SeqId seq);
  // Drops positions >= pos. False unless live and 0 <= pos <= pos(seq).
  bool rewind(SeqId seq, std::int32_t pos);
  // One past the sequence's newest position (its length); 0 if not live.
  std::int32_t pos(SeqId seq) const;
  bool is_live(SeqId seq) const;
  // Bumped each time the slot starts a new sequence (seq_new, seq_clone), so a
  // device mirror of the cell tables knows when a row must be reloaded rather
  // than extended. Rewinds keep the epoch: entries below the new length stand.
  std::uint64_t seq_epoch(SeqId seq) const;

  // Checks that a step could be placed: every id live, positions continuing
  // each sequence exactly (per sequence: pos(seq), pos(seq)+1, ... in order),
  // no sequence past max_seq_len, and enough free cells. Changes nothing.
  // Refusals: invalid_argument (empty or mismatched spans, an id outside the
  // slots, a position that does not continue its sequence), not_found (a
  // sequence not live), out_of_resources (past max_seq_len, too few cells).
  // The first bad token decides; the cell count is checked last.
  Status check_step(std::span<const SeqId> seq_ids, std::span<const std::int32_t> positions) const;
  // check_step, then claims the lowest free cell for each token and appends it
  // to its sequence's table. All or nothing.
  Result<StepPlacement> place_step(std::span<const SeqId> seq_ids,
                                   std::span<const std::int32_t> positions);

  // The step placed last, until the next mutating call (seq_new, seq_clone,
  // seq_rm, rewind, place_step, clear) replaces or clears it; null if none.
  const StepPlacement* current_step() const;

  // The sequence's cells by position: table[p] holds position p. Empty if not live.
  std::span<const CellId> cell_table(SeqId seq) const;
  // Reference count of a cell (0 = free); the scratch cell and ids outside
  // the pool report 0.
  std::int32_t refcount(CellId cell) const;

  // The positions a query of `seq` at `position` attends on a layer with
  // `window` (0 = full history): [max(0, position - window + 1), position + 1).
  // nullopt unless seq is live, 0 <= position < pos(seq) and window >= 0.
  std::optional<PositionRange> attend_range(SeqId seq, std::int32_t position,
                                            std::int32_t window) const;
  // The cells of attend_range, in position order; empty when it is nullopt.
  std::span<const CellId> attend_cells(SeqId seq, std::int32_t position, std::int32_t window) const;

  CellCacheMetrics metrics() const;
  // Frees every sequence and cell. Lifetime counters (high_water,
  // placements) keep counting.
  void clear();

 private:
  struct Impl;
  explicit CellCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cellm::cache
