// The user-written grammar forms (regex.h, ebnf.h) on hand-picked texts: what
// each construct accepts and refuses, UTF-8 classes, and the refusals (syntax,
// undefined rules, left recursion, size) with the position they name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "grammar/ebnf.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace cellm::grammar {
namespace {

struct Case {
  const char* source;
  std::vector<std::string> accept;
  std::vector<std::string> reject;
};

void check(const Result<std::shared_ptr<const Grammar>>& g, const Case& c) {
  ASSERT_TRUE(g.ok()) << c.source << ": " << g.status().to_string();
  for (const std::string& t : c.accept) {
    EXPECT_TRUE(Matcher::matches(*g, t)) << c.source << " should accept \"" << t << "\"";
  }
  for (const std::string& t : c.reject) {
    EXPECT_FALSE(Matcher::matches(*g, t)) << c.source << " should reject \"" << t << "\"";
  }
}

// The error's message holds every fragment.
void expect_error(const Status& s, const std::vector<const char*>& fragments, const char* source) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << source;
  for (const char* f : fragments) {
    EXPECT_NE(s.message().find(f), std::string::npos)
        << source << ": \"" << s.message() << "\" lacks \"" << f << "\"";
  }
}

TEST(RegexGrammar, ConstructsAcceptTheirLanguage) {
  const Case cases[] = {
      {"abc", {"abc"}, {"", "ab", "abcd", "abd"}},
      {"a|bc|", {"a", "bc", ""}, {"b", "abc"}},
      {"(ab)*c", {"c", "abc", "ababc"}, {"ac", "abab", "abac"}},
      {"a+b?", {"a", "aaab"}, {"", "b", "abb"}},
      {"x{2}", {"xx"}, {"x", "xxx"}},
      {"x{2,}", {"xx", "xxxxx"}, {"x"}},
      {"x{,2}", {"", "x", "xx"}, {"xxx"}},
      {"x{1,3}y", {"xy", "xxxy"}, {"y", "xxxxy"}},
      {"[a-c0-9_]+", {"a1_c", "9"}, {"", "d", "A"}},
      {"[^a-c]", {"d", "\n", "\xc3\xa9"}, {"a", "c", "", "dd"}},
      {"[]a]", {"]", "a"}, {"b"}},
      {"[-a]+[a-]", {"-a-", "aa"}, {"b"}},
      {R"(\d{3}-\w+\s\S)", {"123-ab_9 x", "000-A\tZ"}, {"12-a x", "123-a  ", "123-! x"}},
      {"[\\d.]+", {"3.14"}, {"3,14"}},
      {"\\D\\W", {"a!"}, {"1!", "aa"}},
      {".", {"a", " ", "\xc3\xa9", "\xf0\x9f\x98\x80"}, {"\n", "", "\xc3", "\xed\xa0\x80"}},
      {"^a.c$", {"abc", "a-c"}, {"ac", "^abc$"}},
      {R"(\^\$\.\*\(\)\[\{\\)", {"^$.*()[{\\"}, {""}},
      {R"(\x41\u00e9\U0001F600\n\t)", {"A\xc3\xa9\xf0\x9f\x98\x80\n\t"}, {"A"}},
      {"(?:a|b)(?P<n>c)(?<m>d)", {"acd", "bcd"}, {"cd"}},
      {"a*?b+?c??", {"b", "aabbc"}, {"", "c"}},
      {"(a|ab)(c|bcd)(d*)", {"abcd", "abcdd", "ac"}, {"abc d"}},
      {"[\xce\xb1-\xcf\x89]+", {"\xce\xb1\xce\xb2\xcf\x89"}, {"a", "\xce\x91"}},
      {"((a*)*b)+", {"b", "aab", "abab"}, {"", "a"}},
      {"()", {""}, {"a"}},
  };
  for (const Case& c : cases) check(compile_regex(c.source), c);
}

TEST(RegexGrammar, RefusalsNameThePosition) {
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"ab)", {"line 1, column 3", "unbalanced ')'"}},
      {"(ab", {"line 1, column 1", "never closed"}},
      {"[ab", {"line 1, column 1", "never closed"}},
      {"a**", {"line 1, column 3", "cannot follow another"}},
      {"*a", {"line 1, column 1", "nothing to repeat"}},
      {"a{3,1}", {"line 1, column 2", "maximum below its minimum"}},
      {"a{x}", {"line 1, column 2", "repetition bound"}},
      {"a{1001}", {"above 1000"}},
      {"[z-a]", {"line 1, column 2", "runs backwards"}},
      {"(?=a)", {"line 1, column 1", "lookaround"}},
      {"(a)\\1", {"line 1, column 4", "backreferences"}},
      {"\\bword", {"line 1, column 1"}},
      {"\\q", {"unsupported escape '\\q'"}},
      {"a^b", {"line 1, column 2", "only accepted at the start"}},
      {"a$b", {"line 1, column 2", "only accepted at the end"}},
      {"\\x4", {"hexadecimal"}},
      {"\\uD800", {"not a character"}},
      {"[^\\x00-\\U0010FFFF]", {"matches no character"}},
      {"a\n(", {"line 2, column 1"}},
      {"\xc3(", {"malformed UTF-8"}},
  };
  for (const auto& [source, fragments] : cases) {
    auto g = compile_regex(source);
    ASSERT_FALSE(g.ok()) << source;
    expect_error(g.status(), fragments, source);
  }
}

TEST(RegexGrammar, SizeAndNestingAreBounded) {
  auto big = compile_regex("(a{1000}){1000}");
  ASSERT_FALSE(big.ok());
  expect_error(big.status(), {"too large"}, "(a{1000}){1000}");
  // Past the post-build node limit but under the builder's budget.
  auto wide = compile_regex(
      "[a-z]{1000}[0-9]{1000}[A-Z]{1000}(x|y){1000}(abc){1000}(d|e){1000}"
      "(fg){1000}(hi){1000}(jk){1000}(lm){1000}(no){1000}(pq){1000}"
      "(rs){1000}(tu){1000}(vw){1000}");
  ASSERT_FALSE(wide.ok());
  expect_error(wide.status(), {"automaton nodes"}, "wide");
  // Optional pieces chained: epsilon removal would be quadratic.
  auto chained = compile_regex("(a?b?c?){1000}");
  ASSERT_FALSE(chained.ok());
  expect_error(chained.status(), {"automaton edges", "x{0,n}"}, "chained");
  const std::string deep = std::string(300, '(') + "a" + std::string(300, ')');
  auto nested = compile_regex(deep);
  ASSERT_FALSE(nested.ok());
  expect_error(nested.status(), {"nest deeper"}, "deep");
  auto long_source = compile_regex(std::string(kMaxPatternSourceBytes + 1, 'a'));
  ASSERT_FALSE(long_source.ok());
}

TEST(EbnfGrammar, ConstructsAcceptTheirLanguage) {
  const Case cases[] = {
      {R"(root ::= "yes" | "no")", {"yes", "no"}, {"", "yesno", "Yes"}},
      {"# comment\nroot ::= item (\",\" ws item)*  # trailing\nitem ::= [0-9]+\nws ::= \" \"?",
       {"1", "1,2", "10, 20,3"},
       {"", "1,", ",1", "1,  2", "a"}},
      {"root ::=\n  \"a\"\n  | \"b\" c\nc ::= 'c'{2,3}",
       {"a", "bcc", "bccc"},
       {"b", "bc", "bcccc"}},
      {R"(root ::= [^"\\]* "!")", {"!", "ab c!", "\xc3\xa9!"}, {"\"!", "\\!", "ab"}},
      {R"(root ::= . .)", {"ab", "\n\n", "\xc3\xa9x"}, {"a", "abc"}},
      {R"(root ::= "\x41\u00e9\n\t\"\\" '\'')", {"A\xc3\xa9\n\t\"\\'"}, {"A"}},
      {R"(root ::= ("ab"){,2} "c"{1} "d"{2,})", {"cdd", "ababcddd"}, {"abababcdd", "cd"}},
      {R"(root ::= "")", {""}, {"a"}},
      {R"(root ::= )", {""}, {"a"}},
      {R"(root ::= a-b_c
a-b_c ::= "x")",
       {"x"},
       {""}},
      // Recursion (right and nested) is fine.
      {R"g(root ::= "(" root ")" | "x")g", {"x", "(x)", "(((x)))"}, {"()", "(x", "x)"}},
      {R"(root ::= list
list ::= "[" (value ("," value)*)? "]"
value ::= list | [0-9])",
       {"[]", "[1]", "[1,[2,[]],3]"},
       {"[", "[1,]", "[[]"}},
      // A nullable rule before a consuming one is not left recursion.
      {R"(root ::= opt "x" root | opt
opt ::= "-"?)",
       {"", "-", "x", "-x-x", "xx-"},
       {"--"}},
  };
  for (const Case& c : cases) check(compile_ebnf(c.source), c);
}

TEST(EbnfGrammar, RefusalsNameThePositionAndTheRule) {
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {"root ::= item", {"line 1, column 10", "'item' is used but never defined"}},
      {"item ::= \"a\"", {"no 'root' rule"}},
      {"root ::= \"a\"\nroot ::= \"b\"", {"line 2, column 1", "defined twice", "line 1, column 1"}},
      {"root ::= \"abc", {"line 1, column 10", "never closed"}},
      {"root ::= \"a\nb\"", {"line 1, column 10", "never closed"}},
      {"root ::= [a-", {"line 1, column 10", "never closed"}},
      {"root ::= (\"a\"", {"line 1, column 10", "never closed"}},
      {"root ::= \"a\")", {"line 1, column 13", "unbalanced ')'"}},
      {"root = \"a\"", {"line 1, column 6", "expected '::='"}},
      {R"(root ::= "a" ; "b")", {"line 1, column 14", "unexpected ';'"}},
      {"root ::= * \"a\"", {"line 1, column 10", "nothing to repeat"}},
      {"root ::= \"a\"* *", {"line 1, column 15", "cannot follow another"}},
      {"root ::= \"a\"{2,1}", {"line 1, column 13", "maximum below its minimum"}},
      {R"(root ::= "\q")", {"line 1, column 11", "unsupported escape"}},
      {"root ::= [\\d]", {"unsupported escape '\\d'"}},
      {"\"a\" ::= root", {"line 1, column 1", "expected a rule definition"}},
      {"root ::= \"a\"\n  ::= \"b\"", {"line 2, column 3", "without a rule name"}},
  };
  for (const auto& [source, fragments] : cases) {
    auto g = compile_ebnf(source);
    ASSERT_FALSE(g.ok()) << source;
    expect_error(g.status(), fragments, source);
  }
}

TEST(EbnfGrammar, LeftRecursionIsRefusedNamingTheCycle) {
  const std::pair<const char*, std::vector<const char*>> cases[] = {
      {R"(root ::= root "a" | "b")",
       {"line 1, column 1", "'root' is left-recursive", "root -> root"}},
      {"root ::= expr\nexpr ::= term | expr \"+\" term\nterm ::= [0-9]",
       {"line 2, column 1", "'expr'", "expr -> expr"}},
      {"root ::= a\na ::= b \"x\"\nb ::= root | \"y\"", {"root -> a -> b -> root"}},
      // Through a rule that can match nothing, and through an optional prefix.
      {"root ::= e root \"x\" | \"y\"\ne ::= \"z\"?", {"'root' is left-recursive"}},
      {R"(root ::= ("q")* root | "y")", {"'root' is left-recursive"}},
      {"root ::= (root){2} | \"y\"", {"'root' is left-recursive"}},
  };
  for (const auto& [source, fragments] : cases) {
    auto g = compile_ebnf(source);
    ASSERT_FALSE(g.ok()) << source;
    expect_error(g.status(), fragments, source);
  }
}

TEST(EbnfGrammar, SizeAndNestingAreBounded) {
  auto big = compile_ebnf(R"(root ::= ("a"{1000}){1000})");
  ASSERT_FALSE(big.ok());
  expect_error(big.status(), {"too large", "line 1, column 1"}, "big");
  // Each rule is small, the whole is not.
  std::string many = "root ::= r0\n";
  for (int i = 0; i < 300; ++i) {
    many += fmt::format("r{} ::= [a-z]{{1000}} r{}\n", i, i + 1);
  }
  many += "r300 ::= \"end\"\n";
  auto wide = compile_ebnf(many);
  ASSERT_FALSE(wide.ok());
  const std::string deep = "root ::= " + std::string(300, '(') + "\"a\"" + std::string(300, ')');
  auto nested = compile_ebnf(deep);
  ASSERT_FALSE(nested.ok());
  expect_error(nested.status(), {"nest deeper"}, "deep");
  // A long chain of rules is parsed and checked without deep recursion.
  std::string chain = "root ::= c0\n";
  for (int i = 0; i < 2000; ++i) {
    chain += fmt::format("c{} ::= c{}\n", i, i + 1);
  }
  chain += "c2000 ::= \"z\" | c0\n";
  auto looped = compile_ebnf(chain);
  ASSERT_FALSE(looped.ok());
  expect_error(looped.status(), {"left-recursive"}, "chain");
}

TEST(EbnfGrammar, AmbiguityIsBoundedByTheMatcher) {
  // Every odd run of x parses in exponentially many ways (stacks of two
  // return nodes): the matcher keeps at most kMaxItems and refuses past them.
  auto g = compile_ebnf(R"(root ::= a
a ::= "x" | "x" a a)");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(Matcher::matches(*g, "xxx"));
  EXPECT_FALSE(Matcher::matches(*g, "xx"));
  Matcher m(*g);
  bool refused = false;
  for (int i = 0; i < 64 && !refused; ++i) {
    refused = !m.advance(static_cast<std::uint8_t>('x'));
    EXPECT_LE(m.items().size(), Matcher::kMaxItems);
  }
  EXPECT_TRUE(refused);
}

TEST(PatternUtf8, ParseTreesKeepPositions) {
  auto p = parse_regex("ab|c*");
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->kind, Pattern::Kind::kAlt);
  ASSERT_EQ(p->children.size(), 2u);
  EXPECT_EQ(p->children[1].offset, 3u);
  EXPECT_EQ(p->children[1].kind, Pattern::Kind::kSeq);
  EXPECT_EQ(p->children[1].children[0].kind, Pattern::Kind::kRepeat);
  auto e = parse_ebnf("x ::= \"a\"\nroot ::= x");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->rules.size(), 2u);
  EXPECT_EQ(e->rules[e->root].name, "root");
  EXPECT_EQ(e->rules[e->root].offset, 10u);
}

}  // namespace
}  // namespace cellm::grammar
