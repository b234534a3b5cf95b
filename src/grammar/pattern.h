// Pattern: the small syntax tree that the user-written grammar forms (EBNF in
// ebnf.h, regular expressions in regex.h) parse into, and its emission into a
// GrammarBuilder, the same pushdown automaton the JSON-schema compiler builds.
// Text is UTF-8: literals are byte strings, character classes are sets of
// code points that the emitter spells out as UTF-8 byte sequences (so `.` and
// `[^"]` accept whole characters, never a lone continuation byte, a
// surrogate or a value past U+10FFFF).
//
// Emission keeps one invariant that lets pieces share nodes without leaking
// paths into each other: a piece emitted between `from` and `to` adds no
// edge into `from` and none out of `to` (loops get a fresh node).
//
// Thread-safety: pure data and functions; a PatternEmitter belongs to one
// thread (it writes one GrammarBuilder).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cellm/status.h"
#include "grammar/grammar.h"

namespace cellm::grammar {

// Limits shared by both forms (bounding compile time and memory).
inline constexpr std::size_t kMaxPatternSourceBytes = 64 * 1024;
// Parentheses (and rule bodies) nested deeper than this are refused.
inline constexpr int kMaxPatternNesting = 128;
// Bounds in {m,n} above this are refused.
inline constexpr std::uint32_t kMaxRepeatBound = 1000;
// Automaton nodes a pattern may create before epsilon removal.
inline constexpr std::size_t kMaxPatternBuilderNodes = 200000;

inline constexpr char32_t kMaxCodePoint = 0x10FFFF;
inline constexpr std::uint32_t kUnbounded = ~std::uint32_t{0};

using CodeRange = std::pair<char32_t, char32_t>;  // inclusive

struct Pattern {
  enum class Kind : std::uint8_t {
    kEmpty,    // matches ""
    kLiteral,  // `text`, byte for byte
    kClass,    // one code point in `ranges`
    kRef,      // a call of rule `rule` (EBNF)
    kSeq,      // `children` one after another
    kAlt,      // one of `children`
    kRepeat,   // children[0] between `min` and `max` times (max may be kUnbounded)
  };
  Kind kind = Kind::kEmpty;
  std::string text;
  std::vector<CodeRange> ranges;  // sorted, disjoint, not adjacent
  std::uint32_t rule = 0;
  std::vector<Pattern> children;
  std::uint32_t min = 0;
  std::uint32_t max = 0;
  std::size_t offset = 0;  // where it starts in the source (errors)
};

// "line L, column C" of a byte offset (columns count bytes, from 1).
std::string source_position(std::string_view source, std::size_t offset);

// Sorts and merges ranges; the complement within [0, U+10FFFF].
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges);
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges);

// Appends the UTF-8 encoding of `cp` (<= U+10FFFF).
void append_utf8(std::string& out, char32_t cp);
// Decodes one UTF-8 character at `*pos` of `s` and advances; false for a
// malformed sequence (pos unchanged).
bool decode_utf8(std::string_view s, std::size_t* pos, char32_t* cp);

// Whether a pattern matches the empty string, given which rules can.
bool pattern_nullable(const Pattern& p, const std::vector<bool>& rule_nullable);

class PatternEmitter {
 public:
  // `rules`: the builder rule of each Pattern rule index (kRef targets).
  // `source` only words errors.
  PatternEmitter(GrammarBuilder& b, std::vector<RuleId> rules, std::string_view source)
      : b_(b), rules_(std::move(rules)), source_(source) {}

  // `p` between two nodes of one rule; InvalidArgument when the automaton
  // would grow past kMaxPatternBuilderNodes.
  Status emit(const Pattern& p, NodeId from, NodeId to);

 private:
  NodeId fresh(NodeId near) { return b_.node(b_.rule_of(near)); }
  void code_points(NodeId from, NodeId to, char32_t lo, char32_t hi);
  Status budget(const Pattern& p) const;

  GrammarBuilder& b_;
  std::vector<RuleId> rules_;
  std::string_view source_;
};

}  // namespace cellm::grammar
