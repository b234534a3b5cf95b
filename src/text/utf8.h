// UTF-8 helpers shared by the tokenizer pieces: decoding one code point,
// appending one, validating, and the lossy repair rules (one U+FFFD per
// maximal invalid subpart, as Python and Rust's from_utf8_lossy do).
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cellm::text {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Length of the valid UTF-8 sequence starting at s[i], or 0 if the bytes there
// are not one (then *cp is unspecified). Rejects overlongs and surrogates.
std::size_t utf8_next(std::string_view s, std::size_t i, char32_t* cp);

// Length in bytes of the maximal subpart starting at s[i] that is a prefix of
// some valid sequence (at least 1): the unit that lossy decoding replaces.
std::size_t utf8_invalid_span(std::string_view s, std::size_t i);

void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(char32_t cp);

bool utf8_is_valid(std::string_view s);

// `s` with every maximal invalid subpart replaced by U+FFFD.
std::string utf8_repair(std::string_view s);

// Bytes at the end of `s` that form an incomplete (but so far valid) sequence,
// i.e. the part a streaming decoder must hold back: 0..3.
std::size_t utf8_incomplete_tail(std::string_view s);

}  // namespace cellm::text
