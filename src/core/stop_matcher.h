// Stop strings matched on generated text across token boundaries. Text that
// could be the beginning of a stop string is held back and released as soon as
// it cannot be; when a stop string appears, the text before it is released and
// the rest (the stop string and anything after) is dropped. Optionally, matches
// that end within the first B bytes of the stream do not count (min_tokens).
//
// The engine runs one per generation over the bytes of its tokens (stop
// strings end a choice in the step that completes them); it lives in core so
// that the engine needs no text library.
//
// Thread-safety: one StopMatcher per stream; not for concurrent use.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"

namespace cellm {

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

  // From now on a match counts only if it ends past byte `offset` of the
  // stream (0 = its first pushed byte); one lying wholly within those bytes is
  // passed over, one that starts inside and ends after them stops as usual.
  // The offset may lie ahead of what was pushed, and it only moves forward
  // (CELLM_CHECK): text already released was judged against the old one.
  void ignore_matches_ending_by(std::size_t offset);
  // Bytes taken in so far; pushes after a stop are not counted.
  std::size_t bytes_pushed() const { return held_at_ + held_.size(); }

  bool stopped() const { return stop_index_ >= 0; }
  // Where the match begins: its byte offset in the stream (0 = the first
  // pushed byte). Meaningful only once stopped().
  std::size_t match_offset() const { return match_offset_; }
  // Which stop string matched (its position in the list), -1 before a match.
  int stop_index() const { return stop_index_; }
  std::size_t held_bytes() const { return held_.size(); }

 private:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Position in held_ of the earliest counting match (npos if none); sets
  // stop_index_ when found.
  std::size_t find_stop();
  // Length of the longest tail of held_ that a later push could turn into a
  // counting match.
  std::size_t tail_to_hold() const;

  std::vector<std::string> stops_;
  std::string held_;
  std::size_t held_at_ = 0;     // stream offset of held_[0]
  std::size_t ignore_end_ = 0;  // matches ending at or before this offset do not count
  int stop_index_ = -1;
  std::size_t match_offset_ = 0;
};

// Length of the longest tail of `text` that is a proper prefix of one of
// `stops`: bytes that a later piece could still turn into a stop string, so
// a text layer holds them back until the engine has judged them.
std::size_t stop_prefix_tail(std::string_view text, const std::vector<std::string>& stops);

}  // namespace cellm
