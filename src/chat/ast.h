// The parsed form of a chat template: expression and statement trees. Every
// node keeps its source position so that render errors name line:column.
//
// Thread-safety: immutable after parsing; many renders may share one tree.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/lexer.h"
#include "chat/value.h"

namespace cellm::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : std::uint8_t {
  kLiteral,    // literal
  kName,       // name
  kList,       // args
  kTuple,      // args
  kDict,       // args: key0, value0, key1, value1, ...
  kAttr,       // args[0] . name
  kItem,       // args[0] [ args[1] ]
  kSlice,      // args[0] [ args[1] : args[2] : args[3] ] (null = omitted)
  kCall,       // args[0] ( args[1..], kwargs )
  kFilter,     // args[0] | name ( args[1..], kwargs )
  kTest,       // args[0] is [not] name ( args[1..], kwargs ); negated
  kUnary,      // op args[0]: "not", "-", "+"
  kBinary,     // args[0] op args[1]: + - * / // % ** ~ and or
  kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondition,  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  SourcePos pos;
  Value literal;
  std::string name;              // name, attribute, filter/test name or operator
  std::vector<std::string> ops;  // comparison operators
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  bool negated = false;
  int height = 1;  // longest path to a leaf, bounded by kMaxNesting
};

enum class StmtKind : std::uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // conditions[i] → bodies[i]; else_body
  kFor,          // targets in expr [if condition]; body; else_body
  kSet,          // targets = expr
  kSetAttr,      // targets[0].attribute = expr
  kSetBlock,     // targets[0] = rendered body
  kMacro,        // name(params) body
  kFilterBlock,  // body rendered then passed through expr (a filter chain over kName "")
  kWith,         // assignments; body
  kBreak,
  kContinue,
  kGeneration,  // transformers' {% generation %}: renders its body
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: none given
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  SourcePos pos;
  std::string text;
  std::string attribute;
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  bool has_else = false;
  std::vector<MacroParam> params;
  std::vector<std::pair<std::string, ExprPtr>> assignments;
  bool uses_varargs = false;
  bool uses_kwargs = false;
};

}  // namespace cellm::chat
