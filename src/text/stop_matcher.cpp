#include "text/stop_matcher.h"

#include <algorithm>

#include "core/utf8.h"

namespace cellm::text {

Result<StopMatcher> StopMatcher::create(std::vector<std::string> stops) {
  for (std::size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) return invalid_argument("stop string {} is empty", i);
    if (!utf8::is_valid(stops[i])) return invalid_argument("stop string {} is not valid UTF-8", i);
  }
  return StopMatcher(std::move(stops));
}

StopMatcher::Output StopMatcher::push(std::string_view text) {
  Output out;
  if (stopped()) {
    out.stopped = true;
    out.stop_index = stop_index_;
    return out;
  }
  held_.append(text);
  // The earliest occurrence of any stop string ends the stream.
  std::size_t best = std::string::npos;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::size_t at = held_.find(stops_[i]);
    if (at < best) {
      best = at;
      stop_index_ = static_cast<int>(i);
    }
  }
  if (best != std::string::npos) {
    out.text = held_.substr(0, best);
    out.stopped = true;
    out.stop_index = stop_index_;
    held_.clear();
    return out;
  }
  // Hold the longest tail that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (std::size_t k = std::min(stop.size() - 1, held_.size()); k > hold; --k) {
      if (held_.compare(held_.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  out.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::finish() {
  if (stopped()) return {};
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace cellm::text
