// SseParser: an incremental reader of a server-sent-event stream (the
// text/event-stream of a streaming OpenAI-compatible response), fed the body
// in whatever pieces the socket delivers. It splits lines on LF, CRLF or CR
// (a CR at the end of one piece and an LF at the start of the next are one
// line end), ignores comments (":...") and the fields it has no use for
// (event, id, retry), joins the "data" lines of one event with "\n" and hands
// each event's data to the caller when a blank line ends it. The body comes
// from the network, so it is untrusted: a line longer than the limit puts the
// parser into a failed state with a message instead of growing without bound.
//
// Thread-safety: one parser per stream, used by one thread. It keeps its
// buffers across events, so a long stream allocates only while its longest
// line grows.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cellm::bench {

class SseParser {
 public:
  static constexpr std::size_t kDefaultMaxLine = 1u << 20;
  explicit SseParser(std::size_t max_line = kDefaultMaxLine) : max_line_(max_line) {}

  // Feeds the next piece of the body. `on_event(std::string_view data)` is
  // called for every event completed by it (the view lives until the call
  // returns); returns false once the parser failed (see error()) or a
  // callback returned false, and ignores input from then on.
  template <class OnEvent>
  bool feed(std::string_view piece, OnEvent&& on_event);

  // Ends the stream: an event whose blank line never came is dropped, as the
  // SSE rules say. False when the stream ended inside a line that was not
  // empty (a cut-off body).
  bool finish();

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // Events delivered so far.
  std::size_t events() const { return events_; }

 private:
  // Handles one complete line; false to stop (callback or failure).
  template <class OnEvent>
  bool line(std::string_view text, OnEvent& on_event);

  std::size_t max_line_;
  std::string partial_;    // the current line's bytes seen so far
  std::string data_;       // the current event's data lines, joined
  bool has_data_ = false;  // a data field arrived (possibly empty)
  bool after_cr_ = false;  // the last byte was a CR: a leading LF is part of that line end
  bool stopped_ = false;   // a callback asked to stop
  std::size_t events_ = 0;
  std::string error_;
};

template <class OnEvent>
bool SseParser::feed(std::string_view piece, OnEvent&& on_event) {
  if (failed() || stopped_) return false;
  std::size_t pos = 0;
  if (after_cr_ && !piece.empty()) {
    after_cr_ = false;
    if (piece[0] == '\n') pos = 1;
  }
  while (pos < piece.size()) {
    const std::size_t end = piece.find_first_of("\r\n", pos);
    if (end == std::string_view::npos) {
      const std::size_t rest = piece.size() - pos;
      if (partial_.size() + rest > max_line_) {
        error_ = "an event-stream line is longer than " + std::to_string(max_line_) +
                 " bytes: not a server-sent-event stream, or a runaway one";
        return false;
      }
      partial_.append(piece.substr(pos));
      break;
    }
    bool ok = true;
    if (partial_.empty()) {
      if (end - pos > max_line_) {
        error_ = "an event-stream line is longer than " + std::to_string(max_line_) + " bytes";
        return false;
      }
      ok = line(piece.substr(pos, end - pos), on_event);
    } else {
      if (partial_.size() + (end - pos) > max_line_) {
        error_ = "an event-stream line is longer than " + std::to_string(max_line_) + " bytes";
        return false;
      }
      partial_.append(piece.substr(pos, end - pos));
      ok = line(partial_, on_event);
      partial_.clear();
    }
    if (!ok) return false;
    if (piece[end] == '\r') {
      if (end + 1 < piece.size()) {
        pos = piece[end + 1] == '\n' ? end + 2 : end + 1;
      } else {
        after_cr_ = true;
        pos = end + 1;
      }
    } else {
      pos = end + 1;
    }
  }
  return true;
}

template <class OnEvent>
bool SseParser::line(std::string_view text, OnEvent& on_event) {
  if (text.empty()) {  // dispatch
    if (!has_data_) return true;
    ++events_;
    const bool go_on = on_event(std::string_view(data_));
    data_.clear();
    has_data_ = false;
    if (!go_on) stopped_ = true;
    return go_on;
  }
  if (text[0] == ':') return true;  // a comment (keep-alive)
  std::string_view field = text;
  std::string_view value;
  if (const std::size_t colon = text.find(':'); colon != std::string_view::npos) {
    field = text.substr(0, colon);
    value = text.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field != "data") return true;  // event, id, retry and unknown fields
  if (has_data_) {
    if (data_.size() + 1 + value.size() > max_line_) {
      error_ = "an event's data is longer than " + std::to_string(max_line_) + " bytes";
      return false;
    }
    data_.push_back('\n');
  }
  data_.append(value);
  has_data_ = true;
  return true;
}

inline bool SseParser::finish() {
  const bool clean = partial_.empty();
  partial_.clear();
  data_.clear();
  has_data_ = false;
  return clean && !failed();
}

}  // namespace cellm::bench
