#include "grammar/pattern_scan.h"

#include <cctype>
#include <utility>

#include <fmt/format.h>

namespace cellm::grammar {

bool PatternScanner::fail(std::size_t offset, std::string what) {
  if (error_.is_ok()) {
    error_ = invalid_argument("{}: {}", source_position(src_, offset), what);
  }
  return false;
}

bool PatternScanner::character(char32_t* cp) {
  if (at_end()) return fail(pos_, "the text ends too early");
  if (!decode_utf8(src_, &pos_, cp)) return fail(pos_, "malformed UTF-8");
  return true;
}

bool PatternScanner::hex(int digits, std::size_t at, char32_t* cp) {
  char32_t v = 0;
  for (int i = 0; i < digits; ++i) {
    const char c = peek();
    if (!std::isxdigit(static_cast<unsigned char>(c))) {
      return fail(at, fmt::format("the escape needs {} hexadecimal digits", digits));
    }
    v = v * 16 +
        static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(c))
                                  ? c - '0'
                                  : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
    skip();
  }
  if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) {
    return fail(at, fmt::format("the escape names U+{:X}, which is not a character",
                                static_cast<std::uint32_t>(v)));
  }
  *cp = v;
  return true;
}

bool PatternScanner::escape(bool* is_set, char32_t* cp, std::vector<CodeRange>* set) {
  const std::size_t at = pos_;
  skip();  // the backslash
  if (at_end()) return fail(at, "a backslash ends the text: escape what?");
  const char c = peek();
  skip();
  *is_set = false;
  switch (c) {
    case 'n': *cp = '\n'; return true;
    case 't': *cp = '\t'; return true;
    case 'r': *cp = '\r'; return true;
    case 'f': *cp = '\f'; return true;
    case 'v': *cp = '\v'; return true;
    case 'x': return hex(2, at, cp);
    case 'u': return hex(4, at, cp);
    case 'U': return hex(8, at, cp);
    default: break;
  }
  if (shorthands_) {
    std::vector<CodeRange> r;
    const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == 'd') r = {{'0', '9'}};
    if (lower == 'w') r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    if (lower == 's') r = {{'\t', '\r'}, {' ', ' '}};
    if (!r.empty()) {
      *is_set = true;
      *set = c == lower ? normalize_ranges(std::move(r)) : complement_ranges(r);
      return true;
    }
  }
  if (std::isalnum(static_cast<unsigned char>(c))) {
    return fail(at, fmt::format("unsupported escape '\\{}' (supported: \\n \\t \\r \\f \\v "
                                "\\xHH \\uHHHH \\UHHHHHHHH{}, and a backslash before punctuation)",
                                c, shorthands_ ? R"( \d \D \w \W \s \S)" : ""));
  }
  if (static_cast<unsigned char>(c) >= 0x80) {
    return fail(at, "a backslash before a non-ASCII character; write the character itself");
  }
  *cp = static_cast<unsigned char>(c);
  return true;
}

bool PatternScanner::char_class(std::vector<CodeRange>* ranges) {
  const std::size_t open = pos_;
  skip();  // '['
  const bool negate = peek() == '^';
  if (negate) skip();
  std::vector<CodeRange> set;
  bool first = true;
  // One member: a character or (with shorthands) a class escape.
  auto member = [&](bool* is_set, char32_t* cp, std::vector<CodeRange>* members) {
    if (peek() == '\\') return escape(is_set, cp, members);
    *is_set = false;
    return character(cp);
  };
  while (true) {
    if (at_end()) return fail(open, "the character class '[' is never closed by ']'");
    // A ']' first is a member (as in Python and POSIX), else the end.
    if (peek() == ']' && !first) {
      skip();
      break;
    }
    first = false;
    const std::size_t at = pos_;
    bool is_set = false;
    char32_t lo = 0;
    std::vector<CodeRange> members;
    if (!member(&is_set, &lo, &members)) return false;
    if (is_set) {
      set.insert(set.end(), members.begin(), members.end());
      continue;
    }
    if (peek() == '-' && peek(1) != ']' && pos_ + 1 < src_.size()) {
      skip();
      char32_t hi = 0;
      if (!member(&is_set, &hi, &members)) return false;
      if (is_set) return fail(at, "a range in a character class cannot end in a class escape");
      if (hi < lo) {
        return fail(at,
                    fmt::format("the range U+{:04X}-U+{:04X} in a character class runs "
                                "backwards",
                                static_cast<std::uint32_t>(lo), static_cast<std::uint32_t>(hi)));
      }
      set.emplace_back(lo, hi);
    } else {
      set.emplace_back(lo, lo);
    }
  }
  *ranges = negate ? complement_ranges(set) : normalize_ranges(std::move(set));
  // Surrogates are no characters: a class of nothing else matches nothing.
  bool any = false;
  for (const CodeRange& r : *ranges) any = any || r.first < 0xD800 || r.second > 0xDFFF;
  if (!any) return fail(open, "the character class matches no character");
  return true;
}

bool PatternScanner::number(std::uint32_t* out) {
  std::uint64_t v = 0;
  const std::size_t start = pos_;
  while (std::isdigit(static_cast<unsigned char>(peek()))) {
    v = v * 10 + static_cast<std::uint64_t>(peek() - '0');
    if (v > kMaxRepeatBound) {
      return fail(start,
                  fmt::format("a repetition bound above {} is not supported", kMaxRepeatBound));
    }
    skip();
  }
  *out = static_cast<std::uint32_t>(v);
  return pos_ > start;
}

bool PatternScanner::bound(std::uint32_t* min, std::uint32_t* max) {
  const std::size_t open = pos_;
  skip();  // '{'
  const char* form = "a repetition bound is {m}, {m,}, {,n} or {m,n} with decimal m and n";
  const bool has_min = number(min);
  if (failed()) return false;
  if (!has_min) *min = 0;
  if (peek() == '}') {
    if (!has_min) return fail(open, form);
    skip();
    *max = *min;
    return true;
  }
  if (peek() != ',') return fail(open, form);
  skip();
  const bool has_max = number(max);
  if (failed()) return false;
  if (peek() != '}') return fail(open, form);
  skip();
  if (!has_max) {
    if (!has_min) return fail(open, form);
    *max = kUnbounded;
  } else if (*max < *min) {
    return fail(open, fmt::format("the repetition bound {{{},{}}} has its maximum below its "
                                  "minimum",
                                  *min, *max));
  }
  return true;
}

Status PatternScanner::check_size(std::string_view form) const {
  if (src_.size() > kMaxPatternSourceBytes) {
    return invalid_argument("the {} is {} bytes; at most {} are supported", form, src_.size(),
                            kMaxPatternSourceBytes);
  }
  return Status::ok();
}

bool PatternScanner::alternatives(int depth, Pattern* out,
                                  const std::function<bool(Pattern*)>& sequence) {
  if (depth > kMaxPatternNesting) {
    return fail(pos_, fmt::format("groups nest deeper than {}", kMaxPatternNesting));
  }
  out->kind = Pattern::Kind::kAlt;
  out->offset = pos_;
  while (true) {
    Pattern seq;
    if (!sequence(&seq)) return false;
    out->children.push_back(std::move(seq));
    if (at_end() || peek() != '|') break;
    skip();
  }
  if (out->children.size() == 1) {
    Pattern only = std::move(out->children[0]);
    *out = std::move(only);
  }
  return true;
}

bool PatternScanner::quantifier(Pattern* item, const std::function<void()>& after,
                                std::string_view example) {
  std::uint32_t min = 0;
  std::uint32_t max = 0;
  switch (peek()) {
    case '*': min = 0, max = kUnbounded, skip(); break;
    case '+': min = 1, max = kUnbounded, skip(); break;
    case '?': min = 0, max = 1, skip(); break;
    case '{':
      if (!bound(&min, &max)) return false;
      break;
    default: return true;
  }
  after();
  if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
    return fail(pos_,
                fmt::format("a quantifier cannot follow another; group first, e.g. {}", example));
  }
  Pattern body = std::move(*item);
  *item = Pattern{};
  item->kind = Pattern::Kind::kRepeat;
  item->offset = body.offset;
  item->min = min;
  item->max = max;
  item->children.push_back(std::move(body));
  return true;
}

}  // namespace cellm::grammar
