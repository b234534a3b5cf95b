// PatternScanner: the pieces the EBNF and regex parsers share: a cursor
// over the UTF-8 source, backslash escapes, bracketed character classes,
// {m,n} bounds, the '|' alternation and the quantifiers that wrap an item
// (each form supplying its own sequences and what may follow a quantifier),
// and errors that say where ("line L, column C") and what was wrong. Parsers
// stop at the first error (the first fail() wins).
//
// Thread-safety: a scanner belongs to one parse (one thread).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"
#include "grammar/pattern.h"

namespace cellm::grammar {

class PatternScanner {
 public:
  // `shorthands`: whether \d \w \s (and \D \W \S) name classes (the regex
  // form); the EBNF form has none.
  PatternScanner(std::string_view source, bool shorthands)
      : src_(source), shorthands_(shorthands) {}

  bool at_end() const { return pos_ >= src_.size(); }
  char peek(std::size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  std::size_t pos() const { return pos_; }
  void skip(std::size_t n = 1) { pos_ += n; }
  std::string_view source() const { return src_; }

  // Records the first error; always false (so `return fail(...)` reads well).
  bool fail(std::size_t offset, std::string what);
  bool failed() const { return !error_.is_ok(); }
  const Status& error() const { return error_; }

  // One UTF-8 character at the cursor.
  bool character(char32_t* cp);
  // A backslash escape at the cursor: a single character (*is_set false,
  // *cp set) or, with shorthands, a class (*is_set true, *set filled).
  bool escape(bool* is_set, char32_t* cp, std::vector<CodeRange>* set);
  // A bracketed class at the cursor ('['), `[^...]` complemented.
  bool char_class(std::vector<CodeRange>* ranges);
  // A {m}, {m,}, {,n} or {m,n} bound at the cursor ('{'); max may be kUnbounded.
  bool bound(std::uint32_t* min, std::uint32_t* max);

  // InvalidArgument when the source is longer than kMaxPatternSourceBytes;
  // `form` names it ("grammar", "regex").
  Status check_size(std::string_view form) const;
  // Sequences separated by '|' from the cursor, each read by `sequence`,
  // into *out: a kAlt of them, or the only one itself. Refuses nesting
  // deeper than kMaxPatternNesting.
  bool alternatives(int depth, Pattern* out, const std::function<bool(Pattern*)>& sequence);
  // A quantifier at the cursor (*, +, ? or a bound) wraps *item in a
  // kRepeat; with none, *item stays as it is. `after` runs once past the
  // quantifier (what the form allows there: the EBNF's spaces, the regex's
  // lazy '?'); another quantifier then is refused, `example` showing how to
  // group.
  bool quantifier(Pattern* item, const std::function<void()>& after, std::string_view example);

 private:
  bool hex(int digits, std::size_t at, char32_t* cp);
  bool number(std::uint32_t* out);

  std::string_view src_;
  bool shorthands_;
  std::size_t pos_ = 0;
  Status error_;
};

}  // namespace cellm::grammar
