// Tool calls in model output: which convention a model uses (chosen once from
// its chat template source and architecture, never guessed from the output)
// and an incremental parser that splits generated text into content and
// OpenAI-style tool calls.
//
// Formats:
//   kLlama3  {"name": ..., "parameters": {...}} objects, optionally after
//            <|python_tag|>, several separated by ';' or newlines; the reply
//            must consist of calls only (they start it).
//   kHermes  <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
//            blocks anywhere in the reply (Qwen 2.5/3, Hermes).
//   kMistral [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (the
//            marker is a control token that detokenization may drop, so a
//            reply starting with a JSON list of calls counts too).
//   kGemma   a fenced ```tool_code block holding Python-style calls
//            name(arg=literal, ...), one a line or as a list [f(..), g(..)].
// Text that looks like a call but does not parse is returned as content.
//
// Thread-safety: detect_tool_format is a pure function; a ToolCallParser
// belongs to one thread (one choice of one request).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::server {

enum class ToolFormat : std::uint8_t { kNone, kLlama3, kHermes, kMistral, kGemma };

std::string_view tool_format_name(ToolFormat format);

// The format a model's template asks for: markers in the template source
// (<tool_call>, <|python_tag|>/ipython, [TOOL_CALLS], tool_code) checked
// against the architecture ("llama", "qwen2", "qwen3", "mistral",
// "gemma3_text", ...). kNone when the template has no tool support.
ToolFormat detect_tool_format(std::string_view template_source, std::string_view arch);

struct ToolCall {
  std::int32_t index = 0;  // position among the reply's calls
  std::string id;          // "call_<random>"
  std::string name;
  std::string arguments;  // a JSON object as text
};

// What one push() or finish() released.
struct ToolParse {
  std::string content;          // text that is not part of a call
  std::vector<ToolCall> calls;  // calls completed by this piece of text
};

class ToolCallParser {
 public:
  // `format` must not be kNone.
  explicit ToolCallParser(ToolFormat format);

  // Feeds the next piece of generated text. Text that may still turn out to
  // be (the start of) a call is held back until it is decided.
  ToolParse push(std::string_view text);
  // The end of the output: held text is decided (an unfinished or malformed
  // call becomes content).
  ToolParse finish();

  // Every call so far.
  const std::vector<ToolCall>& calls() const { return calls_; }

 private:
  enum class State : std::uint8_t { kText, kBlock };
  void process(bool final, ToolParse* out);
  void release(std::string text, ToolParse* out);
  // Tries `body` as the calls of one block; appends them on success.
  bool take_calls(std::string_view body, ToolParse* out);

  ToolFormat format_;
  State state_ = State::kText;
  std::string buf_;           // undecided text
  std::string pending_ws_;    // trailing whitespace of the content, dropped next to a call
  bool any_content_ = false;  // non-whitespace content released
  std::vector<ToolCall> calls_;
};

// Parsers of one block's body, exposed for tests: the calls as (name,
// arguments JSON) pairs, or nullopt when the body is not valid for the format.
struct ParsedCall {
  std::string name;
  std::string arguments;
};
std::optional<std::vector<ParsedCall>> parse_tool_body(ToolFormat format, std::string_view body);

}  // namespace cellm::server
