#include "grammar/regex.h"

#include <fmt/format.h>

#include "grammar/pattern_scan.h"

namespace cellm::grammar {
namespace {

class RegexParser {
 public:
  explicit RegexParser(std::string_view source) : s_(source, /*shorthands=*/true) {}

  Result<Pattern> parse() {
    CELLM_RETURN_IF_ERROR(s_.check_size("regex"));
    Pattern p;
    if (!alternation(0, &p)) return s_.error();
    if (!s_.at_end()) {
      // Only an unmatched ')' stops the top level early.
      s_.fail(s_.pos(), "unbalanced ')': no group is open");
      return s_.error();
    }
    return p;
  }

 private:
  bool alternation(int depth, Pattern* out) {
    return s_.alternatives(depth, out, [&](Pattern* seq) { return sequence(depth, seq); });
  }

  bool sequence(int depth, Pattern* out) {
    out->kind = Pattern::Kind::kSeq;
    out->offset = s_.pos();
    while (!s_.at_end() && s_.peek() != '|' && s_.peek() != ')') {
      Pattern atom;
      if (!this->atom(depth, &atom)) return false;
      if (!quantifier(&atom)) return false;
      out->children.push_back(std::move(atom));
    }
    return true;
  }

  bool atom(int depth, Pattern* out) {
    const std::size_t at = s_.pos();
    out->offset = at;
    const char c = s_.peek();
    switch (c) {
      case '(': {
        s_.skip();
        if (s_.peek() == '?') {
          if (s_.peek(1) == ':') {
            s_.skip(2);
          } else if ((s_.peek(1) == 'P' && s_.peek(2) == '<') ||
                     (s_.peek(1) == '<' && s_.peek(2) != '=' && s_.peek(2) != '!')) {
            s_.skip(s_.peek(1) == 'P' ? 3 : 2);
            while (!s_.at_end() && s_.peek() != '>') s_.skip();
            if (s_.at_end()) return s_.fail(at, "the group name is never closed by '>'");
            s_.skip();
          } else {
            return s_.fail(at,
                           "'(?' groups other than (?:...) and named groups (lookaround, inline "
                           "flags, conditionals) are not supported");
          }
        }
        if (!alternation(depth + 1, out)) return false;
        if (s_.peek() != ')' || s_.at_end()) {
          return s_.fail(at, "the group '(' is never closed by ')'");
        }
        s_.skip();
        out->offset = at;
        return true;
      }
      case '[': out->kind = Pattern::Kind::kClass; return s_.char_class(&out->ranges);
      case '.':
        s_.skip();
        out->kind = Pattern::Kind::kClass;
        out->ranges = complement_ranges({{'\n', '\n'}});
        return true;
      case '^':
      case '$': {
        const bool ok = c == '^' ? at == 0 : at + 1 == s_.source().size();
        if (!ok) {
          return s_.fail(at, fmt::format("'{}' is only accepted {} of the regex (the whole output "
                                         "must match anyway); write \\{} for the character",
                                         c, c == '^' ? "at the start" : "at the end", c));
        }
        s_.skip();
        out->kind = Pattern::Kind::kEmpty;
        return true;
      }
      case '*':
      case '+':
      case '?': return s_.fail(at, fmt::format("'{}' has nothing to repeat", c));
      case '{': return s_.fail(at, "'{' has nothing to repeat; write \\{ for the character");
      case '\\': {
        bool is_set = false;
        char32_t cp = 0;
        if (s_.peek(1) == 'b' || s_.peek(1) == 'B' || s_.peek(1) == 'A' || s_.peek(1) == 'Z' ||
            (s_.peek(1) >= '0' && s_.peek(1) <= '9')) {
          return s_.fail(at, "word boundaries, \\A, \\Z and backreferences are not supported");
        }
        if (!s_.escape(&is_set, &cp, &out->ranges)) return false;
        if (is_set) {
          out->kind = Pattern::Kind::kClass;
        } else {
          out->kind = Pattern::Kind::kLiteral;
          append_utf8(out->text, cp);
        }
        return true;
      }
      default: {
        char32_t cp = 0;
        if (!s_.character(&cp)) return false;
        out->kind = Pattern::Kind::kLiteral;
        out->text.assign(s_.source().substr(at, s_.pos() - at));
        return true;
      }
    }
  }

  bool quantifier(Pattern* p) {
    // A lazy quantifier (x*?) matches the same language as the greedy one.
    auto lazy = [&] {
      if (s_.peek() == '?') s_.skip();
    };
    return s_.quantifier(p, lazy, "(a*)+");
  }

  PatternScanner s_;
};

}  // namespace

Result<Pattern> parse_regex(std::string_view source) {
  return RegexParser(source).parse();
}

Result<std::shared_ptr<const Grammar>> compile_regex(std::string_view source) {
  CELLM_ASSIGN_OR_RETURN(Pattern p, parse_regex(source));
  GrammarBuilder b;
  const RuleId root = b.add_rule("regex");
  const NodeId end = b.node(root);
  b.set_final(end);
  PatternEmitter emitter(b, {}, source);
  CELLM_RETURN_IF_ERROR(emitter.emit(p, b.start(root), end));
  return b.build(root);
}

}  // namespace cellm::grammar
