// EBNF grammars → Grammar. The form is close to llama.cpp's GBNF, so grammars
// written for llama-server mostly work unchanged:
//
//   # a comment runs to the end of the line
//   root   ::= answer ("," ws answer)*       # the output matches `root`
//   answer ::= "yes" | "no" | [0-9]{1,3}
//   ws     ::= [ \t\n]*
//
//   name ::= alternatives   a rule; names are [A-Za-z_][A-Za-z0-9_-]*; a
//                           rule ends where the next `name ::=` begins, so
//                           alternatives may span lines
//   "text" or 'text'        a literal, with escapes \n \t \r \f \v \\ \" \'
//                           \xHH \uHHHH \UHHHHHHHH (no raw newline inside)
//   [a-z0-9_] [^"\\]        a character class of code points (UTF-8); a ']'
//                           first is a member, '-' first or last is literal
//   .                       any character (newline included)
//   name                    a reference to a rule (defined anywhere)
//   ( ... )                 grouping;  a | b  alternation
//   x* x+ x? x{m} x{m,} x{,n} x{m,n}   repetition (bounds up to 1000)
//
// Refused with an error that names the line and column: syntax errors,
// undefined or duplicate rules, a missing `root`, and left recursion (a rule
// that can reach itself before matching any text, e.g. expr ::= expr "+" t):
// the error names the cycle of rules; rewrite it with repetition
// (expr ::= t ("+" t)*). Size is bounded: 64 KiB of source, nesting 128,
// and the automaton's node limits (grammar.h, pattern.h).
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"
#include "grammar/grammar.h"
#include "grammar/pattern.h"

namespace cellm::grammar {

struct EbnfRule {
  std::string name;
  Pattern body;
  std::size_t offset = 0;  // where the definition starts
};

struct EbnfGrammar {
  std::vector<EbnfRule> rules;  // kRef patterns index this list
  std::size_t root = 0;         // the rule named "root"
};

// The parsed rules (tests); InvalidArgument "line L, column C: what".
Result<EbnfGrammar> parse_ebnf(std::string_view source);
// The grammar whose language is the `root` rule's.
Result<std::shared_ptr<const Grammar>> compile_ebnf(std::string_view source);

}  // namespace cellm::grammar
