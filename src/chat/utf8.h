// Python string semantics the template interpreter needs on top of the core
// UTF-8 primitives: Python strings index, slice and strip by code point and
// have their own notion of whitespace. Inputs are validated once (templates
// at parse, context strings on conversion) and trusted afterwards.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace cellm::chat::utf8 {

// The interpreter spells the core primitives utf8::next etc. from inside
// namespace chat, where this namespace hides cellm::utf8.
using cellm::utf8::append;
using cellm::utf8::boundaries;
using cellm::utf8::find_invalid;
using cellm::utf8::length;
using cellm::utf8::next;

// Python's str.isspace() for one code point.
bool is_space(char32_t cp);
// str.strip()/lstrip()/rstrip(): whitespace when `chars` is nullopt, else any
// code point of `chars`.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right);

// ASCII-only case mapping (non-ASCII code points are kept as they are).
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);

}  // namespace cellm::chat::utf8
