// StopCut: the text side of stop strings. The engine decides where a stop
// string matched (GenConfig::stop_strings, over the tokens' bytes); the text
// layer only has to (a) never show bytes that may yet turn out to begin a
// stop string, so it holds back a tail of the streamed text that is a proper
// prefix of one, and (b) cut the final text where the engine's match began,
// which may lie inside a token.
//
// The cut is measured from the end: the engine reports how many bytes of its
// generated text lie from the match start to the end of the last delivered
// token, and the same bytes end this stream's text once it is flushed. That
// stays right where the detokenizer's text differs from the raw token bytes
// only at its start (a SentencePiece leading space dropped).
//
// Thread-safety: one StopCut per stream; not for concurrent use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::text {

class StopCut {
 public:
  explicit StopCut(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // The part of `piece` (after what was held) that can be shown now.
  std::string push(std::string_view piece);
  // The stream ended; `rest` is its final text (the detokenizer's last
  // pieces). Without a match everything held and `rest` is released. With
  // one, `bytes_from_match` bytes at the end of the whole text are the
  // match and what followed it in its token; they are dropped (and so is any
  // part of them that is already held). Idempotent: later calls return "".
  std::string finish(std::string_view rest, std::optional<std::int64_t> bytes_from_match);

  // Bytes shown so far.
  std::int64_t released() const { return released_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::int64_t released_ = 0;
  bool finished_ = false;
};

}  // namespace cellm::text
