// Template lexer: turns Jinja source into one token stream (text data, tag
// delimiters and expression tokens), applying whitespace control the way
// transformers configures Jinja: trim_blocks and lstrip_blocks on, `-` strips
// all whitespace on its side, `+` keeps it, one trailing newline is dropped.
//
// Thread-safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"

namespace cellm::chat {

struct SourcePos {
  std::uint32_t line = 1;
  std::uint32_t column = 1;  // in code points, 1-based
};

enum class TokenKind : std::uint8_t {
  kText,        // template data (text holds it)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kInt,
  kFloat,
  kString,
  kOperator,  // text holds the operator: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;  // data, name, decoded string literal or operator
  std::int64_t int_value = 0;
  double float_value = 0.0;
  SourcePos pos;
};

// Errors name the line and column: "chat template 3:14: unterminated string".
Result<std::vector<Token>> lex_template(std::string_view source);

// "chat template 3:14: <message>", the prefix every template error carries.
std::string located(SourcePos pos, std::string_view message);

}  // namespace cellm::chat
