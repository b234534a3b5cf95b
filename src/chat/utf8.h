// UTF-8 helpers for the template interpreter: Python strings index, slice and
// strip by code point, so the interpreter needs code point boundaries and
// Python's notion of whitespace. Inputs are validated once (templates at
// parse, context strings on conversion) and trusted afterwards.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::chat::utf8 {

// Byte offset of the first invalid sequence, or nullopt when `s` is valid UTF-8
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
std::optional<std::size_t> find_invalid(std::string_view s);

// Decodes the code point starting at s[i] (valid input) and advances i.
char32_t next(std::string_view s, std::size_t& i);
// Appends the UTF-8 encoding of `cp`.
void append(std::string& out, char32_t cp);
// Byte offsets of every code point start, plus s.size() at the end.
std::vector<std::size_t> boundaries(std::string_view s);
std::size_t length(std::string_view s);
bool is_ascii(std::string_view s);

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
