// UTF-8 primitives shared by the tokenizer (text) and the template
// interpreter (chat): strict decoding, encoding, validation, and the lossy
// repair rule (one U+FFFD per maximal invalid subpart, as Python's
// errors="replace" and Rust's from_utf8_lossy do).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::utf8 {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length of the valid sequence starting at s[i] (i < s.size()), or 0 when the
// bytes there are not one; *cp is set only on success. Overlong forms,
// surrogates and code points past U+10FFFF are invalid.
std::size_t decode(std::string_view s, std::size_t i, char32_t* cp);

// Length of the maximal subpart starting at s[i] that is a prefix of some
// valid sequence (at least 1): the unit that lossy decoding replaces.
std::size_t invalid_span(std::string_view s, std::size_t i);

// Decodes the code point at s[i] and advances i past it. An invalid sequence
// reads as U+FFFD and advances past its maximal invalid subpart, so a loop
// over next() always terminates.
char32_t next(std::string_view s, std::size_t& i);

// Appends the encoding of `cp` (the caller passes a code point <= U+10FFFF).
void append(std::string& out, char32_t cp);
std::string encode(char32_t cp);

// Byte offset of the first invalid sequence, or nullopt when `s` is valid.
std::optional<std::size_t> find_invalid(std::string_view s);
bool is_valid(std::string_view s);

// `s` with every maximal invalid subpart replaced by U+FFFD.
std::string repair(std::string_view s);

// Bytes at the end of `s` that start a sequence the next bytes could still
// complete (0..3): what a streaming decoder must hold back.
std::size_t incomplete_tail(std::string_view s);

// Byte offsets of every code point start (any byte that is not a
// continuation byte), then s.size(); meant for valid input.
std::vector<std::size_t> boundaries(std::string_view s);
// Number of code point starts in `s`; meant for valid input.
std::size_t length(std::string_view s);

}  // namespace cellm::utf8
