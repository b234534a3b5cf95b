// Monotonic clock helpers shared by metrics and benchmarks.
//
// Thread-safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>

namespace cellm {

using Clock = std::chrono::steady_clock;

inline std::int64_t us_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration_cast<std::chrono::microseconds>(to - from).count();
}

inline bool stamped(Clock::time_point t) {
  return t != Clock::time_point{};
}

}  // namespace cellm
