// CallReader: reads one tool-call object of the JSON formats
//   {"name": "<function>", "arguments" | "parameters": {...}}
// byte by byte as the model writes it (ToolCallParser feeds it the bytes of
// a block the format marks as calls), so the call can be streamed:
//   * the name is known for sure once the "name" member's string has closed
//     (a key at the top level of the object, so "name" inside the arguments
//     does not count);
//   * the arguments are the model's own text of the arguments object, byte
//     for byte, from its '{' to its matching '}' (nothing re-serialized), and
//     every prefix of it that arguments() shows is a prefix of valid JSON
//     (JsonPrefixScanner checks the whole call object);
//   * arguments written as a JSON string holding an object ("arguments":
//     "{\"a\": 1}", which some models do) are decoded when the string closes
//     and come out in one piece; no arguments member means "{}", known when
//     the object closes. The first of "arguments"/"parameters" counts.
// The call is invalid when the text stops being JSON, "name" is not a
// non-empty string, the arguments are neither an object nor a string that
// holds one, or the object closes without a name.
//
// Thread-safety: a plain value, used by one thread.
#pragma once

#include <cstdint>
#include <string>

#include "server/json_prefix.h"

namespace cellm::server {

class CallReader {
 public:
  enum class State : std::uint8_t { kReading, kComplete, kInvalid };

  // Feeds the next byte of the object (the first is its '{'). Once the state
  // is kComplete or kInvalid, further bytes are refused (kInvalid).
  State push(char c);

  State state() const { return state_; }
  // The name, once known for sure (empty before).
  const std::string& name() const { return name_; }
  bool named() const { return !name_.empty(); }
  // The arguments text read so far; final when the state is kComplete.
  const std::string& arguments() const { return arguments_; }

 private:
  enum class Role : std::uint8_t { kNone, kKey, kName, kObjectArgs, kQuotedArgs, kOther };
  State invalid();
  void begin_member_value(char c);
  void end_member_value();

  JsonPrefixScanner scanner_;
  State state_ = State::kReading;
  Role role_ = Role::kNone;  // what the top-level member being read is
  std::string raw_;          // the key, name or quoted arguments being read (JSON text)
  std::string key_;          // the decoded key of the member being read
  std::string name_;
  std::string arguments_;
  bool args_seen_ = false;  // an arguments/parameters member began
};

}  // namespace cellm::server
