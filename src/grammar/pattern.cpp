#include "grammar/pattern.h"

#include <algorithm>

#include <fmt/format.h>

namespace cellm::grammar {

std::string source_position(std::string_view source, std::size_t offset) {
  offset = std::min(offset, source.size());
  std::size_t line = 1;
  std::size_t column = 1;
  for (std::size_t i = 0; i < offset; ++i) {
    if (source[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return fmt::format("line {}, column {}", line, column);
}

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<CodeRange> out;
  for (const CodeRange& r : ranges) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges) {
  std::vector<CodeRange> out;
  char32_t next = 0;
  for (const CodeRange& r : normalize_ranges(ranges)) {
    if (r.first > next) out.emplace_back(next, r.first - 1);
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

bool decode_utf8(std::string_view s, std::size_t* pos, char32_t* cp) {
  const std::size_t at = *pos;
  if (at >= s.size()) return false;
  const auto b0 = static_cast<std::uint8_t>(s[at]);
  int len = 0;
  char32_t value = 0;
  char32_t min = 0;
  if (b0 < 0x80) {
    *cp = b0;
    *pos = at + 1;
    return true;
  }
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, value = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, value = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, value = b0 & 0x07, min = 0x10000;
  } else {
    return false;
  }
  if (at + len > s.size()) return false;
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<std::uint8_t>(s[at + i]);
    if ((b & 0xC0) != 0x80) return false;
    value = (value << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not characters.
  if (value < min || value > kMaxCodePoint || (value >= 0xD800 && value <= 0xDFFF)) return false;
  *cp = value;
  *pos = at + len;
  return true;
}

bool pattern_nullable(const Pattern& p, const std::vector<bool>& rule_nullable) {
  switch (p.kind) {
    case Pattern::Kind::kEmpty: return true;
    case Pattern::Kind::kLiteral: return p.text.empty();
    case Pattern::Kind::kClass: return false;
    case Pattern::Kind::kRef: return rule_nullable[p.rule];
    case Pattern::Kind::kSeq:
      return std::all_of(p.children.begin(), p.children.end(),
                         [&](const Pattern& c) { return pattern_nullable(c, rule_nullable); });
    case Pattern::Kind::kAlt:
      return std::any_of(p.children.begin(), p.children.end(),
                         [&](const Pattern& c) { return pattern_nullable(c, rule_nullable); });
    case Pattern::Kind::kRepeat:
      return p.min == 0 || pattern_nullable(p.children[0], rule_nullable);
  }
  return false;
}

void PatternEmitter::code_points(NodeId from, NodeId to, char32_t lo, char32_t hi) {
  if (lo > hi) return;
  // Surrogates have no UTF-8 form.
  if (lo <= 0xDFFF && hi >= 0xD800) {
    if (lo < 0xD800) code_points(from, to, lo, 0xD7FF);
    if (hi > 0xDFFF) code_points(from, to, 0xE000, hi);
    return;
  }
  // One encoded length at a time.
  for (char32_t edge : {char32_t{0x7F}, char32_t{0x7FF}, char32_t{0xFFFF}}) {
    if (lo <= edge && hi > edge) {
      code_points(from, to, lo, edge);
      code_points(from, to, edge + 1, hi);
      return;
    }
  }
  const int len = hi < 0x80 ? 1 : hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  // Split until every byte position ranges independently: then the
  // characters of [lo, hi] are exactly the byte sequences whose k-th byte
  // lies between the k-th bytes of lo and hi.
  for (int i = 1; i < len; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        code_points(from, to, lo, lo | m);
        code_points(from, to, (lo | m) + 1, hi);
        return;
      }
      if ((hi & m) != m) {
        code_points(from, to, lo, (hi & ~m) - 1);
        code_points(from, to, hi & ~m, hi);
        return;
      }
    }
  }
  std::string a;
  std::string z;
  append_utf8(a, lo);
  append_utf8(z, hi);
  NodeId at = from;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const NodeId next = k + 1 == a.size() ? to : fresh(from);
    b_.bytes(at, static_cast<std::uint8_t>(a[k]), static_cast<std::uint8_t>(z[k]), next);
    at = next;
  }
}

Status PatternEmitter::budget(const Pattern& p) const {
  if (b_.node_count() <= kMaxPatternBuilderNodes) return Status::ok();
  return invalid_argument(
      "the grammar is too large to compile (at {}): it unrolls past {} automaton nodes; lower "
      "the {{m,n}} bounds or nest fewer repetitions",
      source_position(source_, p.offset), kMaxPatternBuilderNodes);
}

Status PatternEmitter::emit(const Pattern& p, NodeId from, NodeId to) {
  CELLM_RETURN_IF_ERROR(budget(p));
  switch (p.kind) {
    case Pattern::Kind::kEmpty: b_.epsilon(from, to); return Status::ok();
    case Pattern::Kind::kLiteral: b_.literal(from, p.text, to); return Status::ok();
    case Pattern::Kind::kClass:
      for (const CodeRange& r : p.ranges) code_points(from, to, r.first, r.second);
      return Status::ok();
    case Pattern::Kind::kRef: b_.call(from, rules_[p.rule], to); return Status::ok();
    case Pattern::Kind::kSeq: {
      if (p.children.empty()) {
        b_.epsilon(from, to);
        return Status::ok();
      }
      NodeId at = from;
      for (std::size_t i = 0; i < p.children.size(); ++i) {
        const NodeId next = i + 1 == p.children.size() ? to : fresh(from);
        CELLM_RETURN_IF_ERROR(emit(p.children[i], at, next));
        at = next;
      }
      return Status::ok();
    }
    case Pattern::Kind::kAlt:
      for (const Pattern& c : p.children) CELLM_RETURN_IF_ERROR(emit(c, from, to));
      return Status::ok();
    case Pattern::Kind::kRepeat: {
      const Pattern& body = p.children[0];
      NodeId at = from;
      for (std::uint32_t i = 0; i < p.min; ++i) {
        const NodeId next = i + 1 == p.min && p.max == p.min ? to : fresh(from);
        CELLM_RETURN_IF_ERROR(emit(body, at, next));
        at = next;
      }
      if (p.max == kUnbounded) {
        // A fresh loop node: looping on `at` itself could leak into
        // whatever else starts there.
        const NodeId loop = fresh(from);
        b_.epsilon(at, loop);
        CELLM_RETURN_IF_ERROR(emit(body, loop, loop));
        b_.epsilon(loop, to);
        return Status::ok();
      }
      if (p.max == p.min) {
        if (p.min == 0) b_.epsilon(from, to);
        return Status::ok();
      }
      for (std::uint32_t i = p.min; i < p.max; ++i) {
        b_.epsilon(at, to);
        const NodeId next = i + 1 == p.max ? to : fresh(from);
        CELLM_RETURN_IF_ERROR(emit(body, at, next));
        at = next;
      }
      return Status::ok();
    }
  }
  return Status::ok();
}

}  // namespace cellm::grammar
