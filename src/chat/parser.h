// Template parser: token stream → statement tree. Unknown filters, tests and
// tags, and the Jinja features this interpreter leaves out (include, extends,
// call blocks, recursive loops, ...), are refused here with their position,
// so a template that parses is one that renders as Jinja would.
//
// Thread-safety: pure function.
#pragma once

#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace cellm::chat {

// Nesting bounds: statements and expressions deeper than this are refused
// (real templates nest a handful of levels; this keeps recursion bounded).
inline constexpr int kMaxNesting = 128;

Result<Body> parse_template(std::vector<Token> tokens);

}  // namespace cellm::chat
