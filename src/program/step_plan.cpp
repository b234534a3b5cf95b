#include "program/step_plan.h"

#include <algorithm>

#include "core/check.h"

namespace cellm::program {

std::vector<StepSlice> plan_slices(std::int64_t total, std::span<const ForwardMethod> methods) {
  std::vector<StepSlice> slices;
  if (methods.empty() || total <= 0) return slices;
  const std::int64_t widest = methods.back().max_tokens;
  CELLM_CHECK(widest > 0, "the widest method ({}) must take at least one token, not {}",
              methods.back().name, widest);
  for (std::int64_t offset = 0; offset < total;) {
    const std::int64_t length = std::min(widest, total - offset);
    std::size_t m = 0;
    while (methods[m].max_tokens < length) ++m;  // the widest method always holds it
    const ForwardMethod& method = methods[m];
    slices.push_back(StepSlice{offset, length, m, method.is_static ? method.max_tokens : length});
    offset += length;
  }
  return slices;
}

}  // namespace cellm::program
