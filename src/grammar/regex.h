// Regular expressions → Grammar: the whole output must match (anchors are
// implied, as with Python's re.fullmatch). The subset, documented for users:
//
//   literals        any UTF-8 text; \ before punctuation makes it literal
//   escapes         \n \t \r \f \v \xHH \uHHHH \UHHHHHHHH
//   classes         [abc] [a-z] [^...] (a ']' first is a member), and
//                   \d [0-9], \w [A-Za-z0-9_], \s [ \t\n\r\f\v] with their
//                   negations \D \W \S (ASCII meanings), inside classes too
//   .               any character except a newline
//   alternation     a|b
//   groups          (...) (?:...) (?P<name>...) (?<name>...) (names ignored)
//   repetition      * + ? {m} {m,} {,n} {m,n} (bounds up to 1000); a lazy
//                   suffix ? is accepted and changes nothing (the language
//                   is the same)
//   anchors         ^ first and $ last are accepted and change nothing
//
// Refused with an error naming the position: backreferences, lookaround,
// inline flags, \b \B \A \Z and other escapes, anchors elsewhere, a
// quantifier with nothing to repeat or after another quantifier.
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string_view>

#include "cellm/status.h"
#include "grammar/grammar.h"
#include "grammar/pattern.h"

namespace cellm::grammar {

// The syntax tree (tests); InvalidArgument "line L, column C: what".
Result<Pattern> parse_regex(std::string_view source);
// The grammar whose language is the regex's.
Result<std::shared_ptr<const Grammar>> compile_regex(std::string_view source);

}  // namespace cellm::grammar
