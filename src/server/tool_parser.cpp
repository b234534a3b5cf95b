// ToolCallParser (declared in tool_calls.h): the incremental split of a
// reply into content and streamed tool calls. The contract is documented in
// tool_calls.h.
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "server/tool_calls.h"

namespace cellm::server {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

std::string random_call_id() {
  static constexpr std::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % kAlphabet.size()];
  return id;
}

// Where each format's calls begin and end in the output.
struct Markers {
  std::string_view start;  // found anywhere in the text
  std::string_view end;    // empty: no closing marker
  char bare_start = 0;     // a reply whose first non-space byte is this is a block too
};

Markers markers_of(ToolFormat format) {
  switch (format) {
    case ToolFormat::kLlama3: return {"<|python_tag|>", "", '{'};
    case ToolFormat::kHermes: return {"<tool_call>", "</tool_call>", 0};
    case ToolFormat::kMistral: return {"[TOOL_CALLS]", "", '['};
    case ToolFormat::kGemma: return {"```tool_code", "```", 0};
    case ToolFormat::kNone: break;
  }
  return {};
}

// The length of `s` without a UTF-8 sequence cut short at its end, so no
// released piece splits a character (a JSON text's pieces are shown as JSON
// strings, which cannot hold half a character).
std::size_t whole_utf8_prefix(std::string_view s) {
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const std::size_t len = b < 0x80             ? 1
                            : (b & 0xE0) == 0xC0 ? 2
                            : (b & 0xF0) == 0xE0 ? 3
                            : (b & 0xF8) == 0xF0 ? 4
                                                 : 1;
    return back < len ? n - back : n;
  }
  return n;
}

void add_event(ToolParse* out, ToolEvent::Kind kind, std::int32_t index, std::string_view text) {
  // Adjacent pieces of the same thing merge: one event per push and call.
  if (!out->events.empty() && kind != ToolEvent::Kind::kCallStart) {
    ToolEvent& last = out->events.back();
    if (last.kind == kind && last.index == index) {
      last.text.append(text);
      return;
    }
  }
  ToolEvent e;
  e.kind = kind;
  e.index = index;
  e.text = std::string(text);
  out->events.push_back(std::move(e));
}

}  // namespace

std::string ToolParse::content() const {
  std::string text;
  for (const ToolEvent& e : events) {
    if (e.kind == ToolEvent::Kind::kContent) text += e.text;
  }
  return text;
}

ToolCallParser::ToolCallParser(ToolFormat format) : format_(format) {}

bool ToolCallParser::all_calls_complete() const {
  if (calls_.empty()) return false;
  for (const ToolCall& c : calls_) {
    if (!c.complete) return false;
  }
  return true;
}

ToolParse ToolCallParser::push(std::string_view text) {
  ToolParse out;
  if (phase_ == Phase::kDead) return out;
  buf_.append(text);
  process(/*final=*/false, &out);
  return out;
}

ToolParse ToolCallParser::finish() {
  ToolParse out;
  process(/*final=*/true, &out);
  // Whitespace around calls is layout, not content; without calls the reply
  // keeps every byte.
  if (calls_.empty() && !pending_ws_.empty()) {
    add_event(&out, ToolEvent::Kind::kContent, -1, pending_ws_);
  }
  pending_ws_.clear();
  return out;
}

void ToolCallParser::release(std::string text, ToolParse* out) {
  std::string all = std::move(pending_ws_);
  all += text;
  pending_ws_.clear();
  std::size_t end = all.size();
  while (end > 0 && is_space(all[end - 1])) --end;
  std::size_t begin = 0;
  // Text after a call keeps its separation from earlier text; with nothing
  // before, the reply does not start with the whitespace after a call.
  if (!calls_.empty() && !any_content_) {
    while (begin < end && is_space(all[begin])) ++begin;
  }
  if (end > begin) {
    add_event(out, ToolEvent::Kind::kContent, -1, std::string_view(all).substr(begin, end - begin));
    any_content_ = true;
  }
  pending_ws_ = all.substr(std::max(end, begin));
}

bool ToolCallParser::take_calls(std::string_view body, ToolParse* out) {
  std::optional<std::vector<ParsedCall>> parsed = parse_tool_body(format_, body);
  if (!parsed) return false;
  for (ParsedCall& p : *parsed) {
    ToolCall call;
    call.index = static_cast<std::int32_t>(calls_.size());
    call.id = random_call_id();
    call.name = std::move(p.name);
    call.arguments = std::move(p.arguments);
    call.complete = true;
    ToolEvent start;
    start.kind = ToolEvent::Kind::kCallStart;
    start.index = call.index;
    start.id = call.id;
    start.name = call.name;
    out->events.push_back(std::move(start));
    add_event(out, ToolEvent::Kind::kArguments, call.index, call.arguments);
    calls_.push_back(std::move(call));
  }
  pending_ws_.clear();
  return true;
}

void ToolCallParser::process(bool final, ToolParse* out) {
  const Markers m = markers_of(format_);
  while (true) {
    switch (phase_) {
      case Phase::kDead: buf_.clear(); return;
      case Phase::kGemma:
        if (!gemma_block(final, out)) return;
        continue;
      case Phase::kLead:
      case Phase::kCall:
      case Phase::kAfter:
        if (step_block(final, out)) continue;
        flush_arguments(/*all=*/false, out);
        // Bytes before hold_ are read and will never be given back.
        buf_.erase(0, hold_);
        scan_ -= hold_;
        hold_ = 0;
        return;
      case Phase::kText: break;
    }
    const auto enter_block = [&](std::size_t marker) {
      phase_ = format_ == ToolFormat::kGemma ? Phase::kGemma : Phase::kLead;
      scan_ = marker;
      hold_ = 0;
      block_calls_ = 0;
      list_ = false;
    };
    if (m.bare_start != 0 && !any_content_ && calls_.empty()) {
      std::size_t first = 0;
      while (first < buf_.size() && is_space(buf_[first])) ++first;
      if (first == buf_.size()) {
        if (final) release(std::exchange(buf_, {}), out);
        return;
      }
      if (buf_[first] == m.bare_start) {
        // The marker itself may begin with the bare start ("[TOOL_CALLS]").
        const std::string_view rest = std::string_view(buf_).substr(first);
        if (!final && rest.size() < m.start.size() && m.start.starts_with(rest)) return;
        // Decided before the erase below moves the bytes under `rest`.
        const bool marked = rest.starts_with(m.start);
        pending_ws_ += buf_.substr(0, first);
        buf_.erase(0, first);
        enter_block(marked ? m.start.size() : 0);
        continue;
      }
    }
    const std::size_t at = buf_.find(m.start);
    if (at != std::string::npos) {
      release(buf_.substr(0, at), out);
      buf_.erase(0, at);
      enter_block(m.start.size());
      continue;
    }
    if (final) {
      release(std::exchange(buf_, {}), out);
      return;
    }
    // Hold back a tail that may be the start of the marker.
    std::size_t keep = std::min(buf_.size(), m.start.size() - 1);
    while (keep > 0 && !m.start.starts_with(std::string_view(buf_).substr(buf_.size() - keep))) {
      --keep;
    }
    release(buf_.substr(0, buf_.size() - keep), out);
    buf_.erase(0, buf_.size() - keep);
    return;
  }
}

bool ToolCallParser::step_block(bool final, ToolParse* out) {
  if (scan_ >= buf_.size()) {
    if (!final) return false;
    // The output ended in the block: a started call stays unfinished; held
    // text that never became a call is content.
    if (started_) {
      flush_arguments(/*all=*/false, out);
      die();
    } else {
      leave_block(buf_.size(), out);
    }
    return true;
  }
  const char c = buf_[scan_];
  // Layout between calls is read for good: nothing to give back.
  const auto consume = [this] {
    ++scan_;
    if (block_calls_ > 0) hold_ = scan_;
  };
  if (phase_ == Phase::kLead) {
    if (is_space(c)) {
      consume();
    } else if (c == '{') {
      begin_call();
    } else if (format_ == ToolFormat::kMistral && c == '[' && !list_ && block_calls_ == 0) {
      list_ = true;
      consume();
    } else {
      leave_block(scan_, out);
    }
    return true;
  }
  if (phase_ == Phase::kAfter) {
    if (format_ == ToolFormat::kHermes) {
      const std::string_view end = markers_of(format_).end;
      const std::string_view rest = std::string_view(buf_).substr(scan_);
      if (is_space(c)) {
        consume();
      } else if (rest.starts_with(end)) {
        scan_ += end.size();
        hold_ = scan_;
        leave_block(scan_, out);
      } else if (end.starts_with(rest) && !final) {
        return false;  // maybe the closing tag: wait for more
      } else {
        leave_block(scan_, out);  // no closing tag: the text goes on
      }
    } else if (format_ == ToolFormat::kLlama3 && (is_space(c) || c == ';')) {
      consume();
    } else if (format_ == ToolFormat::kLlama3 && c == '{') {
      begin_call();
    } else if (format_ == ToolFormat::kMistral && list_ && (is_space(c) || c == ',')) {
      consume();
      if (c == ',') phase_ = Phase::kLead;
    } else if (format_ == ToolFormat::kMistral && list_ && c == ']') {
      consume();
      leave_block(scan_, out);
    } else {
      leave_block(scan_, out);
    }
    return true;
  }
  // kCall
  const CallReader::State state = reader_->push(c);
  ++scan_;
  switch (state) {
    case CallReader::State::kReading:
      if (!started_ && reader_->named()) start_call(out);
      break;
    case CallReader::State::kComplete:
      if (!started_) start_call(out);
      flush_arguments(/*all=*/true, out);
      // The reader checks the syntax only; a number out of double's range
      // (1e400) is JSON a client's parser may refuse, as the whole-reply
      // parser does: such a call broke.
      if (nlohmann::json::parse(calls_.back().arguments, nullptr, false).is_discarded()) {
        die();
        return true;
      }
      calls_.back().complete = true;
      reader_.reset();
      started_ = false;
      phase_ = Phase::kAfter;
      break;
    case CallReader::State::kInvalid:
      if (started_) {
        flush_arguments(/*all=*/false, out);
        die();
        return true;
      }
      // Not a call after all: its text so far is content, and the byte that
      // decided it is read again as text.
      leave_block(scan_ - 1, out);
      return true;
  }
  if (started_ || phase_ == Phase::kAfter) hold_ = scan_;
  return true;
}

void ToolCallParser::begin_call() {
  reader_.emplace();
  started_ = false;
  released_ = 0;
  // After a call of this block, only the new object's text can be given back.
  if (block_calls_ > 0) hold_ = scan_;
  phase_ = Phase::kCall;
}

void ToolCallParser::start_call(ToolParse* out) {
  ToolCall call;
  call.index = static_cast<std::int32_t>(calls_.size());
  call.id = random_call_id();
  call.name = reader_->name();
  ToolEvent e;
  e.kind = ToolEvent::Kind::kCallStart;
  e.index = call.index;
  e.id = call.id;
  e.name = call.name;
  out->events.push_back(std::move(e));
  calls_.push_back(std::move(call));
  // The block's text before the call is layout (the marker, whitespace).
  pending_ws_.clear();
  started_ = true;
  released_ = 0;
  ++block_calls_;
  hold_ = scan_;
}

void ToolCallParser::flush_arguments(bool all, ToolParse* out) {
  if (!started_ || !reader_) return;
  const std::string& text = reader_->arguments();
  const std::size_t end = all ? text.size() : whole_utf8_prefix(text);
  if (end <= released_) return;
  const std::string_view piece = std::string_view(text).substr(released_, end - released_);
  ToolCall& call = calls_.back();
  call.arguments.append(piece);
  add_event(out, ToolEvent::Kind::kArguments, call.index, piece);
  released_ = end;
}

void ToolCallParser::leave_block(std::size_t pos, ToolParse* out) {
  if (hold_ < pos) release(buf_.substr(hold_, pos - hold_), out);
  buf_.erase(0, pos);
  phase_ = Phase::kText;
  scan_ = 0;
  hold_ = 0;
  reader_.reset();
  started_ = false;
}

void ToolCallParser::die() {
  phase_ = Phase::kDead;
  buf_.clear();
  scan_ = 0;
  hold_ = 0;
  reader_.reset();
  started_ = false;
}

bool ToolCallParser::gemma_block(bool final, ToolParse* out) {
  const Markers m = markers_of(format_);
  const std::size_t body_at = m.start.size();
  const std::size_t end = buf_.find(m.end, body_at);
  if (end != std::string::npos) {
    const std::size_t after = end + m.end.size();
    if (!take_calls(std::string_view(buf_).substr(body_at, end - body_at), out)) {
      release(buf_.substr(0, after), out);
    }
    buf_.erase(0, after);
    phase_ = Phase::kText;
    return true;
  }
  if (!final) return false;
  // The output ended inside the block: an unterminated block still counts
  // when its body is complete.
  if (!take_calls(std::string_view(buf_).substr(body_at), out)) release(buf_, out);
  buf_.clear();
  phase_ = Phase::kText;
  return true;
}

}  // namespace cellm::server
