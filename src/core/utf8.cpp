#include "core/utf8.h"

#include <algorithm>

namespace cellm::utf8 {
namespace {

bool is_continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// The second byte's range narrows for some lead bytes (Unicode table 3-7):
// that is what excludes overlongs, surrogates and code points past U+10FFFF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return is_continuation(b);
  }
}

// 0 for a byte that can never start a sequence.
std::size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// How many bytes from s[i] form a valid prefix of a sequence of length n.
std::size_t valid_prefix(std::string_view s, std::size_t i, std::size_t n) {
  const auto lead = static_cast<unsigned char>(s[i]);
  std::size_t k = 1;
  while (k < n && i + k < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (!(k == 1 ? second_byte_ok(lead, b) : is_continuation(b))) break;
    ++k;
  }
  return k;
}

}  // namespace

std::size_t decode(std::string_view s, std::size_t i, char32_t* cp) {
  const auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) {
    *cp = lead;
    return 1;
  }
  const std::size_t n = sequence_length(lead);
  if (n == 0 || i + n > s.size() || valid_prefix(s, i, n) != n) return 0;
  char32_t c = lead & (0x7FU >> n);
  for (std::size_t k = 1; k < n; ++k) {
    c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3FU);
  }
  *cp = c;
  return n;
}

std::size_t invalid_span(std::string_view s, std::size_t i) {
  const std::size_t n = sequence_length(static_cast<unsigned char>(s[i]));
  if (n <= 1) return 1;
  return valid_prefix(s, i, n);
}

char32_t next(std::string_view s, std::size_t& i) {
  char32_t cp = 0;
  const std::size_t n = decode(s, i, &cp);
  if (n == 0) {
    i += invalid_span(s, i);
    return kReplacementChar;
  }
  i += n;
  return cp;
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(char32_t cp) {
  std::string s;
  append(s, cp);
  return s;
}

std::optional<std::size_t> find_invalid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp = 0;
    const std::size_t n = decode(s, i, &cp);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

bool is_valid(std::string_view s) {
  return !find_invalid(s).has_value();
}

std::string repair(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t cp = 0;
    const std::size_t n = decode(s, i, &cp);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      append(out, kReplacementChar);
      i += invalid_span(s, i);
    }
  }
  return out;
}

std::size_t incomplete_tail(std::string_view s) {
  // Only the last 3 bytes can hold the start of an unfinished sequence.
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if (is_continuation(b)) continue;
    const std::size_t n = sequence_length(b);
    if (n > back && valid_prefix(s, i, n) == back) return back;
    return 0;
  }
  return 0;
}

std::vector<std::size_t> boundaries(std::string_view s) {
  std::vector<std::size_t> out;
  out.reserve(s.size() + 1);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (!is_continuation(static_cast<unsigned char>(s[i]))) out.push_back(i);
  }
  out.push_back(s.size());
  return out;
}

std::size_t length(std::string_view s) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return !is_continuation(static_cast<unsigned char>(c)); }));
}

}  // namespace cellm::utf8
