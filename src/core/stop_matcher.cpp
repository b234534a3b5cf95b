#include "core/stop_matcher.h"

#include <algorithm>

#include "core/check.h"
#include "core/utf8.h"

namespace cellm {

Result<StopMatcher> StopMatcher::create(std::vector<std::string> stops) {
  for (std::size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) return invalid_argument("stop string {} is empty", i);
    if (!utf8::is_valid(stops[i])) return invalid_argument("stop string {} is not valid UTF-8", i);
  }
  return StopMatcher(std::move(stops));
}

void StopMatcher::ignore_matches_ending_by(std::size_t offset) {
  CELLM_CHECK(offset >= ignore_end_, "stop boundary moved back from {} to {}", ignore_end_, offset);
  ignore_end_ = offset;
}

std::size_t StopMatcher::find_stop() {
  // The earliest counting match ends the stream (ties: the stop listed first).
  // Every occurrence is tried, overlapping ones included, because an ignored
  // early one may overlap a later one that counts.
  std::size_t best = std::string::npos;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    const std::string& stop = stops_[i];
    for (std::size_t at = held_.find(stop); at != std::string::npos && at < best;
         at = held_.find(stop, at + 1)) {
      if (held_at_ + at + stop.size() > ignore_end_) {
        best = at;
        stop_index_ = static_cast<int>(i);
        break;
      }
    }
  }
  return best;
}

std::size_t StopMatcher::tail_to_hold() const {
  // A tail that is a proper prefix of a stop string may still become a match,
  // unless that match would end by the boundary and so not count; a shorter
  // tail of the same stop would end later, so the search goes on past it.
  const std::size_t end = bytes_pushed();
  std::size_t hold = 0;
  for (const std::string& stop : stops_) {
    for (std::size_t k = std::min(stop.size() - 1, held_.size()); k > hold; --k) {
      if (end - k + stop.size() > ignore_end_ &&
          held_.compare(held_.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

StopMatcher::Output StopMatcher::push(std::string_view text) {
  Output out;
  if (stopped()) {
    out.stopped = true;
    out.stop_index = stop_index_;
    return out;
  }
  held_.append(text);
  const std::size_t at = find_stop();
  if (at != std::string::npos) {
    out.text = held_.substr(0, at);
    match_offset_ = held_at_ + at;
    out.stopped = true;
    out.stop_index = stop_index_;
    held_at_ += held_.size();
    held_.clear();
    return out;
  }
  const std::size_t release = held_.size() - tail_to_hold();
  out.text = held_.substr(0, release);
  held_.erase(0, release);
  held_at_ += release;
  return out;
}

std::string StopMatcher::finish() {
  if (stopped()) return {};
  std::string out = std::move(held_);
  held_.clear();
  held_at_ += out.size();
  return out;
}

std::size_t stop_prefix_tail(std::string_view text, const std::vector<std::string>& stops) {
  std::size_t hold = 0;
  for (const std::string& stop : stops) {
    if (stop.empty()) continue;
    for (std::size_t k = std::min(stop.size() - 1, text.size()); k > hold; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  return hold;
}

}  // namespace cellm
