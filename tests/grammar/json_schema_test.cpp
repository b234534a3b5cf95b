// The JSON-schema compiler and the matcher on hand-picked texts: what each
// keyword accepts and refuses, and the refusals of unsupported schemas.
#include "grammar/json_schema.h"

#include <string>

#include <gtest/gtest.h>

#include "grammar/matcher.h"

namespace cellm::grammar {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> schema_grammar(const char* schema) {
  auto g = compile_json_schema(json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

void expect_accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  EXPECT_TRUE(Matcher::matches(g, text)) << "should accept: " << text;
}
void expect_rejects(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  EXPECT_FALSE(Matcher::matches(g, text)) << "should reject: " << text;
}

TEST(JsonObjectGrammar, AcceptsObjectsOnly) {
  auto g = compile_json_object();
  ASSERT_TRUE(g.ok());
  for (const char* ok : {"{}", " {}", "{\"a\": 1}", "{\"a\":[1,2.5e-3,{\"b\":null}],\"c\":\"x\"}",
                         "{\n  \"k\": true,\n  \"l\": false\n}", "{\"s\": \"\\u00e9\\n\\\"\"}",
                         "{\"\xc3\xa9\": \"\xe6\x97\xa5\xf0\x9f\x98\x80\"}", "{\"n\": -0.5}"}) {
    expect_accepts(*g, ok);
  }
  for (const char* bad :
       {"", "[]", "1", "\"s\"", "{", "{\"a\" 1}", "{\"a\":1,}", "{}x", "{} ", "{\"a\":01}",
        "{\"a\":1.}", "{\"a\":\"\x01\"}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":\"\xed\xa0\x80\"}",
        "{\"a\":\"\\x\"}", "{'a':1}", "{\"a\":tru}", "{\"a\":-}"}) {
    expect_rejects(*g, bad);
  }
}

TEST(JsonObjectGrammar, WhitespaceIsBounded) {
  JsonGrammarOptions options;
  options.max_whitespace = 4;
  auto g = compile_json_object(options);
  ASSERT_TRUE(g.ok());
  expect_accepts(*g, "{    }");
  expect_rejects(*g, "{     }");
  expect_accepts(*g, "{\"a\":    1}");
  expect_rejects(*g, "{\"a\":     1}");
}

TEST(JsonSchemaGrammar, ObjectPropertiesInOrderWithOptionalOnes) {
  auto g = schema_grammar(R"({"type":"object","properties":{"a":{"type":"integer"},
      "b":{"type":"string"},"c":{"type":"boolean"}},"required":["a","c"],
      "additionalProperties":false})");
  expect_accepts(g, R"({"a":1,"c":true})");
  expect_accepts(g, R"({"a": -12, "b": "x", "c": false})");
  expect_rejects(g, R"({"a":1})");                 // c is required
  expect_rejects(g, R"({"c":true,"a":1})");        // declared order
  expect_rejects(g, R"({"a":1.5,"c":true})");      // integer
  expect_rejects(g, R"({"a":1,"c":true,"d":1})");  // no other keys
  expect_rejects(g, R"({"a":1,,"c":true})");
  expect_rejects(g, R"({,"a":1,"c":true})");
}

TEST(JsonSchemaGrammar, AllOptionalProperties) {
  auto g = schema_grammar(
      R"({"type":"object","properties":{"x":{"type":"null"},"y":{"type":"number"}}})");
  for (const char* ok : {"{}", R"({"x":null})", R"({"y":2})", R"({"x":null,"y":1e5})"}) {
    expect_accepts(g, ok);
  }
  for (const char* bad : {R"({,})", R"({"x":null,})", R"({"y":1,"x":null})"}) {
    expect_rejects(g, bad);
  }
}

TEST(JsonSchemaGrammar, EnumConstAndTypeLists) {
  auto g = schema_grammar(R"({"type":"object","properties":{
      "color":{"enum":["red","green",3,null]},"v":{"const":"fixed"},
      "n":{"type":["string","null"]},"o":{"type":"integer","nullable":true}},
      "required":["color","v","n","o"]})");
  expect_accepts(g, R"({"color":"red","v":"fixed","n":null,"o":null})");
  expect_accepts(g, R"({"color":3,"v":"fixed","n":"s","o":7})");
  expect_accepts(g, R"({"color":null,"v":"fixed","n":"","o":0})");
  expect_rejects(g, R"({"color":"blue","v":"fixed","n":null,"o":null})");
  expect_rejects(g, R"({"color":"red","v":"other","n":null,"o":null})");
  expect_rejects(g, R"({"color":"red","v":"fixed","n":1,"o":null})");
}

TEST(JsonSchemaGrammar, ArraysWithBoundsAndPrefixItems) {
  auto g =
      schema_grammar(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  expect_accepts(g, "[1,2]");
  expect_accepts(g, "[1, 2, 3]");
  expect_rejects(g, "[1]");
  expect_rejects(g, "[1,2,3,4]");
  expect_rejects(g, "[1,2,]");
  auto open = schema_grammar(R"({"type":"array","items":{"type":"string"}})");
  expect_accepts(open, "[]");
  expect_accepts(open, R"(["a","b","c","d","e"])");
  expect_rejects(open, R"(["a",1])");
  auto tuple = schema_grammar(
      R"({"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":false})");
  expect_accepts(tuple, R"(["a",true])");
  expect_accepts(tuple, R"(["a"])");
  expect_rejects(tuple, R"(["a",true,1])");
  expect_rejects(tuple, R"([true])");
}

TEST(JsonSchemaGrammar, AnyOfAndRecursiveRefs) {
  auto g = schema_grammar(R"({"$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v","kids"],"additionalProperties":false}},"$ref":"#/$defs/node"})");
  expect_accepts(g, R"({"v":1,"kids":[]})");
  expect_accepts(g, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4,"kids":[]}]})");
  expect_rejects(g, R"({"v":1,"kids":[{"v":2}]})");
  auto any = schema_grammar(R"({"anyOf":[{"type":"object","properties":{"a":{"type":"string"}},
      "required":["a"]},{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"null"}},
      "required":["a","b"]}]})");
  expect_accepts(any, R"({"a":"x"})");
  expect_accepts(any, R"({"a":1,"b":null})");
  expect_rejects(any, R"({"a":1})");
  expect_rejects(any, R"({"a":"x","b":null})");
}

TEST(JsonSchemaGrammar, StringLengthsAndFormats) {
  auto g = schema_grammar(R"({"type":"string","minLength":2,"maxLength":3})");
  expect_accepts(g, R"("ab")");
  expect_accepts(g, "\"a\xc3\xa9\\n\"");  // three characters, one escaped
  expect_rejects(g, R"("a")");
  expect_rejects(g, R"("abcd")");
  auto date = schema_grammar(R"({"type":"string","format":"date"})");
  expect_accepts(date, R"("2024-02-28")");
  expect_accepts(date, R"("2024-01-31")");
  expect_accepts(date, R"("2024-11-30")");
  expect_rejects(date, R"("2024-02-29")");  // only dates valid in every year
  expect_rejects(date, R"("2024-04-31")");
  expect_rejects(date, R"("2024-13-01")");
  expect_rejects(date, R"("2024-1-01")");
  auto dt = schema_grammar(R"({"type":"string","format":"date-time"})");
  expect_accepts(dt, R"("2024-02-28T23:59:60Z")");
  expect_accepts(dt, R"("2024-02-28T08:05:00.123+05:30")");
  expect_rejects(dt, R"("2024-02-28T24:00:00Z")");
  expect_rejects(dt, R"("2024-02-28 08:05:00Z")");
  auto uuid = schema_grammar(R"({"type":"string","format":"uuid"})");
  expect_accepts(uuid, R"("123e4567-e89b-12d3-a456-426614174000")");
  expect_rejects(uuid, R"("123e4567e89b12d3a456426614174000")");
  auto email = schema_grammar(R"({"type":"string","format":"email"})");
  expect_accepts(email, R"("jane.doe+x@example.co.uk")");
  expect_accepts(email, R"("a@b.io")");
  expect_rejects(email, R"("jane.example.com")");
  expect_rejects(email, R"("a@b")");
  // RFC 5321 dot-atoms and RFC 1035 labels: a dot only between two
  // characters of the local part, a hyphen only inside a label.
  expect_accepts(email, R"("_x-1@my-host.example.org")");
  expect_rejects(email, R"("m.@example.com")");
  expect_rejects(email, R"(".m@example.com")");
  expect_rejects(email, R"("a..b@example.com")");
  expect_rejects(email, R"("a@-example.com")");
  expect_rejects(email, R"("a@example-.com")");
  expect_rejects(email, R"("a@example.c-")");
  // The local part's bound: 32 characters, dots included.
  expect_accepts(email, "\"" + std::string(15, 'a') + "." + std::string(16, 'b') + "@x.io\"");
  expect_rejects(email, "\"" + std::string(16, 'a') + "." + std::string(16, 'b') + "@x.io\"");
}

TEST(JsonSchemaGrammar, NumbersAreBounded) {
  auto g = schema_grammar(R"({"type":"number"})");
  expect_accepts(g, "1234567890123456");
  expect_rejects(g, "12345678901234567");
  expect_accepts(g, "-0.25E+10");
  expect_rejects(g, "+1");
  expect_rejects(g, "1e1234");
}

TEST(JsonSchemaGrammar, IntegerBounds) {
  auto g = schema_grammar(R"({"type":"integer","minimum":-37,"maximum":1205})");
  for (int v : {-37, -36, -10, -9, -1, 0, 1, 9, 10, 99, 100, 999, 1000, 1199, 1200, 1205}) {
    expect_accepts(g, std::to_string(v));
  }
  for (const char* bad : {"-38", "-40", "-100", "1206", "1300", "9999", "-0", "01", "1.0"}) {
    expect_rejects(g, bad);
  }
  auto positive = schema_grammar(R"({"type":"integer","exclusiveMinimum":0})");
  expect_accepts(positive, "1");
  expect_accepts(positive, "123456789");
  expect_rejects(positive, "0");
  expect_rejects(positive, "-5");
  auto below = schema_grammar(R"({"type":"integer","exclusiveMaximum":-2.5})");
  expect_accepts(below, "-3");
  expect_accepts(below, "-40000");
  expect_rejects(below, "-2");
  expect_rejects(below, "0");
  EXPECT_FALSE(
      compile_json_schema(json::parse(R"({"type":"integer","minimum":5,"maximum":4})")).ok());
}

// Each refusal names the keyword, so a client knows what to remove.
TEST(JsonSchemaGrammar, UnsupportedKeywordsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"string","pattern":"^a+$"})", "'pattern'"},
      {R"({"type":"number","minimum":0})", "'minimum'"},
      {R"({"allOf":[{"type":"string"}]})", "'allOf'"},
      {R"({"not":{"type":"string"}})", "'not'"},
      {R"({"type":"object","properties":{"a":{"type":"string","format":"hostname"}}})", "'format'"},
      {R"({"type":"object","patternProperties":{"^x":{}}})", "'patternProperties'"},
      {R"({"type":"integer","multipleOf":2})", "'multipleOf'"},
      {R"({"type":"strange"})", "'type'"},
      {R"({"$ref":"http://example.com/s.json"})", "'$ref'"},
  };
  for (const auto& [schema, keyword] : cases) {
    auto g = compile_json_schema(json::parse(schema));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(keyword), std::string::npos)
        << schema << " -> " << g.status().message();
  }
}

TEST(JsonSchemaGrammar, MalformedSchemasAreRefused) {
  for (const char* schema :
       {R"({"type":"object","required":["missing"],"properties":{}})", R"({"enum":[]})",
        R"({"$ref":"#/$defs/nowhere"})", R"({"type":"array","minItems":1000})",
        R"({"type":"array","minItems":3,"maxItems":2})", R"(false)", R"(7)",
        R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})",
        // Bounds that multiply past any sensible size.
        R"({"type":"array","maxItems":256,"items":{"type":"array","maxItems":256,"items":{
            "type":"array","maxItems":256,"items":{"type":"string","maxLength":256}}}})"}) {
    auto g = compile_json_schema(json::parse(schema));
    EXPECT_FALSE(g.ok()) << schema;
  }
  // A keyword of the wrong JSON type is refused by name, never thrown (the
  // fuzzer found "nullable": 2 escaping as an exception).
  for (const char* schema : {R"({"type":"string","nullable":2})",
                             R"({"type":"object","properties":{"b":{"type":"array",
                                 "items":{"type":"integer"},"nullable":"yes"}}})"}) {
    auto g = compile_json_schema(json::parse(schema));
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find("'nullable'"), std::string::npos) << g.status().to_string();
  }
}

TEST(JsonSchemaGrammar, AnnotationsAreIgnored) {
  auto g = schema_grammar(R"({"title":"T","description":"d","$schema":"x","type":"object",
      "properties":{"a":{"type":"string","description":"the a","default":"q","examples":["e"]}},
      "required":["a"],"additionalProperties":false})");
  expect_accepts(g, R"({"a":"z"})");
}

TEST(JsonSchemaGrammar, MapsFromAdditionalProperties) {
  auto g = schema_grammar(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  expect_accepts(g, "{}");
  expect_accepts(g, R"({"x":1,"y":2})");
  expect_rejects(g, R"({"x":"1"})");
  auto none = schema_grammar(R"({"type":"object","additionalProperties":false})");
  expect_accepts(none, "{}");
  expect_rejects(none, R"({"x":1})");
}

}  // namespace
}  // namespace cellm::grammar
