#include "backend/cuda/attention_rows.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace cellm::cuda {

std::int32_t split_attention_rows(std::span<const std::int32_t> slots, std::int32_t max_decode_rows,
                                  std::span<std::int32_t> order,
                                  std::vector<std::int32_t>& scratch) {
  CELLM_CHECK(order.size() == slots.size());
  const std::size_t n = slots.size();
  std::int32_t top = -1;
  for (std::int32_t s : slots) top = std::max(top, s);
  const auto seqs = static_cast<std::size_t>(top + 1);
  // [0, seqs): rows per sequence; [seqs, seqs + n): 1 where a row leads.
  scratch.assign(seqs + n, 0);
  for (std::int32_t s : slots) {
    if (s >= 0) ++scratch[static_cast<std::size_t>(s)];
  }
  std::int32_t lead = 0;
  for (std::size_t i = 0; i < n && lead < max_decode_rows; ++i) {
    const std::int32_t s = slots[i];
    if (s >= 0 && scratch[static_cast<std::size_t>(s)] < kPrefillKernelMinRows) {
      order[static_cast<std::size_t>(lead++)] = static_cast<std::int32_t>(i);
      scratch[seqs + i] = 1;
    }
  }
  std::size_t next = static_cast<std::size_t>(lead);
  for (std::size_t i = 0; i < n; ++i) {
    if (scratch[seqs + i] == 0) order[next++] = static_cast<std::int32_t>(i);
  }
  return lead;
}

void first_step_positions(std::span<const std::int32_t> slots,
                          std::span<const std::int32_t> positions,
                          std::span<std::int32_t> fresh_from, std::vector<std::int32_t>& scratch) {
  CELLM_CHECK(positions.size() == slots.size() && fresh_from.size() == slots.size());
  std::int32_t top = -1;
  for (std::int32_t s : slots) top = std::max(top, s);
  scratch.assign(static_cast<std::size_t>(top + 1), std::numeric_limits<std::int32_t>::max());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] < 0) continue;
    std::int32_t& first = scratch[static_cast<std::size_t>(slots[i])];
    first = std::min(first, positions[i]);
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    // A negative position (never valid) clamps to 0: every key waits.
    fresh_from[i] = slots[i] < 0 ? 0 : std::max(0, scratch[static_cast<std::size_t>(slots[i])]);
  }
}

}  // namespace cellm::cuda
