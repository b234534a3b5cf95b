// The grammar extension in the request layer: its shapes and aliases on both
// endpoints, each refusal naming its field (malformed values, two grammar
// fields, a grammar beside a JSON response_format or a forced tool call),
// and structured_constraint compiling the text: a grammar that does not
// compile is refused naming the field and the position, a good one
// constrains to its language and comes from the cache the second time.
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "grammar/token_grammar.h"
#include "server/openai_request.h"
#include "server/structured_output.h"

namespace cellm::server {
namespace {

std::optional<GenerationRequest> chat(const std::string& extra, RequestError* error) {
  return parse_request(RequestKind::kChat,
                       R"({"messages":[{"role":"user","content":"x"}])" + extra + "}",
                       RequestLimits{}, error);
}

std::optional<GenerationRequest> completion(const std::string& extra, RequestError* error) {
  return parse_request(RequestKind::kCompletion, R"({"prompt":"x")" + extra + "}", RequestLimits{},
                       error);
}

std::shared_ptr<const grammar::TokenVocabulary> byte_vocab() {
  std::vector<std::string> bytes;
  bytes.reserve(256);
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  return grammar::TokenVocabulary::create(bytes);
}

bool accepts(const StructuredOutput& out, std::string_view text) {
  const auto* g = dynamic_cast<const grammar::TokenGrammar*>(out.constraint.get());
  return g != nullptr && grammar::Matcher::matches(g->grammar_ptr(), text);
}

TEST(GrammarRequestTest, ShapesAndAliasesAreParsedOnBothEndpoints) {
  struct Shape {
    const char* body;
    GrammarSyntax syntax;
    const char* text;
    const char* param;
  };
  const Shape shapes[] = {
      {R"(,"grammar":{"type":"ebnf","value":"root ::= \"a\""})", GrammarSyntax::kEbnf,
       "root ::= \"a\"", "grammar.value"},
      {R"(,"grammar":{"type":"regex","value":"a+"})", GrammarSyntax::kRegex, "a+", "grammar.value"},
      {R"(,"grammar":"root ::= \"b\"")", GrammarSyntax::kEbnf, "root ::= \"b\"", "grammar"},
      {R"(,"guided_grammar":"root ::= \"c\"")", GrammarSyntax::kEbnf, "root ::= \"c\"",
       "guided_grammar"},
      {R"(,"guided_regex":"[0-9]{3}")", GrammarSyntax::kRegex, "[0-9]{3}", "guided_regex"},
  };
  for (const Shape& s : shapes) {
    for (auto parse : {chat, completion}) {
      RequestError e;
      auto r = parse(s.body, &e);
      ASSERT_TRUE(r) << s.body << ": " << e.status.to_string();
      EXPECT_EQ(r->grammar_syntax, s.syntax) << s.body;
      EXPECT_EQ(r->grammar_text, s.text) << s.body;
      EXPECT_EQ(r->grammar_param, s.param) << s.body;
    }
  }
  RequestError e;
  auto none = chat("", &e);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->grammar_syntax, GrammarSyntax::kNone);
  // null is absent, as for every other field.
  auto null = chat(R"(,"guided_regex":null)", &e);
  ASSERT_TRUE(null);
  EXPECT_EQ(null->grammar_syntax, GrammarSyntax::kNone);
}

TEST(GrammarRequestTest, MalformedAndConflictingFieldsNameTheirField) {
  const std::vector<std::pair<std::string, std::vector<const char*>>> cases = {
      {R"(,"grammar":5)", {"grammar", "'grammar' must be an object"}},
      {R"(,"grammar":{"type":"yaml","value":"a"})", {"grammar.type", R"("ebnf" or "regex")"}},
      {R"(,"grammar":{"value":"a"})", {"grammar.type"}},
      {R"(,"grammar":{"type":"regex"})", {"grammar.value", "non-empty string"}},
      {R"(,"grammar":{"type":"regex","value":""})", {"grammar.value"}},
      {R"(,"grammar":{"type":"regex","value":7})", {"grammar.value"}},
      {R"(,"grammar":{"type":"regex","value":"a","flags":"i"})", {"grammar.flags"}},
      {R"(,"guided_regex":["a"])", {"guided_regex"}},
      {R"(,"guided_grammar":"")", {"guided_grammar"}},
      {R"(,"grammar":"root ::= \"a\"","guided_regex":"a")",
       {"guided_regex", "'grammar' and 'guided_regex'"}},
      {R"(,"guided_grammar":"root ::= \"a\"","guided_regex":"a")",
       {"guided_regex", "'guided_grammar' and 'guided_regex'"}},
      {R"(,"guided_regex":"a","response_format":{"type":"json_object"})",
       {"guided_regex", "'response_format'"}},
      {R"(,"grammar":{"type":"ebnf","value":"root ::= \"a\""},"response_format":{
          "type":"json_schema","json_schema":{"name":"n","schema":{}}})",
       {"grammar", "'response_format'"}},
      {R"(,"guided_regex":"a","tool_choice":"required","tools":[{"type":"function",
          "function":{"name":"f","parameters":{"type":"object"}}}])",
       {"guided_regex", "'tool_choice'"}},
  };
  for (const auto& [body, expected] : cases) {
    RequestError e;
    EXPECT_FALSE(chat(body, &e)) << body;
    EXPECT_EQ(e.param, expected[0]) << body;
    EXPECT_EQ(e.status.code(), StatusCode::kInvalidArgument) << body;
    for (std::size_t i = 1; i < expected.size(); ++i) {
      EXPECT_NE(e.status.message().find(expected[i]), std::string::npos)
          << body << ": " << e.status.message();
    }
  }
  // A text response_format and tool_choice auto leave the grammar alone.
  RequestError e;
  auto r = chat(R"(,"guided_regex":"a","response_format":{"type":"text"},"tool_choice":"auto",
      "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])",
                &e);
  ASSERT_TRUE(r) << e.status.to_string();
  EXPECT_EQ(r->grammar_syntax, GrammarSyntax::kRegex);
}

TEST(GrammarRequestTest, GrammarsCompileOrAreRefusedNamingFieldAndPosition) {
  const auto vocab = byte_vocab();
  RequestError e;
  auto r = completion(R"(,"guided_regex":"(yes|no)-[0-9]{2}")", &e);
  ASSERT_TRUE(r) << e.status.to_string();
  StructuredOutput out = structured_constraint(*r, ToolFormat::kNone, vocab);
  ASSERT_TRUE(out.status.is_ok()) << out.status.to_string();
  EXPECT_TRUE(accepts(out, "yes-42"));
  EXPECT_FALSE(accepts(out, "maybe-42"));
  EXPECT_FALSE(out.tool_format.has_value());
  // The same text again is the cached constraint itself.
  StructuredOutput again = structured_constraint(*r, ToolFormat::kNone, vocab);
  EXPECT_EQ(again.constraint, out.constraint);
  // The same text as EBNF is another grammar (the syntax is part of the key).
  r = chat(
      R"(,"grammar":{"type":"ebnf","value":"root ::= item+\nitem ::= [a-c] | \"(\" item \")\""})",
      &e);
  ASSERT_TRUE(r) << e.status.to_string();
  out = structured_constraint(*r, ToolFormat::kNone, vocab);
  ASSERT_TRUE(out.status.is_ok()) << out.status.to_string();
  EXPECT_TRUE(accepts(out, "a(b)((c))"));
  EXPECT_FALSE(accepts(out, "a(b"));

  const std::vector<std::pair<std::string, std::vector<const char*>>> bad = {
      {R"j(,"guided_regex":"ab)")j", {"guided_regex", "line 1, column 3", "unbalanced ')'"}},
      {R"(,"grammar":{"type":"regex","value":"a{5,2}"})",
       {"grammar.value", "line 1, column 2", "maximum below its minimum"}},
      {R"(,"grammar":"root ::= expr\nexpr ::= expr \"+\" [0-9] | [0-9]")",
       {"grammar", "line 2, column 1", "'expr' is left-recursive"}},
      {R"(,"guided_grammar":"root ::= \"a\" b")",
       {"guided_grammar", "line 1, column 14", "'b' is used but never defined"}},
      {R"(,"grammar":{"type":"ebnf","value":"start ::= \"a\""})", {"grammar.value", "'root'"}},
  };
  for (const auto& [body, expected] : bad) {
    auto req = chat(body, &e);
    ASSERT_TRUE(req) << body << ": " << e.status.to_string();
    StructuredOutput refused = structured_constraint(*req, ToolFormat::kNone, vocab);
    EXPECT_EQ(refused.status.code(), StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(refused.param, expected[0]) << body;
    EXPECT_EQ(refused.constraint, nullptr) << body;
    for (std::size_t i = 1; i < expected.size(); ++i) {
      EXPECT_NE(refused.status.message().find(expected[i]), std::string::npos)
          << body << ": " << refused.status.message();
    }
  }
  // Without a vocabulary nothing can be constrained; the grammar's field is named.
  r = chat(R"(,"guided_regex":"a")", &e);
  ASSERT_TRUE(r);
  out = structured_constraint(*r, ToolFormat::kNone, nullptr);
  EXPECT_FALSE(out.status.is_ok());
  EXPECT_EQ(out.param, "guided_regex");
}

}  // namespace
}  // namespace cellm::server
