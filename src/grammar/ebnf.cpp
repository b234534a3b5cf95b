#include "grammar/ebnf.h"

#include <cctype>
#include <functional>
#include <unordered_map>

#include <fmt/format.h>

#include "grammar/pattern_scan.h"

namespace cellm::grammar {
namespace {

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
}

class EbnfParser {
 public:
  explicit EbnfParser(std::string_view source) : s_(source, /*shorthands=*/false) {}

  Result<EbnfGrammar> parse() {
    CELLM_RETURN_IF_ERROR(s_.check_size("grammar"));
    space();
    while (!s_.at_end()) {
      if (!rule()) return s_.error();
      space();
    }
    for (std::size_t i = 0; i < g_.rules.size(); ++i) {
      if (defined_[i]) continue;
      s_.fail(first_use_[i], fmt::format("rule '{}' is used but never defined", g_.rules[i].name));
      return s_.error();
    }
    auto root = index_.find("root");
    if (root == index_.end()) {
      return invalid_argument(
          "the grammar has no 'root' rule: define `root ::= ...`, the rule the whole output "
          "must match");
    }
    g_.root = root->second;
    return std::move(g_);
  }

 private:
  void space() {
    while (!s_.at_end()) {
      const char c = s_.peek();
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        s_.skip();
      } else if (c == '#') {
        while (!s_.at_end() && s_.peek() != '\n') s_.skip();
      } else {
        break;
      }
    }
  }

  std::string name() {
    const std::size_t start = s_.pos();
    while (!s_.at_end() && name_char(s_.peek())) s_.skip();
    return std::string(s_.source().substr(start, s_.pos() - start));
  }

  // Whether `name ::=` starts at the cursor (the next rule), cursor unmoved.
  bool rule_ahead() {
    if (!name_start(s_.peek())) return false;
    PatternScanner saved = s_;
    name();
    space();
    const bool found = s_.peek() == ':' && s_.peek(1) == ':' && s_.peek(2) == '=';
    s_ = saved;
    return found;
  }

  std::uint32_t rule_index(const std::string& n, std::size_t offset) {
    auto [it, fresh] = index_.try_emplace(n, static_cast<std::uint32_t>(g_.rules.size()));
    if (fresh) {
      g_.rules.push_back(EbnfRule{n, Pattern{}, 0});
      defined_.push_back(false);
      first_use_.push_back(offset);
    }
    return it->second;
  }

  bool rule() {
    const std::size_t at = s_.pos();
    if (!name_start(s_.peek())) {
      return s_.fail(at, "expected a rule definition `name ::= ...`");
    }
    const std::string n = name();
    space();
    if (!(s_.peek() == ':' && s_.peek(1) == ':' && s_.peek(2) == '=')) {
      return s_.fail(s_.pos(), fmt::format("expected '::=' after the rule name '{}'", n));
    }
    s_.skip(3);
    const std::uint32_t r = rule_index(n, at);
    if (defined_[r]) {
      return s_.fail(at, fmt::format("rule '{}' is defined twice (the first is at {}); join its "
                                     "alternatives with '|'",
                                     n, source_position(s_.source(), g_.rules[r].offset)));
    }
    defined_[r] = true;
    g_.rules[r].offset = at;
    Pattern body;
    if (!alternatives(0, &body)) return false;
    if (!s_.at_end() && s_.peek() == ')') {
      return s_.fail(s_.pos(), "unbalanced ')': no group is open");
    }
    g_.rules[r].body = std::move(body);
    return true;
  }

  bool alternatives(int depth, Pattern* out) {
    return s_.alternatives(depth, out, [&](Pattern* seq) { return sequence(depth, seq); });
  }

  bool sequence(int depth, Pattern* out) {
    out->kind = Pattern::Kind::kSeq;
    out->offset = s_.pos();
    space();
    while (!s_.at_end() && s_.peek() != '|' && s_.peek() != ')' && !rule_ahead()) {
      Pattern item;
      if (!this->item(depth, &item)) return false;
      space();
      if (!quantifier(&item)) return false;
      space();
      out->children.push_back(std::move(item));
    }
    return true;
  }

  bool literal(Pattern* out) {
    const std::size_t open = s_.pos();
    const char quote = s_.peek();
    s_.skip();
    out->kind = Pattern::Kind::kLiteral;
    while (true) {
      if (s_.at_end() || s_.peek() == '\n') {
        return s_.fail(open, fmt::format("the string {} is never closed (write \\n for a newline "
                                         "inside a string)",
                                         quote));
      }
      if (s_.peek() == quote) {
        s_.skip();
        break;
      }
      const std::size_t at = s_.pos();
      char32_t cp = 0;
      if (s_.peek() == '\\') {
        bool is_set = false;
        std::vector<CodeRange> unused;
        if (!s_.escape(&is_set, &cp, &unused)) return false;
        append_utf8(out->text, cp);
      } else {
        if (!s_.character(&cp)) return false;
        out->text.append(s_.source().substr(at, s_.pos() - at));
      }
    }
    if (out->text.empty()) out->kind = Pattern::Kind::kEmpty;
    return true;
  }

  bool item(int depth, Pattern* out) {
    const std::size_t at = s_.pos();
    out->offset = at;
    const char c = s_.peek();
    if (c == '"' || c == '\'') return literal(out);
    if (c == '[') {
      out->kind = Pattern::Kind::kClass;
      return s_.char_class(&out->ranges);
    }
    if (c == '.') {
      s_.skip();
      out->kind = Pattern::Kind::kClass;
      out->ranges = {{0, kMaxCodePoint}};
      return true;
    }
    if (c == '(') {
      s_.skip();
      if (!alternatives(depth + 1, out)) return false;
      space();
      if (s_.at_end() || s_.peek() != ')') {
        return s_.fail(at, "the group '(' is never closed by ')'");
      }
      s_.skip();
      out->offset = at;
      return true;
    }
    if (name_start(c)) {
      const std::string n = name();
      out->kind = Pattern::Kind::kRef;
      out->rule = rule_index(n, at);
      return true;
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') {
      return s_.fail(at, fmt::format("'{}' has nothing to repeat", c));
    }
    if (c == ':' && s_.peek(1) == ':' && s_.peek(2) == '=') {
      return s_.fail(at, "'::=' without a rule name before it");
    }
    return s_.fail(at, fmt::format("unexpected '{}': expected a string, a [class], a rule name, "
                                   "'.', or '('",
                                   c));
  }

  bool quantifier(Pattern* p) {
    // Spaces and comments may follow a quantifier (sequence() skips those
    // before it), also ahead of a second one.
    auto spaces = [&] { space(); };
    return s_.quantifier(p, spaces, "(x*)+");
  }

  PatternScanner s_;
  EbnfGrammar g_;
  std::unordered_map<std::string, std::uint32_t> index_;
  std::vector<bool> defined_;
  std::vector<std::size_t> first_use_;
};

// The rules `p` may call before it has matched any text.
void first_calls(const Pattern& p, const std::vector<bool>& nullable,
                 std::vector<std::uint32_t>* out) {
  switch (p.kind) {
    case Pattern::Kind::kRef: out->push_back(p.rule); return;
    case Pattern::Kind::kSeq:
      for (const Pattern& c : p.children) {
        first_calls(c, nullable, out);
        if (!pattern_nullable(c, nullable)) return;
      }
      return;
    case Pattern::Kind::kAlt:
      for (const Pattern& c : p.children) first_calls(c, nullable, out);
      return;
    case Pattern::Kind::kRepeat:
      if (p.max > 0) first_calls(p.children[0], nullable, out);
      return;
    default: return;
  }
}

// InvalidArgument naming a cycle of rules that recurse without consuming text.
Status check_left_recursion(const EbnfGrammar& g, std::string_view source) {
  const std::size_t n = g.rules.size();
  std::vector<bool> nullable(n, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (!nullable[r] && pattern_nullable(g.rules[r].body, nullable)) {
        nullable[r] = true;
        changed = true;
      }
    }
  }
  std::vector<std::vector<std::uint32_t>> firsts(n);
  for (std::size_t r = 0; r < n; ++r) first_calls(g.rules[r].body, nullable, &firsts[r]);
  std::vector<std::uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::uint32_t> path;
  std::optional<std::vector<std::uint32_t>> cycle;
  // Iterative depth-first search (a long chain of rules must not overflow the stack).
  for (std::uint32_t start = 0; start < n && !cycle; ++start) {
    if (state[start] != 0) continue;
    std::vector<std::pair<std::uint32_t, std::size_t>> stack{{start, 0}};
    state[start] = 1;
    path.assign(1, start);
    while (!stack.empty() && !cycle) {
      auto& [r, next] = stack.back();
      if (next == firsts[r].size()) {
        state[r] = 2;
        stack.pop_back();
        path.pop_back();
        continue;
      }
      const std::uint32_t s = firsts[r][next++];
      if (state[s] == 1) {
        auto from = std::find(path.begin(), path.end(), s);
        cycle.emplace(from, path.end());
        cycle->push_back(s);
      } else if (state[s] == 0) {
        state[s] = 1;
        stack.emplace_back(s, 0);
        path.push_back(s);
      }
    }
  }
  if (!cycle) return Status::ok();
  std::string chain;
  for (std::uint32_t r : *cycle) chain += (chain.empty() ? "" : " -> ") + g.rules[r].name;
  const EbnfRule& rule = g.rules[cycle->front()];
  return invalid_argument(
      "{}: rule '{}' is left-recursive ({}): it can reach itself before matching any text, which "
      "would never end; rewrite it with repetition, e.g. `list ::= item (\",\" item)*` instead of "
      "`list ::= list \",\" item | item`",
      source_position(source, rule.offset), rule.name, chain);
}

}  // namespace

Result<EbnfGrammar> parse_ebnf(std::string_view source) {
  return EbnfParser(source).parse();
}

Result<std::shared_ptr<const Grammar>> compile_ebnf(std::string_view source) {
  CELLM_ASSIGN_OR_RETURN(EbnfGrammar g, parse_ebnf(source));
  CELLM_RETURN_IF_ERROR(check_left_recursion(g, source));
  GrammarBuilder b;
  std::vector<RuleId> ids;
  ids.reserve(g.rules.size());
  for (const EbnfRule& r : g.rules) ids.push_back(b.add_rule(r.name));
  PatternEmitter emitter(b, ids, source);
  for (std::size_t r = 0; r < g.rules.size(); ++r) {
    const NodeId end = b.node(ids[r]);
    b.set_final(end);
    CELLM_RETURN_IF_ERROR(emitter.emit(g.rules[r].body, b.start(ids[r]), end));
  }
  return b.build(ids[g.root]);
}

}  // namespace cellm::grammar
