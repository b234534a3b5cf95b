// Structured outputs in the request layer: response_format parsing (each
// refusal names its field), tool_choice required/named, and the grammars
// structured_constraint builds: a bad schema is refused naming the keyword
// and its field, a forced call is written in the model's convention with one
// of the offered tools and arguments of its schema.
#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "grammar/token_grammar.h"
#include "server/openai_request.h"
#include "server/structured_output.h"

namespace cellm::server {
namespace {

using json = nlohmann::ordered_json;

std::optional<GenerationRequest> chat(const std::string& extra, RequestError* error) {
  return parse_request(RequestKind::kChat,
                       R"({"messages":[{"role":"user","content":"x"}])" + extra + "}",
                       RequestLimits{}, error);
}

std::shared_ptr<const grammar::TokenVocabulary> byte_vocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  return grammar::TokenVocabulary::create(bytes);
}

// Whether the constraint's grammar accepts `text` whole.
bool accepts(const StructuredOutput& out, std::string_view text) {
  auto* g = dynamic_cast<const grammar::TokenGrammar*>(out.constraint.get());
  return g != nullptr && grammar::Matcher::matches(g->grammar_ptr(), text);
}

TEST(StructuredRequestTest, ResponseFormatsAreParsed) {
  RequestError e;
  auto r = chat(R"(,"response_format":{"type":"json_object"})", &e);
  ASSERT_TRUE(r) << e.status.to_string();
  EXPECT_EQ(r->response_format, ResponseFormat::kJsonObject);
  r = chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,
      "schema":{"type":"object","properties":{"a":{"type":"string"}}}}})",
           &e);
  ASSERT_TRUE(r) << e.status.to_string();
  EXPECT_EQ(r->response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(r->response_schema["properties"]["a"]["type"], "string");
  r = chat(R"(,"response_format":{"type":"text"})", &e);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->response_format, ResponseFormat::kText);
  auto c = parse_request(RequestKind::kCompletion,
                         R"({"prompt":"x","response_format":{"type":"json_object"}})",
                         RequestLimits{}, &e);
  ASSERT_TRUE(c) << e.status.to_string();
  EXPECT_EQ(c->response_format, ResponseFormat::kJsonObject);
}

TEST(StructuredRequestTest, MalformedResponseFormatsNameTheirField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(,"response_format":"json")", "response_format"},
      {R"(,"response_format":{"type":"yaml"})", "response_format.type"},
      {R"(,"response_format":{})", "response_format.type"},
      {R"(,"response_format":{"type":"json_object","schema":{}})", "response_format.schema"},
      {R"(,"response_format":{"type":"json_schema"})", "response_format.json_schema"},
      {R"(,"response_format":{"type":"json_schema","json_schema":{"schema":{}}})",
       "response_format.json_schema.name"},
      {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"n"}})",
       "response_format.json_schema.schema"},
      {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{},
          "strict":"yes"}})",
       "response_format.json_schema.strict"},
      {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{},
          "extra":1}})",
       "response_format.json_schema.extra"},
  };
  for (const auto& [body, param] : cases) {
    RequestError e;
    EXPECT_FALSE(chat(body, &e)) << body;
    EXPECT_EQ(e.param, param) << body;
    EXPECT_EQ(e.status.code(), StatusCode::kInvalidArgument) << body;
  }
}

TEST(StructuredRequestTest, SchemasCompileOrAreRefusedNamingTheKeyword) {
  RequestError e;
  auto r = chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p",
      "schema":{"type":"object","properties":{"n":{"type":"number","minimum":3}}}}})",
                &e);
  ASSERT_TRUE(r);
  StructuredOutput out = structured_constraint(*r, ToolFormat::kNone, byte_vocab());
  EXPECT_EQ(out.status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out.param, "response_format.json_schema.schema");
  EXPECT_NE(out.status.message().find("'minimum'"), std::string::npos) << out.status.message();
  EXPECT_EQ(out.constraint, nullptr);

  r = chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p",
      "schema":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}}})",
           &e);
  ASSERT_TRUE(r);
  out = structured_constraint(*r, ToolFormat::kNone, byte_vocab());
  ASSERT_TRUE(out.status.is_ok()) << out.status.to_string();
  EXPECT_TRUE(accepts(out, R"({"n": 5})"));
  EXPECT_FALSE(accepts(out, R"({"n": "5"})"));
  EXPECT_FALSE(out.tool_format.has_value());
  // The same schema again comes from the cache.
  EXPECT_EQ(structured_constraint(*r, ToolFormat::kNone, byte_vocab()).constraint != nullptr, true);
  // Without a vocabulary nothing can be constrained.
  out = structured_constraint(*r, ToolFormat::kNone, nullptr);
  EXPECT_FALSE(out.status.is_ok());
  EXPECT_EQ(out.param, "response_format");
  // Plain text needs no grammar.
  r = chat("", &e);
  ASSERT_TRUE(r);
  EXPECT_EQ(structured_constraint(*r, ToolFormat::kNone, byte_vocab()).constraint, nullptr);
}

const char* kTools = R"(,"tools":[{"type":"function","function":{"name":"weather","parameters":{
    "type":"object","properties":{"city":{"type":"string"}},"required":["city"],
    "additionalProperties":false}}},{"type":"function","function":{"name":"add","parameters":{
    "type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},
    "required":["a","b"],"additionalProperties":false}}}])";

TEST(StructuredRequestTest, ForcedCallsFollowTheModelsConvention) {
  RequestError e;
  auto r = chat(std::string(kTools) + R"(,"tool_choice":"required")", &e);
  ASSERT_TRUE(r) << e.status.to_string();
  EXPECT_EQ(r->tool_choice, ToolChoice::kRequired);
  auto vocab = byte_vocab();
  StructuredOutput hermes = structured_constraint(*r, ToolFormat::kHermes, vocab);
  ASSERT_TRUE(hermes.status.is_ok()) << hermes.status.to_string();
  EXPECT_EQ(hermes.tool_format, ToolFormat::kHermes);
  EXPECT_TRUE(accepts(hermes,
                      "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}"
                      "\n</tool_call>"));
  EXPECT_TRUE(accepts(hermes,
                      "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}"
                      "\n</tool_call>"));
  // Arguments of the other tool, an unknown tool, or no wrapper: refused.
  EXPECT_FALSE(accepts(hermes,
                       "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"city\": "
                       "\"Oslo\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(hermes,
                       "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n"
                       "</tool_call>"));
  EXPECT_FALSE(accepts(hermes, "{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}"));

  StructuredOutput llama = structured_constraint(*r, ToolFormat::kLlama3, vocab);
  EXPECT_TRUE(accepts(llama, R"({"name": "add", "parameters": {"a": 1, "b": 2}})"));
  EXPECT_FALSE(accepts(llama, R"({"name": "add", "arguments": {"a": 1, "b": 2}})"));
  StructuredOutput mistral = structured_constraint(*r, ToolFormat::kMistral, vocab);
  EXPECT_TRUE(accepts(mistral, R"([{"name": "add", "arguments": {"a": 1, "b": 2}}])"));
  // No convention of its own (and Gemma's Python form): a bare JSON call,
  // read back with the Llama 3 JSON parser.
  StructuredOutput none = structured_constraint(*r, ToolFormat::kNone, vocab);
  EXPECT_EQ(none.tool_format, ToolFormat::kLlama3);
  EXPECT_TRUE(accepts(none, R"({"name": "weather", "arguments": {"city": "Rome"}})"));
  EXPECT_EQ(structured_constraint(*r, ToolFormat::kGemma, vocab).tool_format, ToolFormat::kLlama3);

  auto named = chat(
      std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"add"}})", &e);
  ASSERT_TRUE(named) << e.status.to_string();
  EXPECT_EQ(named->tool_choice, ToolChoice::kNamed);
  EXPECT_EQ(named->tool_choice_name, "add");
  StructuredOutput only = structured_constraint(*named, ToolFormat::kNone, vocab);
  EXPECT_TRUE(accepts(only, R"({"name": "add", "arguments": {"a": 1, "b": 2}})"));
  EXPECT_FALSE(accepts(only, R"({"name": "weather", "arguments": {"city": "Rome"}})"));
}

TEST(StructuredRequestTest, ForcedCallRefusals) {
  RequestError e;
  // A tool whose parameters use an unsupported keyword names the tool.
  auto r = chat(R"(,"tools":[{"type":"function","function":{"name":"f","parameters":{
      "type":"object","properties":{"x":{"type":"string","pattern":"a+"}}}}}],
      "tool_choice":"required")",
                &e);
  ASSERT_TRUE(r) << e.status.to_string();
  StructuredOutput out = structured_constraint(*r, ToolFormat::kHermes, byte_vocab());
  EXPECT_EQ(out.param, "tools[0].function.parameters");
  EXPECT_NE(out.status.message().find("'pattern'"), std::string::npos);
  // A forced call and a JSON response_format contradict each other.
  r = chat(
      std::string(kTools) + R"(,"tool_choice":"required","response_format":{"type":"json_object"})",
      &e);
  ASSERT_TRUE(r);
  out = structured_constraint(*r, ToolFormat::kHermes, byte_vocab());
  EXPECT_EQ(out.param, "response_format");
  // "required" needs tools; tool_choice "none" drops them.
  EXPECT_FALSE(chat(R"(,"tool_choice":"required")", &e));
  EXPECT_EQ(e.param, "tool_choice");
  r = chat(std::string(kTools) + R"(,"tool_choice":"none")", &e);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->tools.is_null());
  EXPECT_EQ(structured_constraint(*r, ToolFormat::kHermes, byte_vocab()).constraint, nullptr);
}

}  // namespace
}  // namespace cellm::server
