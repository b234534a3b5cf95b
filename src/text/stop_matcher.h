// Stop strings matched on generated text across token boundaries. Text that
// could be the beginning of a stop string is held back and released as soon as
// it cannot be; when a stop string appears, the text before it is released and
// the rest (the stop string and anything after) is dropped.
//
// Thread-safety: one StopMatcher per stream; not for concurrent use.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"

namespace cellm::text {

class StopMatcher {
 public:
  struct Output {
    std::string text;      // safe to show now
    bool stopped = false;  // a stop string was found (now or before)
    int stop_index = -1;   // which one, by position in the list
  };

  // Stop strings must be non-empty valid UTF-8 (InvalidArgument otherwise).
  // An empty list never stops.
  static Result<StopMatcher> create(std::vector<std::string> stops);

  Output push(std::string_view text);
  // End of stream without a stop: releases what is held.
  std::string finish();
  bool stopped() const { return stop_index_ >= 0; }
  std::size_t held_bytes() const { return held_.size(); }

 private:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::vector<std::string> stops_;
  std::string held_;
  int stop_index_ = -1;
};

}  // namespace cellm::text
