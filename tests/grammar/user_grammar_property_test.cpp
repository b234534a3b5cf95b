// Property tests of the user-written grammar forms against independent
// oracles: random regexes agree with std::regex (ECMAScript) on every short
// string over their alphabet; the same expressions written as EBNF (groups
// turned into rules) agree too; a recursive EBNF grammar agrees with a
// hand-written recognizer; and a class of random code points accepts exactly
// the UTF-8 encodings of its members.
#include <array>
#include <random>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "grammar/ebnf.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace cellm::grammar {
namespace {

using Rng = std::mt19937_64;

int pick(Rng& rng, int n) {
  return static_cast<int>(rng() % static_cast<std::uint64_t>(n));
}

// A random expression over the alphabet {a, b, c}, written both as a regex
// and as EBNF (each group becomes a rule half the time).
struct Generated {
  std::string regex;
  std::string ebnf;
};

class ExpressionGenerator {
 public:
  explicit ExpressionGenerator(Rng& rng) : rng_(rng) {}

  // The grammar text of a whole EBNF grammar for the last expression.
  std::string ebnf_grammar(const std::string& root_body) const {
    std::string out = "root ::= " + root_body + "\n";
    for (const std::string& r : rules_) out += r + "\n";
    return out;
  }

  Generated alternation(int depth) {
    Generated out = sequence(depth);
    const int extra = depth < 3 && pick(rng_, 4) == 0 ? 1 + pick(rng_, 2) : 0;
    for (int i = 0; i < extra; ++i) {
      Generated next = sequence(depth);
      out.regex += "|" + next.regex;
      out.ebnf += " | " + next.ebnf;
    }
    return out;
  }

 private:
  Generated sequence(int depth) {
    Generated out;
    const int n = 1 + pick(rng_, 3);
    for (int i = 0; i < n; ++i) {
      Generated a = quantified(depth);
      out.regex += a.regex;
      out.ebnf += (out.ebnf.empty() ? "" : " ") + a.ebnf;
    }
    return out;
  }

  Generated quantified(int depth) {
    Generated a = atom(depth);
    std::string q;
    switch (pick(rng_, 9)) {
      case 0: q = "*"; break;
      case 1: q = "+"; break;
      case 2: q = "?"; break;
      case 3: q = "{" + std::to_string(pick(rng_, 3)) + "}"; break;
      case 4: {
        const int m = pick(rng_, 3);
        q = "{" + std::to_string(m) + "," + std::to_string(m + pick(rng_, 3)) + "}";
        break;
      }
      case 5: q = "{" + std::to_string(pick(rng_, 3)) + ",}"; break;
      default: break;
    }
    return {a.regex + q, a.ebnf + q};
  }

  Generated atom(int depth) {
    const int kind = depth >= 3 ? pick(rng_, 4) : pick(rng_, 6);
    switch (kind) {
      case 0:
      case 1: {
        const std::string c(1, static_cast<char>('a' + pick(rng_, 3)));
        return {c, "\"" + c + "\""};
      }
      case 2: {
        static const char* classes[] = {"[ab]", "[^a]", "[b-c]", "[^bc]"};
        const std::string c = classes[pick(rng_, 4)];
        return {c, c};
      }
      case 3: return {".", "."};
      default: {
        Generated inner = alternation(depth + 1);
        if (pick(rng_, 2) == 0) return {"(" + inner.regex + ")", "(" + inner.ebnf + ")"};
        const std::string name = "g" + std::to_string(rules_.size());
        rules_.push_back(name + " ::= " + inner.ebnf);
        return {"(" + inner.regex + ")", name};
      }
    }
  }

  Rng& rng_;
  std::vector<std::string> rules_;
};

// libstdc++'s default executor backtracks (exponential on nested
// repetitions); its Thompson-NFA executor decides the same language in
// polynomial time.
#ifdef __GLIBCXX__
constexpr auto kOracleFlags = std::regex::ECMAScript | std::regex_constants::__polynomial;
#else
constexpr auto kOracleFlags = std::regex::ECMAScript;
#endif

// Every string over {a, b, c} of length up to `max_len`.
std::vector<std::string> all_strings(int max_len) {
  std::vector<std::string> out{""};
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(out[i].size()) == max_len) continue;
    for (char c : {'a', 'b', 'c'}) out.push_back(out[i] + c);
  }
  return out;
}

TEST(UserGrammarProperty, RegexAndEbnfAgreeWithStdRegex) {
  Rng rng(20261207);
  const std::vector<std::string> texts = all_strings(5);
  int accepted = 0;
  int rejected = 0;
  for (int round = 0; round < 400; ++round) {
    ExpressionGenerator gen(rng);
    const Generated e = gen.alternation(0);
    const std::regex oracle(e.regex, kOracleFlags);
    auto regex = compile_regex(e.regex);
    ASSERT_TRUE(regex.ok()) << e.regex << ": " << regex.status().to_string();
    const std::string ebnf_text = gen.ebnf_grammar(e.ebnf);
    auto ebnf = compile_ebnf(ebnf_text);
    ASSERT_TRUE(ebnf.ok()) << ebnf_text << ": " << ebnf.status().to_string();
    for (const std::string& t : texts) {
      const bool want = std::regex_match(t, oracle);
      (want ? accepted : rejected)++;
      ASSERT_EQ(Matcher::matches(*regex, t), want) << "regex " << e.regex << " on \"" << t << "\"";
      ASSERT_EQ(Matcher::matches(*ebnf, t), want) << "grammar\n"
                                                  << ebnf_text << "on \"" << t << "\"";
    }
  }
  // Both sides of the property were exercised.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 1000);
}

// Balanced brackets of two kinds, e.g. "([]())".
bool balanced(const std::string& s) {
  std::string stack;
  for (char c : s) {
    if (c == '(' || c == '[') {
      stack += c;
    } else {
      const char open = c == ')' ? '(' : '[';
      if (stack.empty() || stack.back() != open) return false;
      stack.pop_back();
    }
  }
  return stack.empty();
}

TEST(UserGrammarProperty, RecursiveEbnfAgreesWithARecognizer) {
  auto g = compile_ebnf(R"g(root ::= item*
item ::= "(" root ")" | "[" root "]")g");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::vector<std::string> texts{""};
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (texts[i].size() == 8) continue;
    for (char c : {'(', ')', '[', ']'}) texts.push_back(texts[i] + c);
  }
  int accepted = 0;
  for (const std::string& t : texts) {
    const bool want = balanced(t);
    accepted += want ? 1 : 0;
    ASSERT_EQ(Matcher::matches(*g, t), want) << t;
    // Prefixes of a balanced text stay alive in the matcher.
    if (want) {
      Matcher m(*g);
      for (char c : t) ASSERT_TRUE(m.advance(static_cast<std::uint8_t>(c))) << t;
    }
  }
  EXPECT_GT(accepted, 100);
}

TEST(UserGrammarProperty, ClassesAcceptExactlyTheUtf8OfTheirCodePoints) {
  Rng rng(7);
  auto random_cp = [&]() -> char32_t {
    // Bias toward the encoding boundaries.
    static const char32_t edges[] = {0x0,    0x7F,   0x80,    0x7FF,   0x800,    0xD7FF,
                                     0xE000, 0xFFFF, 0x10000, 0x3FFFF, 0x10FFFF, 0xFFF};
    char32_t cp = pick(rng, 2) == 0 ? edges[pick(rng, 12)] + static_cast<char32_t>(pick(rng, 3))
                                    : static_cast<char32_t>(rng() % (kMaxCodePoint + 1));
    if (cp > kMaxCodePoint) cp = kMaxCodePoint;
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xE000;
    return cp;
  };
  for (int round = 0; round < 60; ++round) {
    char32_t lo = random_cp();
    char32_t hi = random_cp();
    if (lo > hi) std::swap(lo, hi);
    const bool negate = pick(rng, 3) == 0;
    const std::string source =
        fmt::format("[{}\\U{:08X}-\\U{:08X}]", negate ? "^" : "", static_cast<std::uint32_t>(lo),
                    static_cast<std::uint32_t>(hi));
    auto g = compile_regex(source);
    if (!g.ok()) {
      // Only a class of nothing (all but surrogates negated) may fail.
      ASSERT_TRUE(negate) << source << ": " << g.status().to_string();
      continue;
    }
    auto inside = [&](char32_t cp) { return (cp >= lo && cp <= hi) != negate; };
    for (int i = 0; i < 200; ++i) {
      const char32_t cp = i < 4 ? std::array<char32_t, 4>{lo, hi, lo - 1, hi + 1}[i] : random_cp();
      if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
      std::string text;
      append_utf8(text, cp);
      ASSERT_EQ(Matcher::matches(*g, text), inside(cp))
          << source << " U+" << std::hex << static_cast<std::uint32_t>(cp);
    }
    // Random bytes: accepted only as one well-formed character of the class.
    for (int i = 0; i < 300; ++i) {
      std::string text(1 + pick(rng, 4), '\0');
      for (char& c : text)
        c = static_cast<char>(pick(rng, 2) ? 0x80 + pick(rng, 0x80) : pick(rng, 256));
      std::size_t pos = 0;
      char32_t cp = 0;
      const bool one = decode_utf8(text, &pos, &cp) && pos == text.size();
      ASSERT_EQ(Matcher::matches(*g, text), one && inside(cp)) << source;
    }
  }
}

}  // namespace
}  // namespace cellm::grammar
