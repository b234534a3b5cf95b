// Tool calls in model output: which convention a model uses (chosen once from
// its chat template source and architecture, never guessed from the output)
// and an incremental parser that splits generated text into content and
// OpenAI-style tool calls, streamed as they are written.
//
// Formats:
//   kLlama3  {"name": ..., "parameters": {...}} objects, optionally after
//            <|python_tag|>, several separated by ';' or newlines; the reply
//            must start with them (after <|python_tag|> or as its first byte).
//   kHermes  <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
//            blocks anywhere in the reply (Qwen 2.5/3, Hermes).
//   kMistral [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (the
//            marker is a control token that detokenization may drop, so a
//            reply starting with a JSON list of calls counts too).
//   kGemma   a fenced ```tool_code block holding Python-style calls
//            name(arg=literal, ...), one a line or as a list [f(..), g(..)].
//
// Streaming (the JSON formats: kLlama3, kHermes, kMistral). Inside a block
// the format marks as calls, each call object is read byte by byte
// (CallReader, tool_stream.h). A call STARTS as soon as its name is certain:
// the object's top-level "name" member and its whole string value arrived.
// Then a kCallStart event gives its index, id and name, and kArguments events
// give successive pieces of the arguments object's text as the model writes
// it. The pieces:
//   * concatenate to the call's final `arguments`, byte for byte: the
//     model's own text of the object, never re-serialized, so a streamed and
//     a non-streamed reply of the same generation carry the same string;
//   * each keep the arguments a prefix of valid JSON (the whole call object
//     is checked by JsonPrefixScanner as it arrives), and never end inside a
//     UTF-8 sequence;
//   * come one per push() at most (what the new text added).
// Arguments written as a JSON string holding an object come in one piece when
// that string closes; a call without arguments gets "{}" when it closes.
// kGemma: the Python-style calls become JSON only once the ``` block closes,
// so each call starts and gets its whole arguments in one piece then.
//
// What stays content: text outside blocks, and a block's text (its marker
// included) that never reached a certain call start: a block that turns out
// not to be JSON, an object without a "name" string, a "name" that is not a
// string, or the end of the output before the name closed. Whitespace and
// separators around calls (';', ',', brackets, the closing tag) are layout and
// dropped; text after a block's calls is content again (a kLlama3 reply may
// go on in prose after its calls; a kHermes call object followed by anything
// but </tool_call> ends its block there; a kMistral list or a <tool_call>
// left unclosed at the end of the output still counts its whole calls).
//
// Malformed or unfinished calls. A started call never becomes content. If its
// text stops being JSON, its arguments turn out invalid (not an object), or
// the output ends before it closed (max_tokens), the call stays as streamed
// (ToolCall::complete false, arguments cut where the trouble began), nothing
// after that point is released at all (neither calls nor content: the model
// left the format mid-call), and all_calls_complete() is false, so the run
// finishes with its own reason ("length" or "stop") instead of "tool_calls".
// The non-streamed reply shows the same call with the same partial
// arguments (GenerationRun builds both from these events).
//
// Thread-safety: detect_tool_format and parse_tool_body are pure functions;
// a ToolCallParser belongs to one thread (one choice of one request).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_stream.h"

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
  std::string arguments;  // a JSON object as text (the pieces released so far)
  bool complete = false;  // the call closed and its arguments are final
};

// One step of a reply as the parser releases it, in output order.
struct ToolEvent {
  enum class Kind : std::uint8_t { kContent, kCallStart, kArguments };
  Kind kind = Kind::kContent;
  std::int32_t index = -1;  // the call's index (kCallStart, kArguments)
  std::string text;         // content, or a piece of the call's arguments
  std::string id;           // kCallStart: the call's id and name
  std::string name;
};

// What one push() or finish() released.
struct ToolParse {
  std::vector<ToolEvent> events;
  // The kContent text of `events`, concatenated.
  std::string content() const;
};

class ToolCallParser {
 public:
  // `format` must not be kNone.
  explicit ToolCallParser(ToolFormat format);

  // Feeds the next piece of generated text. Text that may still turn out to
  // be (the start of) a call is held back until it is decided; a started
  // call's arguments are released as they arrive.
  ToolParse push(std::string_view text);
  // The end of the output: held text is decided (a block that never reached
  // a certain call start becomes content; a started call that did not close
  // stays incomplete).
  ToolParse finish();

  // Every call so far (started ones included), arguments as released.
  const std::vector<ToolCall>& calls() const { return calls_; }
  // At least one call, and every call complete: the reply ends its turn to
  // have tools run (finish_reason "tool_calls").
  bool all_calls_complete() const;

 private:
  // kText: outside blocks. kLead: in a block before a call object (after the
  // marker, a ';' or the list's '['/','). kCall: reading a call object.
  // kAfter: after a call object. kGemma: in a ```tool_code block, decided
  // whole. kDead: a started call broke; everything after is dropped.
  enum class Phase : std::uint8_t { kText, kLead, kCall, kAfter, kGemma, kDead };
  void process(bool final, ToolParse* out);
  void release(std::string text, ToolParse* out);
  // One step of a JSON-format block at buf_[scan_]; false when it needs more
  // text to decide.
  bool step_block(bool final, ToolParse* out);
  void begin_call();
  void start_call(ToolParse* out);
  // Releases the started call's unreleased argument bytes (all of them with
  // `all`, else up to the last complete UTF-8 sequence).
  void flush_arguments(bool all, ToolParse* out);
  // The block is not calls from buf_[pos]: held text before it is content,
  // and text scanning resumes at pos.
  void leave_block(std::size_t pos, ToolParse* out);
  void die();
  // The Gemma block at the front of buf_; false when it needs more text.
  bool gemma_block(bool final, ToolParse* out);
  // Tries `body` as the calls of one block; appends them on success.
  bool take_calls(std::string_view body, ToolParse* out);

  ToolFormat format_;
  Phase phase_ = Phase::kText;
  std::string buf_;       // undecided text; in a block, from hold_ on
  std::size_t scan_ = 0;  // in a block: the next byte of buf_ to read
  std::size_t hold_ = 0;  // in a block: where the text to give back as content starts
  bool list_ = false;     // kMistral: the block is a '[' list
  int block_calls_ = 0;   // calls started in the current block
  std::optional<CallReader> reader_;
  bool started_ = false;      // reader_'s call has started (calls_.back())
  std::size_t released_ = 0;  // bytes of reader_'s arguments released
  std::string pending_ws_;    // trailing whitespace of the content, dropped next to a call
  bool any_content_ = false;  // non-whitespace content released
  std::vector<ToolCall> calls_;
};

// Parsers of one whole block's body, exposed for tests (an independent
// check of the streaming parser) and used for kGemma: the calls as (name,
// arguments JSON) pairs, or nullopt when the body is not valid for the
// format. The JSON formats' arguments come out re-serialized compactly here
// (ToolCallParser keeps the model's text instead).
struct ParsedCall {
  std::string name;
  std::string arguments;
};
std::optional<std::vector<ParsedCall>> parse_tool_body(ToolFormat format, std::string_view body);

}  // namespace cellm::server
