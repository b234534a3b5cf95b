#include "cache/cell_cache.h"

#include <algorithm>
#include <utility>

#include "cache/bit_tree.h"
#include "core/check.h"

namespace cellm::cache {

Status CellCacheConfig::validate() const {
  if (max_cells < 2) {
    return invalid_argument(
        "cell cache max_cells is {}: it needs the scratch cell plus at least one KV cell (>= 2)",
        max_cells);
  }
  if (max_sequences < 1) {
    return invalid_argument("cell cache max_sequences is {}: it must be >= 1", max_sequences);
  }
  if (max_seq_len < 1) {
    return invalid_argument("cell cache max_seq_len is {}: it must be >= 1", max_seq_len);
  }
  return Status::ok();
}

struct CellCache::Impl {
  explicit Impl(const CellCacheConfig& c)
      : config(c),
        refcounts(static_cast<std::size_t>(c.max_cells), 0),
        free_cells(c.max_cells),
        used_cells(c.max_cells),
        free_slots(c.max_sequences),
        tables(static_cast<std::size_t>(c.max_sequences)),
        step_next(static_cast<std::size_t>(c.max_sequences), -1),
        epochs(static_cast<std::size_t>(c.max_sequences), 0) {
    step_seen.reserve(static_cast<std::size_t>(c.max_sequences));
    reset();
  }

  void reset() {
    std::fill(refcounts.begin(), refcounts.end(), 0);
    free_cells.fill(true);
    free_cells.erase(kScratchCell);
    used_cells.fill(false);
    free_slots.fill(true);
    for (auto& table : tables) table.clear();
    cells_used = 0;
    sequences = 0;
    has_step = false;
  }

  bool live(SeqId seq) const {
    return seq >= 0 && seq < config.max_sequences && !free_slots.contains(seq);
  }
  std::vector<CellId>& table(SeqId seq) { return tables[static_cast<std::size_t>(seq)]; }
  const std::vector<CellId>& table(SeqId seq) const {
    return tables[static_cast<std::size_t>(seq)];
  }
  std::int32_t cells_free() const { return config.max_cells - 1 - cells_used; }
  std::int32_t used_end() const {
    const auto top = used_cells.highest();
    return top ? *top + 1 : 0;
  }

  // Takes a sequence slot; the caller checked that one is free.
  SeqId claim_slot() {
    const auto slot = free_slots.pop_lowest();
    CELLM_CHECK(slot.has_value(), "no free sequence slot although one was checked");
    ++sequences;
    has_step = false;
    ++epochs[static_cast<std::size_t>(*slot)];
    return *slot;
  }

  // The lowest free cell, now owned once; the caller checked that one is free.
  CellId claim_cell() {
    const auto cell = free_cells.pop_lowest();
    CELLM_CHECK(cell.has_value(), "no free cell although enough were checked");
    used_cells.insert(*cell);
    refcounts[static_cast<std::size_t>(*cell)] = 1;
    ++cells_used;
    return *cell;
  }

  void retain(CellId cell) {
    std::int32_t& count = refcounts[static_cast<std::size_t>(cell)];
    CELLM_CHECK(count > 0, "retaining cell {} that nobody owns", cell);
    ++count;
  }

  void release(CellId cell) {
    std::int32_t& count = refcounts[static_cast<std::size_t>(cell)];
    CELLM_CHECK(count > 0, "releasing cell {} that nobody owns", cell);
    if (--count > 0) return;
    used_cells.erase(cell);
    free_cells.insert(cell);
    --cells_used;
  }

  // Drops table entries [pos, end) of a live sequence.
  void truncate(SeqId seq, std::int32_t pos) {
    auto& cells = table(seq);
    for (auto p = static_cast<std::size_t>(pos); p < cells.size(); ++p) release(cells[p]);
    cells.resize(static_cast<std::size_t>(pos));
  }

  Status check_tokens(std::span<const SeqId> seq_ids,
                      std::span<const std::int32_t> positions) const;

  CellCacheConfig config;
  std::vector<std::int32_t> refcounts;  // [max_cells]; the scratch cell stays 0
  BitTree free_cells;                   // cells a placement may take
  BitTree used_cells;                   // cells with a positive count
  BitTree free_slots;                   // sequence ids not live
  // [max_sequences][pos(seq)]. Tables keep their capacity across rewind and
  // seq_rm so steady-state steps do not allocate; the total stays bounded by
  // max_sequences x max_seq_len, the size of the device-side table array.
  std::vector<std::vector<CellId>> tables;
  std::int32_t cells_used = 0;
  std::int32_t sequences = 0;
  std::int32_t high_water = 0;
  std::uint64_t placements = 0;
  StepPlacement step;
  bool has_step = false;

  // check_step scratch, kept between calls so a step allocates nothing:
  // step_next[s] is the position the next token of s must carry (-1 = s not
  // yet seen in this step); step_seen lists the entries to reset.
  mutable std::vector<std::int32_t> step_next;
  std::vector<std::uint64_t> epochs;  // per slot: bumped when it starts a new sequence
  mutable std::vector<SeqId> step_seen;
};

Status CellCache::Impl::check_tokens(std::span<const SeqId> seq_ids,
                                     std::span<const std::int32_t> positions) const {
  for (std::size_t i = 0; i < seq_ids.size(); ++i) {
    const SeqId seq = seq_ids[i];
    const std::int32_t position = positions[i];
    if (seq < 0 || seq >= config.max_sequences) {
      return invalid_argument("step token {}: sequence id {} is outside [0, {})", i, seq,
                              config.max_sequences);
    }
    if (!live(seq)) {
      return not_found("step token {}: sequence {} is not live (open it with seq_new first)", i,
                       seq);
    }
    std::int32_t& next = step_next[static_cast<std::size_t>(seq)];
    if (next < 0) {
      next = static_cast<std::int32_t>(table(seq).size());
      step_seen.push_back(seq);
    }
    if (position != next) {
      const char* what = position > next ? "would leave a gap"
                         : position < static_cast<std::int32_t>(table(seq).size())
                             ? "is already held by the sequence (rewind first)"
                             : "repeats or goes back within the step";
      return invalid_argument("step token {}: sequence {} position {} {}; expected position {}", i,
                              seq, position, what, next);
    }
    if (position >= config.max_seq_len) {
      return out_of_resources(
          "step token {}: sequence {} position {} reaches max_seq_len {}; end or rewind the "
          "sequence",
          i, seq, position, config.max_seq_len);
    }
    ++next;
  }
  if (seq_ids.size() > static_cast<std::size_t>(cells_free())) {
    return out_of_resources("step of {} tokens needs {} cells but only {} of {} are free",
                            seq_ids.size(), seq_ids.size(), cells_free(), config.max_cells - 1);
  }
  return Status::ok();
}

Result<std::unique_ptr<CellCache>> CellCache::create(const CellCacheConfig& config) {
  CELLM_RETURN_IF_ERROR(config.validate());
  return std::unique_ptr<CellCache>(new CellCache(std::make_unique<Impl>(config)));
}

CellCache::CellCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CellCache::~CellCache() = default;

const CellCacheConfig& CellCache::config() const {
  return impl_->config;
}

std::uint64_t CellCache::seq_epoch(SeqId seq) const {
  if (seq < 0 || seq >= impl_->config.max_sequences) return 0;
  return impl_->epochs[static_cast<std::size_t>(seq)];
}

std::optional<SeqId> CellCache::seq_new() {
  if (impl_->sequences >= impl_->config.max_sequences) return std::nullopt;
  return impl_->claim_slot();
}

std::optional<SeqId> CellCache::seq_clone(SeqId src, std::int32_t upto) {
  Impl& m = *impl_;
  if (!m.live(src) || upto < 0 || upto > pos(src)) return std::nullopt;
  if (m.sequences >= m.config.max_sequences) return std::nullopt;
  const SeqId dst = m.claim_slot();
  const auto& from = m.table(src);
  auto& to = m.table(dst);
  to.assign(from.begin(), from.begin() + upto);
  for (CellId cell : to) m.retain(cell);
  return dst;
}

bool CellCache::seq_rm(SeqId seq) {
  Impl& m = *impl_;
  if (!m.live(seq)) return false;
  m.truncate(seq, 0);
  m.free_slots.insert(seq);
  --m.sequences;
  m.has_step = false;
  return true;
}

bool CellCache::rewind(SeqId seq, std::int32_t pos) {
  Impl& m = *impl_;
  if (!m.live(seq) || pos < 0 || pos > this->pos(seq)) return false;
  m.truncate(seq, pos);
  m.has_step = false;
  return true;
}

std::int32_t CellCache::pos(SeqId seq) const {
  return impl_->live(seq) ? static_cast<std::int32_t>(impl_->table(seq).size()) : 0;
}

bool CellCache::is_live(SeqId seq) const {
  return impl_->live(seq);
}

Status CellCache::check_step(std::span<const SeqId> seq_ids,
                             std::span<const std::int32_t> positions) const {
  const Impl& m = *impl_;
  if (seq_ids.size() != positions.size()) {
    return invalid_argument("step has {} sequence ids but {} positions; give one of each per token",
                            seq_ids.size(), positions.size());
  }
  if (seq_ids.empty()) return invalid_argument("step has no tokens");
  Status status = m.check_tokens(seq_ids, positions);
  for (SeqId seq : m.step_seen) m.step_next[static_cast<std::size_t>(seq)] = -1;
  m.step_seen.clear();
  return status;
}

Result<StepPlacement> CellCache::place_step(std::span<const SeqId> seq_ids,
                                            std::span<const std::int32_t> positions) {
  CELLM_RETURN_IF_ERROR(check_step(seq_ids, positions));
  Impl& m = *impl_;
  m.step.seq_ids.assign(seq_ids.begin(), seq_ids.end());
  m.step.positions.assign(positions.begin(), positions.end());
  m.step.cells.resize(seq_ids.size());
  for (std::size_t i = 0; i < seq_ids.size(); ++i) {
    const CellId cell = m.claim_cell();
    m.table(seq_ids[i]).push_back(cell);
    m.step.cells[i] = cell;
  }
  m.placements += seq_ids.size();
  m.high_water = std::max(m.high_water, m.used_end());
  m.has_step = true;
  return m.step;
}

const StepPlacement* CellCache::current_step() const {
  return impl_->has_step ? &impl_->step : nullptr;
}

std::span<const CellId> CellCache::cell_table(SeqId seq) const {
  if (!impl_->live(seq)) return {};
  return impl_->table(seq);
}

std::int32_t CellCache::refcount(CellId cell) const {
  if (cell < 0 || cell >= impl_->config.max_cells) return 0;
  return impl_->refcounts[static_cast<std::size_t>(cell)];
}

std::optional<PositionRange> CellCache::attend_range(SeqId seq, std::int32_t position,
                                                     std::int32_t window) const {
  if (!impl_->live(seq) || position < 0 || position >= pos(seq) || window < 0) {
    return std::nullopt;
  }
  const std::int32_t begin = window == 0 ? 0 : std::max(0, position - window + 1);
  return PositionRange{begin, position + 1};
}

std::span<const CellId> CellCache::attend_cells(SeqId seq, std::int32_t position,
                                                std::int32_t window) const {
  const auto range = attend_range(seq, position, window);
  if (!range) return {};
  return cell_table(seq).subspan(static_cast<std::size_t>(range->begin),
                                 static_cast<std::size_t>(range->end - range->begin));
}

CellCacheMetrics CellCache::metrics() const {
  const Impl& m = *impl_;
  CellCacheMetrics out;
  out.cells_used = m.cells_used;
  out.cells_free = m.cells_free();
  out.used_end = m.used_end();
  out.capacity = m.config.max_cells;
  out.sequences = m.sequences;
  out.high_water = m.high_water;
  out.placements = m.placements;
  return out;
}

void CellCache::clear() {
  impl_->reset();
}

}  // namespace cellm::cache
