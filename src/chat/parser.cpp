#include "chat/parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/builtins.h"

namespace cellm::chat {
namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kText: return "template text";
    case TokenKind::kVarBegin: return "'{{'";
    case TokenKind::kVarEnd: return "'}}'";
    case TokenKind::kBlockBegin: return "'{%'";
    case TokenKind::kBlockEnd: return "'%}'";
    case TokenKind::kName: return "'" + t.text + "'";
    case TokenKind::kInt: return "integer " + std::to_string(t.int_value);
    case TokenKind::kFloat: return "a number";
    case TokenKind::kString: return "a string";
    case TokenKind::kOperator: return "'" + t.text + "'";
    case TokenKind::kEof: return "the end of the template";
  }
  return "?";
}

std::string quote_tags(std::initializer_list<std::string_view> tags) {
  std::string out;
  for (std::string_view t : tags) {
    if (!out.empty()) out += ", ";
    out += fmt::format("'{{% {} %}}'", t);
  }
  return out;
}

constexpr std::string_view kUnsupportedTags[] = {"extends", "block",     "include", "import",
                                                 "from",    "call",      "do",      "autoescape",
                                                 "trans",   "pluralize", "endcall", "endblock"};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Result<Body> parse() {
    CELLM_ASSIGN_OR_RETURN(Body body, statements({}, "", SourcePos{}));
    return body;
  }

 private:
  // ---- token helpers -------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& peek(std::size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool at_op(std::string_view op) const {
    return cur().kind == TokenKind::kOperator && cur().text == op;
  }
  bool at_name(std::string_view name) const {
    return cur().kind == TokenKind::kName && cur().text == name;
  }
  static Status error(const Token& at, std::string_view message) {
    return invalid_argument("{}", located(at.pos, message));
  }
  static Status unsupported(const Token& at, std::string_view message) {
    return not_supported("{}", located(at.pos, message));
  }
  Status expect_op(std::string_view op, std::string_view context) {
    if (!at_op(op)) {
      return error(cur(), fmt::format("expected '{}' {}, found {}", op, context, describe(cur())));
    }
    advance();
    return Status::ok();
  }
  Status expect_block_end(std::string_view tag) {
    if (cur().kind != TokenKind::kBlockEnd) {
      return error(
          cur(), fmt::format("expected '%}}' to end '{{% {} %}}', found {}", tag, describe(cur())));
    }
    advance();
    return Status::ok();
  }
  Result<std::string> expect_name(std::string_view context) {
    if (cur().kind != TokenKind::kName) {
      return error(cur(), fmt::format("expected a name {}, found {}", context, describe(cur())));
    }
    std::string name = cur().text;
    advance();
    return name;
  }

  // Bounds parser recursion (nested blocks, parentheses, unary chains).
  struct Nest {
    explicit Nest(int& d) : depth(d) { ++depth; }
    ~Nest() { --depth; }
    int& depth;
  };
  Status check_nesting(const Token& at) const {
    if (depth_ > kMaxNesting) {
      return error(at, fmt::format("template nests deeper than {} levels", kMaxNesting));
    }
    return Status::ok();
  }

  static ExprPtr node(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }
  // Records the height of a finished node; refuses trees too deep to walk
  // recursively (long operator chains build deep trees without recursion).
  static Result<ExprPtr> finish(ExprPtr e) {
    int h = 0;
    for (const auto& a : e->args) {
      if (a) h = std::max(h, a->height);
    }
    for (const auto& [k, v] : e->kwargs) h = std::max(h, v->height);
    e->height = h + 1;
    if (e->height > kMaxNesting) {
      return invalid_argument(
          "{}",
          located(e->pos, fmt::format("expression nests deeper than {} levels", kMaxNesting)));
    }
    return e;
  }

  // ---- statements ----------------------------------------------------------
  // Parses until one of `ends` opens a block ("{% endfor"), leaving the
  // cursor on that tag name; `ends` empty means until end of input.
  Result<Body> statements(std::initializer_list<std::string_view> ends, std::string_view opener,
                          SourcePos opener_pos) {
    Nest nest(depth_);
    CELLM_RETURN_IF_ERROR(check_nesting(cur()));
    Body body;
    while (true) {
      const Token& tok = cur();
      switch (tok.kind) {
        case TokenKind::kEof:
          if (ends.size() != 0) {
            return error(tok,
                         fmt::format("unexpected end of template: '{{% {} %}}' opened at {}:{} "
                                     "is never closed (expected {})",
                                     opener, opener_pos.line, opener_pos.column, quote_tags(ends)));
          }
          return body;
        case TokenKind::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->pos = tok.pos;
          s->text = tok.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenKind::kVarBegin: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->pos = tok.pos;
          advance();
          CELLM_ASSIGN_OR_RETURN(s->expr, tuple(true, false));
          if (cur().kind != TokenKind::kVarEnd) {
            return error(cur(), fmt::format("expected '}}}}' to end the expression, found {}",
                                            describe(cur())));
          }
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenKind::kBlockBegin: {
          advance();
          const Token& name = cur();
          if (name.kind != TokenKind::kName) {
            return error(name,
                         fmt::format("expected a tag name after '{{%', found {}", describe(name)));
          }
          if (std::find(ends.begin(), ends.end(), std::string_view(name.text)) != ends.end()) {
            return body;
          }
          CELLM_ASSIGN_OR_RETURN(StmtPtr s, statement(ends));
          if (s) body.push_back(std::move(s));
          break;
        }
        case TokenKind::kVarEnd:
        case TokenKind::kBlockEnd:
        case TokenKind::kName:
        case TokenKind::kInt:
        case TokenKind::kFloat:
        case TokenKind::kString:
        case TokenKind::kOperator: return error(tok, fmt::format("unexpected {}", describe(tok)));
      }
    }
  }

  Result<StmtPtr> statement(std::initializer_list<std::string_view> ends) {
    const Token tag = cur();
    const std::string& n = tag.text;
    if (n == "if") return if_stmt();
    if (n == "for") return for_stmt();
    if (n == "set") return set_stmt();
    if (n == "macro") return macro_stmt();
    if (n == "filter") return filter_stmt();
    if (n == "with") return with_stmt();
    if (n == "generation")
      return simple_block(StmtKind::kGeneration, "generation", "endgeneration");
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) return error(tag, fmt::format("'{{% {} %}}' outside of a for loop", n));
      advance();
      CELLM_RETURN_IF_ERROR(expect_block_end(n));
      auto s = std::make_unique<Stmt>();
      s->kind = n == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      s->pos = tag.pos;
      return s;
    }
    for (std::string_view u : kUnsupportedTags) {
      if (n == u) {
        return unsupported(
            tag, fmt::format("the '{{% {} %}}' tag is not supported in chat templates", n));
      }
    }
    if (ends.size() != 0) {
      return error(tag, fmt::format("unexpected '{{% {} %}}' (expected {})", n, quote_tags(ends)));
    }
    return error(tag, fmt::format("unknown or unexpected tag '{{% {} %}}'", n));
  }

  Result<StmtPtr> if_stmt() {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kIf;
    s->pos = cur().pos;
    advance();
    while (true) {
      CELLM_ASSIGN_OR_RETURN(ExprPtr cond, tuple(false, false));
      CELLM_RETURN_IF_ERROR(expect_block_end("if"));
      CELLM_ASSIGN_OR_RETURN(Body body, statements({"elif", "else", "endif"}, "if", s->pos));
      s->conditions.push_back(std::move(cond));
      s->bodies.push_back(std::move(body));
      const std::string tag = cur().text;
      advance();
      if (tag == "elif") continue;
      if (tag == "else") {
        CELLM_RETURN_IF_ERROR(expect_block_end("else"));
        CELLM_ASSIGN_OR_RETURN(s->else_body, statements({"endif"}, "if", s->pos));
        s->has_else = true;
        advance();
      }
      CELLM_RETURN_IF_ERROR(expect_block_end("endif"));
      return s;
    }
  }

  Result<std::vector<std::string>> assign_targets(std::string_view context) {
    std::vector<std::string> names;
    const bool parens = at_op("(");
    if (parens) advance();
    while (true) {
      CELLM_ASSIGN_OR_RETURN(std::string name, expect_name(context));
      names.push_back(std::move(name));
      if (!at_op(",")) break;
      advance();
      if (parens && at_op(")")) break;
    }
    if (parens) CELLM_RETURN_IF_ERROR(expect_op(")", "to close the target list"));
    return names;
  }

  Result<StmtPtr> for_stmt() {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFor;
    s->pos = cur().pos;
    advance();
    CELLM_ASSIGN_OR_RETURN(s->targets, assign_targets("as the loop variable"));
    if (!at_name("in")) {
      return error(cur(), fmt::format("expected 'in' in the for loop, found {}", describe(cur())));
    }
    advance();
    CELLM_ASSIGN_OR_RETURN(s->expr, tuple(false, false));
    if (at_name("if")) {
      advance();
      CELLM_ASSIGN_OR_RETURN(s->condition, expression(true));
    }
    if (at_name("recursive")) return unsupported(cur(), "recursive for loops are not supported");
    CELLM_RETURN_IF_ERROR(expect_block_end("for"));
    ++loop_depth_;
    auto body = statements({"endfor", "else"}, "for", s->pos);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = std::move(body).value();
    if (cur().text == "else") {
      advance();
      CELLM_RETURN_IF_ERROR(expect_block_end("else"));
      CELLM_ASSIGN_OR_RETURN(s->else_body, statements({"endfor"}, "for", s->pos));
      s->has_else = true;
    }
    advance();
    CELLM_RETURN_IF_ERROR(expect_block_end("endfor"));
    return s;
  }

  Result<StmtPtr> set_stmt() {
    auto s = std::make_unique<Stmt>();
    s->pos = cur().pos;
    advance();
    CELLM_ASSIGN_OR_RETURN(std::string first, expect_name("after 'set'"));
    if (at_op(".")) {
      advance();
      CELLM_ASSIGN_OR_RETURN(s->attribute, expect_name("after '.' in 'set'"));
      s->kind = StmtKind::kSetAttr;
      s->targets.push_back(std::move(first));
    } else {
      s->kind = StmtKind::kSet;
      s->targets.push_back(std::move(first));
      while (at_op(",")) {
        advance();
        CELLM_ASSIGN_OR_RETURN(std::string more, expect_name("in the 'set' target list"));
        s->targets.push_back(std::move(more));
      }
    }
    if (at_op("=")) {
      advance();
      CELLM_ASSIGN_OR_RETURN(s->expr, tuple(true, false));
      CELLM_RETURN_IF_ERROR(expect_block_end("set"));
      return s;
    }
    if (s->kind == StmtKind::kSet && s->targets.size() == 1 && cur().kind == TokenKind::kBlockEnd) {
      advance();
      s->kind = StmtKind::kSetBlock;
      CELLM_ASSIGN_OR_RETURN(s->body, statements({"endset"}, "set", s->pos));
      advance();
      CELLM_RETURN_IF_ERROR(expect_block_end("endset"));
      return s;
    }
    if (at_op("|")) return unsupported(cur(), "filters on a '{% set %}' block are not supported");
    return error(cur(), fmt::format("expected '=' in 'set', found {}", describe(cur())));
  }

  Result<StmtPtr> macro_stmt() {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kMacro;
    s->pos = cur().pos;
    advance();
    CELLM_ASSIGN_OR_RETURN(s->text, expect_name("as the macro name"));
    CELLM_RETURN_IF_ERROR(expect_op("(", "after the macro name"));
    while (!at_op(")")) {
      if (!s->params.empty()) CELLM_RETURN_IF_ERROR(expect_op(",", "between macro parameters"));
      if (at_op(")")) break;
      MacroParam p;
      CELLM_ASSIGN_OR_RETURN(p.name, expect_name("as a macro parameter"));
      if (at_op("=")) {
        advance();
        CELLM_ASSIGN_OR_RETURN(p.default_value, expression(true));
      } else if (!s->params.empty() && s->params.back().default_value) {
        return error(cur(), "a macro parameter without a default follows one with a default");
      }
      s->params.push_back(std::move(p));
    }
    advance();
    CELLM_RETURN_IF_ERROR(expect_block_end("macro"));
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    macros_.push_back(s.get());
    auto body = statements({"endmacro"}, "macro", s->pos);
    macros_.pop_back();
    loop_depth_ = saved_loops;
    if (!body.ok()) return body.status();
    s->body = std::move(body).value();
    advance();
    if (cur().kind == TokenKind::kName && cur().text == s->text) advance();
    CELLM_RETURN_IF_ERROR(expect_block_end("endmacro"));
    return s;
  }

  Result<StmtPtr> filter_stmt() {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kFilterBlock;
    s->pos = cur().pos;                             // filter() skips the tag name as it skips '|'
    ExprPtr chain = node(ExprKind::kName, s->pos);  // the name "" stands for the body
    CELLM_ASSIGN_OR_RETURN(chain, filter(std::move(chain)));
    while (at_op("|")) {
      CELLM_ASSIGN_OR_RETURN(chain, filter(std::move(chain)));
    }
    s->expr = std::move(chain);
    CELLM_RETURN_IF_ERROR(expect_block_end("filter"));
    CELLM_ASSIGN_OR_RETURN(s->body, statements({"endfilter"}, "filter", s->pos));
    advance();
    CELLM_RETURN_IF_ERROR(expect_block_end("endfilter"));
    return s;
  }

  Result<StmtPtr> with_stmt() {
    auto s = std::make_unique<Stmt>();
    s->kind = StmtKind::kWith;
    s->pos = cur().pos;
    advance();
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->assignments.empty())
        CELLM_RETURN_IF_ERROR(expect_op(",", "between 'with' assignments"));
      CELLM_ASSIGN_OR_RETURN(std::string name, expect_name("in 'with'"));
      CELLM_RETURN_IF_ERROR(expect_op("=", "in 'with'"));
      CELLM_ASSIGN_OR_RETURN(ExprPtr value, expression(true));
      s->assignments.emplace_back(std::move(name), std::move(value));
    }
    advance();
    CELLM_ASSIGN_OR_RETURN(s->body, statements({"endwith"}, "with", s->pos));
    advance();
    CELLM_RETURN_IF_ERROR(expect_block_end("endwith"));
    return s;
  }

  Result<StmtPtr> simple_block(StmtKind kind, std::string_view tag, std::string_view end) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = cur().pos;
    advance();
    CELLM_RETURN_IF_ERROR(expect_block_end(tag));
    CELLM_ASSIGN_OR_RETURN(s->body, statements({end}, tag, s->pos));
    advance();
    CELLM_RETURN_IF_ERROR(expect_block_end(end));
    return s;
  }

  // ---- expressions ---------------------------------------------------------
  bool at_tuple_end() const {
    return cur().kind == TokenKind::kVarEnd || cur().kind == TokenKind::kBlockEnd || at_op(")") ||
           at_name("recursive") || at_name("if");
  }

  // Comma-separated expressions; a lone one without a comma is not a tuple.
  Result<ExprPtr> tuple(bool with_condition, bool explicit_parens) {
    const SourcePos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) CELLM_RETURN_IF_ERROR(expect_op(",", "between tuple items"));
      if (!items.empty() && (at_tuple_end() || cur().kind == TokenKind::kEof)) break;
      if (items.empty() && explicit_parens && at_op(")")) break;
      CELLM_ASSIGN_OR_RETURN(ExprPtr e, expression(with_condition));
      items.push_back(std::move(e));
      if (at_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple && items.size() == 1) return std::move(items[0]);
    if (items.empty() && !explicit_parens) {
      return error(cur(), fmt::format("expected an expression, found {}", describe(cur())));
    }
    ExprPtr t = node(ExprKind::kTuple, pos);
    t->args = std::move(items);
    return finish(std::move(t));
  }

  Result<ExprPtr> expression(bool with_condition) {
    Nest nest(depth_);
    CELLM_RETURN_IF_ERROR(check_nesting(cur()));
    return with_condition ? condition() : or_expr();
  }

  Result<ExprPtr> condition() {
    CELLM_ASSIGN_OR_RETURN(ExprPtr e, or_expr());
    while (at_name("if")) {
      const SourcePos pos = cur().pos;
      advance();
      CELLM_ASSIGN_OR_RETURN(ExprPtr cond, or_expr());
      ExprPtr otherwise;
      if (at_name("else")) {
        advance();
        CELLM_ASSIGN_OR_RETURN(otherwise, expression(true));
      }
      ExprPtr c = node(ExprKind::kCondition, pos);
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(otherwise));
      CELLM_ASSIGN_OR_RETURN(e, finish(std::move(c)));
    }
    return e;
  }

  Result<ExprPtr> binary(ExprPtr left, std::string op, ExprPtr right, SourcePos pos) {
    ExprPtr b = node(ExprKind::kBinary, pos);
    b->name = std::move(op);
    b->args.push_back(std::move(left));
    b->args.push_back(std::move(right));
    return finish(std::move(b));
  }

  Result<ExprPtr> or_expr() {
    CELLM_ASSIGN_OR_RETURN(ExprPtr e, and_expr());
    while (at_name("or")) {
      const SourcePos pos = cur().pos;
      advance();
      CELLM_ASSIGN_OR_RETURN(ExprPtr r, and_expr());
      CELLM_ASSIGN_OR_RETURN(e, binary(std::move(e), "or", std::move(r), pos));
    }
    return e;
  }

  Result<ExprPtr> and_expr() {
    CELLM_ASSIGN_OR_RETURN(ExprPtr e, not_expr());
    while (at_name("and")) {
      const SourcePos pos = cur().pos;
      advance();
      CELLM_ASSIGN_OR_RETURN(ExprPtr r, not_expr());
      CELLM_ASSIGN_OR_RETURN(e, binary(std::move(e), "and", std::move(r), pos));
    }
    return e;
  }

  Result<ExprPtr> not_expr() {
    if (at_name("not")) {
      Nest nest(depth_);
      CELLM_RETURN_IF_ERROR(check_nesting(cur()));
      ExprPtr u = node(ExprKind::kUnary, cur().pos);
      u->name = "not";
      advance();
      CELLM_ASSIGN_OR_RETURN(ExprPtr operand, not_expr());
      u->args.push_back(std::move(operand));
      return finish(std::move(u));
    }
    return compare();
  }

  Result<ExprPtr> compare() {
    const SourcePos pos = cur().pos;
    CELLM_ASSIGN_OR_RETURN(ExprPtr first, math1());
    ExprPtr c;
    while (true) {
      std::string op;
      if (cur().kind == TokenKind::kOperator &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (at_name("in")) {
        op = "in";
        advance();
      } else if (at_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      CELLM_ASSIGN_OR_RETURN(ExprPtr operand, math1());
      if (!c) {
        c = node(ExprKind::kCompare, pos);
        c->args.push_back(std::move(first));
      }
      c->ops.push_back(std::move(op));
      c->args.push_back(std::move(operand));
    }
    if (!c) return first;
    return finish(std::move(c));
  }

  template <typename Next>
  Result<ExprPtr> left_assoc(std::initializer_list<std::string_view> ops, Next next) {
    CELLM_ASSIGN_OR_RETURN(ExprPtr e, (this->*next)());
    while (cur().kind == TokenKind::kOperator &&
           std::find(ops.begin(), ops.end(), std::string_view(cur().text)) != ops.end()) {
      const SourcePos pos = cur().pos;
      std::string op = cur().text;
      advance();
      CELLM_ASSIGN_OR_RETURN(ExprPtr r, (this->*next)());
      CELLM_ASSIGN_OR_RETURN(e, binary(std::move(e), std::move(op), std::move(r), pos));
    }
    return e;
  }
  Result<ExprPtr> math1() { return left_assoc({"+", "-"}, &Parser::concat); }
  Result<ExprPtr> concat() { return left_assoc({"~"}, &Parser::math2); }
  Result<ExprPtr> math2() { return left_assoc({"*", "/", "//", "%"}, &Parser::power); }
  Result<ExprPtr> power() { return left_assoc({"**"}, &Parser::unary_with_filters); }
  Result<ExprPtr> unary_with_filters() { return unary(true); }

  Result<ExprPtr> unary(bool with_filters) {
    Nest nest(depth_);
    CELLM_RETURN_IF_ERROR(check_nesting(cur()));
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      ExprPtr u = node(ExprKind::kUnary, cur().pos);
      u->name = cur().text;
      advance();
      CELLM_ASSIGN_OR_RETURN(ExprPtr operand, unary(false));
      u->args.push_back(std::move(operand));
      CELLM_ASSIGN_OR_RETURN(e, finish(std::move(u)));
    } else {
      CELLM_ASSIGN_OR_RETURN(e, primary());
    }
    CELLM_ASSIGN_OR_RETURN(e, postfix(std::move(e)));
    if (!with_filters) return e;
    while (true) {
      if (at_op("|")) {
        CELLM_ASSIGN_OR_RETURN(e, filter(std::move(e)));
      } else if (at_name("is")) {
        CELLM_ASSIGN_OR_RETURN(e, test(std::move(e)));
      } else if (at_op("(")) {
        CELLM_ASSIGN_OR_RETURN(e, call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> primary() {
    const Token tok = cur();
    switch (tok.kind) {
      case TokenKind::kName: {
        advance();
        ExprPtr e = node(ExprKind::kLiteral, tok.pos);
        if (tok.text == "true" || tok.text == "True") {
          e->literal = Value::boolean(true);
        } else if (tok.text == "false" || tok.text == "False") {
          e->literal = Value::boolean(false);
        } else if (tok.text == "none" || tok.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = ExprKind::kName;
          e->name = tok.text;
          if (!macros_.empty() && tok.text == "varargs") macros_.back()->uses_varargs = true;
          if (!macros_.empty() && tok.text == "kwargs") macros_.back()->uses_kwargs = true;
        }
        return e;
      }
      case TokenKind::kString: {
        std::string s;
        while (cur().kind == TokenKind::kString) {
          s += cur().text;
          advance();
        }
        ExprPtr e = node(ExprKind::kLiteral, tok.pos);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case TokenKind::kInt:
      case TokenKind::kFloat: {
        advance();
        ExprPtr e = node(ExprKind::kLiteral, tok.pos);
        e->literal = tok.kind == TokenKind::kInt ? Value::integer(tok.int_value)
                                                 : Value::number(tok.float_value);
        return e;
      }
      case TokenKind::kOperator:
        if (tok.text == "(") {
          advance();
          CELLM_ASSIGN_OR_RETURN(ExprPtr e, tuple(true, true));
          CELLM_RETURN_IF_ERROR(expect_op(")", "to close '('"));
          return e;
        }
        if (tok.text == "[" || tok.text == "{") return container(tok.text == "{");
        break;
      case TokenKind::kText:
      case TokenKind::kVarBegin:
      case TokenKind::kVarEnd:
      case TokenKind::kBlockBegin:
      case TokenKind::kBlockEnd:
      case TokenKind::kEof: break;
    }
    return error(tok, fmt::format("expected an expression, found {}", describe(tok)));
  }

  Result<ExprPtr> container(bool is_dict) {
    ExprPtr e = node(is_dict ? ExprKind::kDict : ExprKind::kList, cur().pos);
    const std::string_view close = is_dict ? "}" : "]";
    advance();
    while (!at_op(close)) {
      if (!e->args.empty()) {
        CELLM_RETURN_IF_ERROR(
            expect_op(",", is_dict ? "between dict items" : "between list items"));
        if (at_op(close)) break;
      }
      CELLM_ASSIGN_OR_RETURN(ExprPtr item, expression(true));
      e->args.push_back(std::move(item));
      if (is_dict) {
        CELLM_RETURN_IF_ERROR(expect_op(":", "between a dict key and its value"));
        CELLM_ASSIGN_OR_RETURN(ExprPtr value, expression(true));
        e->args.push_back(std::move(value));
      }
    }
    advance();
    return finish(std::move(e));
  }

  Result<ExprPtr> postfix(ExprPtr e) {
    while (true) {
      if (at_op(".")) {
        const SourcePos pos = cur().pos;
        advance();
        ExprPtr a;
        if (cur().kind == TokenKind::kName) {
          a = node(ExprKind::kAttr, pos);
          a->name = cur().text;
        } else if (cur().kind == TokenKind::kInt) {
          a = node(ExprKind::kItem, pos);
          ExprPtr index = node(ExprKind::kLiteral, cur().pos);
          index->literal = Value::integer(cur().int_value);
          a->args.push_back(nullptr);
          a->args.push_back(std::move(index));
        } else {
          return error(cur(), fmt::format("expected an attribute name after '.', found {}",
                                          describe(cur())));
        }
        advance();
        if (a->args.empty()) {
          a->args.push_back(std::move(e));
        } else {
          a->args[0] = std::move(e);
        }
        CELLM_ASSIGN_OR_RETURN(e, finish(std::move(a)));
      } else if (at_op("[")) {
        CELLM_ASSIGN_OR_RETURN(e, subscript(std::move(e)));
      } else if (at_op("(")) {
        CELLM_ASSIGN_OR_RETURN(e, call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> subscript(ExprPtr target) {
    const SourcePos pos = cur().pos;
    advance();
    ExprPtr parts[3];
    int colons = 0;
    const auto part_end = [&] { return at_op(":") || at_op("]") || at_op(","); };
    if (!part_end()) {
      CELLM_ASSIGN_OR_RETURN(parts[0], expression(true));
    }
    while (at_op(":") && colons < 2) {
      advance();
      ++colons;
      if (!part_end()) {
        CELLM_ASSIGN_OR_RETURN(parts[colons], expression(true));
      }
    }
    if (at_op(",")) return unsupported(cur(), "subscripts with several indices are not supported");
    CELLM_RETURN_IF_ERROR(expect_op("]", "to close '['"));
    if (colons == 0 && !parts[0]) return error(cur(), "empty subscript '[]'");
    ExprPtr e = node(colons == 0 ? ExprKind::kItem : ExprKind::kSlice, pos);
    e->args.push_back(std::move(target));
    e->args.push_back(std::move(parts[0]));
    if (colons > 0) {
      e->args.push_back(std::move(parts[1]));
      e->args.push_back(std::move(parts[2]));
    }
    return finish(std::move(e));
  }

  // Parses "( args )" into e->args (after those already there) and e->kwargs.
  Status call_args(Expr& e) {
    advance();  // '('
    bool first = true;
    while (!at_op(")")) {
      if (!first) {
        CELLM_RETURN_IF_ERROR(expect_op(",", "between call arguments"));
        if (at_op(")")) break;
      }
      first = false;
      if (at_op("*") || at_op("**"))
        return unsupported(cur(), "'*args' and '**kwargs' in calls are not supported");
      if (cur().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
          peek().text == "=") {
        std::string key = cur().text;
        advance();
        advance();
        CELLM_ASSIGN_OR_RETURN(ExprPtr v, expression(true));
        e.kwargs.emplace_back(std::move(key), std::move(v));
      } else {
        if (!e.kwargs.empty())
          return error(cur(), "a positional argument follows a keyword argument");
        CELLM_ASSIGN_OR_RETURN(ExprPtr v, expression(true));
        e.args.push_back(std::move(v));
      }
    }
    advance();
    return Status::ok();
  }

  Result<ExprPtr> call(ExprPtr callee) {
    ExprPtr e = node(ExprKind::kCall, cur().pos);
    e->args.push_back(std::move(callee));
    CELLM_RETURN_IF_ERROR(call_args(*e));
    return finish(std::move(e));
  }

  Result<ExprPtr> filter(ExprPtr input) {
    advance();  // '|' (or 'filter' tag name)
    const Token name = cur();
    CELLM_ASSIGN_OR_RETURN(std::string fname, expect_name("as a filter name"));
    if (find_filter(fname) == nullptr) {
      if (is_known_jinja_filter(fname)) {
        return unsupported(name, fmt::format("the Jinja filter '{}' is not supported", fname));
      }
      return error(name, fmt::format("no filter named '{}'", fname));
    }
    ExprPtr e = node(ExprKind::kFilter, name.pos);
    e->name = std::move(fname);
    e->args.push_back(std::move(input));
    if (at_op("(")) CELLM_RETURN_IF_ERROR(call_args(*e));
    return finish(std::move(e));
  }

  Result<ExprPtr> test(ExprPtr input) {
    advance();  // 'is'
    ExprPtr e = node(ExprKind::kTest, cur().pos);
    if (at_name("not")) {
      e->negated = true;
      advance();
    }
    const Token name = cur();
    CELLM_ASSIGN_OR_RETURN(e->name, expect_name("as a test name after 'is'"));
    if (find_test(e->name) == nullptr) {
      if (is_known_jinja_test(e->name)) {
        return unsupported(name, fmt::format("the Jinja test '{}' is not supported", e->name));
      }
      return error(name, fmt::format("no test named '{}'", e->name));
    }
    e->args.push_back(std::move(input));
    if (at_op("(")) {
      CELLM_RETURN_IF_ERROR(call_args(*e));
    } else if ((cur().kind == TokenKind::kName || cur().kind == TokenKind::kString ||
                cur().kind == TokenKind::kInt || cur().kind == TokenKind::kFloat || at_op("[") ||
                at_op("{")) &&
               !at_name("else") && !at_name("or") && !at_name("and")) {
      // `x is divisibleby 3`: one argument without parentheses.
      CELLM_ASSIGN_OR_RETURN(ExprPtr arg, primary());
      CELLM_ASSIGN_OR_RETURN(arg, postfix(std::move(arg)));
      e->args.push_back(std::move(arg));
    }
    return finish(std::move(e));
  }

  std::vector<Token> t_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<Stmt*> macros_;
};

}  // namespace

Result<Body> parse_template(std::vector<Token> tokens) {
  Parser parser(std::move(tokens));
  return parser.parse();
}

}  // namespace cellm::chat
