// Hostile and oversized input: deep nesting, huge templates, invalid UTF-8,
// runaway loops and memory growth all end in a clear error, never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace cellm::chat {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::string repeat(std::string_view s, std::size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (std::size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string parse_error(const std::string& source) {
  auto t = ChatTemplate::parse(source);
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : std::string(t.status().message());
}

TEST(ChatBadInputTest, DeepNestingIsAnErrorNotAStackOverflow) {
  EXPECT_THAT(parse_error(repeat("{% if true %}", 10000) + "x" + repeat("{% endif %}", 10000)),
              HasSubstr("nests deeper than"));
  EXPECT_THAT(parse_error("{{ " + repeat("(", 10000) + "1" + repeat(")", 10000) + " }}"),
              HasSubstr("nests deeper than"));
  EXPECT_THAT(parse_error("{{ " + repeat("[", 10000) + repeat("]", 10000) + " }}"),
              HasSubstr("nests deeper than"));
  EXPECT_THAT(parse_error("{{ " + repeat("not ", 10000) + "x }}"), HasSubstr("nests deeper than"));
  EXPECT_THAT(parse_error("{{ " + repeat("-", 10000) + "1 }}"), HasSubstr("nests deeper than"));
  // Long flat chains build deep trees without recursing: refused too.
  EXPECT_THAT(parse_error("{{ 1" + repeat(" + 1", 100000) + " }}"), HasSubstr("nests deeper than"));
  EXPECT_THAT(parse_error("{{ x" + repeat(".a", 100000) + " }}"), HasSubstr("nests deeper than"));
  EXPECT_THAT(parse_error("{{ x" + repeat("|trim", 100000) + " }}"),
              HasSubstr("nests deeper than"));
  // What real templates do stays well inside the limits.
  auto ok = ChatTemplate::parse(repeat("{% if true %}", 40) + "deep" + repeat("{% endif %}", 40));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(*ok->render(Json::object()), "deep");
}

TEST(ChatBadInputTest, MegabyteTemplatesRender) {
  // 1 MB of text around a loop, and ~1 MB of small tags.
  const std::string text(1 << 20, 'x');
  auto big =
      ChatTemplate::parse(text + "{% for m in messages %}{{ m.content }}{% endfor %}" + text);
  ASSERT_TRUE(big.ok()) << big.status().to_string();
  auto out = big->render(Json{{"messages", Json::array({{{"content", "!"}}})}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(out->size(), 2 * text.size() + 1);
  EXPECT_EQ((*out)[text.size()], '!');

  const auto start = std::chrono::steady_clock::now();
  auto tags = ChatTemplate::parse(repeat("{{ n }}{% if n %},{% endif %}", 1 << 15));  // ~1 MB
  ASSERT_TRUE(tags.ok()) << tags.status().to_string();
  auto tags_out = tags->render(Json{{"n", 1}});
  ASSERT_TRUE(tags_out.ok());
  EXPECT_EQ(*tags_out, repeat("1,", 1 << 15));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(ChatBadInputTest, InvalidUtf8IsRefused) {
  EXPECT_THAT(parse_error("ok \xff\xfe bad"), HasSubstr("not valid UTF-8 (byte offset 3)"));
  EXPECT_THAT(parse_error("{{ '\xc3' }}"), HasSubstr("UTF-8"));
  EXPECT_THAT(parse_error("\xed\xa0\x80"), HasSubstr("UTF-8"));  // an encoded surrogate
  EXPECT_THAT(parse_error("\xc0\xaf"), HasSubstr("UTF-8"));      // overlong '/'
  auto t = ChatTemplate::parse("{{ messages[0].content }}");
  ASSERT_TRUE(t.ok());
  nlohmann::json ctx;
  ctx["messages"] = nlohmann::json::array({nlohmann::json{{"content", std::string("a\xff")}}});
  auto out = t->render(ctx);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("messages[0].content"));
  // Valid multi-byte text passes through, indexed by code point.
  auto u = ChatTemplate::parse("{{ s[1] }}{{ s|length }}{{ s[::-1] }}");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(*u->render(Json{{"s", "a\xc3\xa9\xf0\x9f\x8e\x89"}}),
            "\xc3\xa9"
            "3"
            "\xf0\x9f\x8e\x89\xc3\xa9"
            "a");
  EXPECT_THAT(parse_error("{{ '\\ud800' }}"), HasSubstr("Unicode scalar"));
}

TEST(ChatBadInputTest, RunawayRendersHitTheirLimits) {
  RenderLimits limits;
  limits.max_steps = 200000;
  auto loop = ChatTemplate::parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(loop.ok());
  auto r1 = loop->render(Json::object(), limits);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.status().code(), StatusCode::kOutOfResources);
  EXPECT_THAT(std::string(r1.status().message()), HasSubstr("steps"));

  auto doubling = ChatTemplate::parse(
      "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% "
      "endfor %}{{ ns.s|length }}");
  ASSERT_TRUE(doubling.ok());
  auto r2 = doubling->render(Json::object());
  ASSERT_FALSE(r2.ok());
  EXPECT_EQ(r2.status().code(), StatusCode::kOutOfResources);

  auto huge = ChatTemplate::parse("{{ 'ab' * 100000000000 }}{{ range(10000000000)|length }}");
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(huge->render(Json::object()).status().code(), StatusCode::kOutOfResources);

  auto recursion = ChatTemplate::parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(recursion.ok());
  EXPECT_THAT(std::string(recursion->render(Json::object()).status().message()),
              HasSubstr("macro calls nest"));

  auto deep_value = ChatTemplate::parse(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor "
      "%}{{ ns.x|tojson }}");
  ASSERT_TRUE(deep_value.ok());
  EXPECT_THAT(std::string(deep_value->render(Json::object()).status().message()),
              HasSubstr("nests deeper"));
}

TEST(ChatBadInputTest, DeepJsonContextIsRefused) {
  std::string doc = repeat("[", 5000) + repeat("]", 5000);
  const Json deep = Json::parse(doc);
  auto t = ChatTemplate::parse("{{ x|length }}");
  ASSERT_TRUE(t.ok());
  auto out = t->render(Json{{"x", deep}});
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("nests deeper"));
  EXPECT_THAT(std::string(t->render(Json{{"x", 18446744073709551615ull}}).status().message()),
              HasSubstr("out of range"));
}

TEST(ChatBadInputTest, RefusedRenderLeavesTheTemplateUsable) {
  auto t = ChatTemplate::parse("{% if fail %}{{ raise_exception('no') }}{% endif %}ok");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->render(Json{{"fail", true}}).ok());
  EXPECT_EQ(*t->render(Json{{"fail", false}}), "ok");
}

}  // namespace
}  // namespace cellm::chat
