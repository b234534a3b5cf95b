#include "text/utf8.h"

namespace cellm::text {
namespace {

// Valid second-byte range for a lead byte (Unicode table 3-7); the other
// continuation bytes are always 0x80..0xBF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

std::size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// How many bytes from s[i] match a valid prefix of a sequence of length n.
std::size_t valid_prefix(std::string_view s, std::size_t i, std::size_t n) {
  const auto lead = static_cast<unsigned char>(s[i]);
  std::size_t k = 1;
  while (k < n && i + k < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    const bool ok = k == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++k;
  }
  return k;
}

}  // namespace

std::size_t utf8_next(std::string_view s, std::size_t i, char32_t* cp) {
  const auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) {
    *cp = lead;
    return 1;
  }
  const std::size_t n = sequence_length(lead);
  if (n == 0 || i + n > s.size() || valid_prefix(s, i, n) != n) return 0;
  char32_t c = lead & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  *cp = c;
  return n;
}

std::size_t utf8_invalid_span(std::string_view s, std::size_t i) {
  const std::size_t n = sequence_length(static_cast<unsigned char>(s[i]));
  if (n <= 1) return 1;
  return valid_prefix(s, i, n);
}

void utf8_append(std::string& out, char32_t cp) {
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

std::string utf8_encode(char32_t cp) {
  std::string s;
  utf8_append(s, cp);
  return s;
}

bool utf8_is_valid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    char32_t cp;
    const std::size_t n = utf8_next(s, i, &cp);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_repair(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    const std::size_t n = utf8_next(s, i, &cp);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      utf8_append(out, kReplacementChar);
      i += utf8_invalid_span(s, i);
    }
  }
  return out;
}

std::size_t utf8_incomplete_tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80 && b <= 0xBF) continue;  // continuation: keep looking
    const std::size_t n = sequence_length(b);
    if (n > back && valid_prefix(s, i, n) == back) return back;
    return 0;
  }
  return 0;
}

}  // namespace cellm::text
