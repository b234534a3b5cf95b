// Python-style function calls with literal arguments, as Gemma writes them
// in a ```tool_code block: `name(key=value, ...)`, one or more separated by
// newlines, commas or ';', or a list `[f(...), g(...)]`, each optionally
// wrapped in print(...). Values are Python literals (strings, numbers,
// True/False/None, lists, tuples, dicts), turned into JSON; anything else
// (expressions, positional arguments, variables) is not a call.
//
// Thread-safety: pure function.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace cellm::server {

// The calls (name, arguments as compact JSON), or nullopt when `text` is not
// made of such calls only.
std::optional<std::vector<ParsedCall>> parse_python_calls(std::string_view text);

}  // namespace cellm::server
