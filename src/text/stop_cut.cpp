#include "text/stop_cut.h"

#include <algorithm>

#include "core/stop_matcher.h"

namespace cellm::text {

std::string StopCut::push(std::string_view piece) {
  if (finished_) return {};
  held_.append(piece);
  const std::size_t keep = stop_prefix_tail(held_, stops_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, out.size());
  released_ += static_cast<std::int64_t>(out.size());
  return out;
}

std::string StopCut::finish(std::string_view rest, std::optional<std::int64_t> bytes_from_match) {
  if (finished_) return {};
  finished_ = true;
  std::string out = std::move(held_);
  held_.clear();
  out.append(rest);
  if (bytes_from_match) {
    // Never negative, never more than the unreleased text: what was shown
    // stays shown (it could not have begun the match, being no prefix of it).
    const auto drop = static_cast<std::size_t>(
        std::clamp<std::int64_t>(*bytes_from_match, 0, static_cast<std::int64_t>(out.size())));
    out.resize(out.size() - drop);
  }
  released_ += static_cast<std::int64_t>(out.size());
  return out;
}

}  // namespace cellm::text
