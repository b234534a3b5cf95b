// OffGraphKVMetrics: the KV pool's usage as an executor reports it.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>

#include "cache/cell_cache.h"

namespace cellm::executor {

struct OffGraphKVMetrics {
  std::int64_t logical_length = 0;    // read extent: one past the highest used cell
  std::int64_t flat_capacity = 0;     // cells in the pool, scratch included
  std::uint64_t growth_count = 0;     // the pool is sized at load and never grows
  std::uint64_t allocated_bytes = 0;  // pool bytes, when the program publishes its cell size
  std::int32_t cells_used = 0;
  std::int32_t cells_free = 0;
  std::int32_t high_water = 0;  // largest read extent so far
  std::int32_t sessions = 0;    // live cache sequences
};

inline OffGraphKVMetrics kv_metrics_of(const cache::CellCache& cache, std::uint64_t cell_bytes) {
  const cache::CellCacheMetrics m = cache.metrics();
  OffGraphKVMetrics out;
  out.logical_length = m.used_end;
  out.flat_capacity = m.capacity;
  out.allocated_bytes = static_cast<std::uint64_t>(m.capacity) * cell_bytes;
  out.cells_used = m.cells_used;
  out.cells_free = m.cells_free;
  out.high_water = m.high_water;
  out.sessions = m.sequences;
  return out;
}

}  // namespace cellm::executor
