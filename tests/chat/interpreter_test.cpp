// Focused tests of the interpreter: error positions and messages, refused
// constructs, undefined semantics, the apply_chat_template binding, and
// concurrent renders. Expected strings here are small enough to derive by
// hand from Jinja's rules (the bulk comparison with Jinja itself lives in
// conformance_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace cellm::chat {
namespace {

using Json = nlohmann::ordered_json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

Result<std::string> render(std::string_view source, const Json& context = Json::object()) {
  CELLM_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
  return t.render(context);
}

std::string parse_error(std::string_view source) {
  auto t = ChatTemplate::parse(source);
  EXPECT_FALSE(t.ok()) << "parsed: " << source;
  return t.ok() ? "" : std::string(t.status().message());
}

std::string render_error(std::string_view source, const Json& context = Json::object()) {
  auto out = render(source, context);
  EXPECT_FALSE(out.ok()) << "rendered: " << (out.ok() ? *out : "");
  return out.ok() ? "" : std::string(out.status().message());
}

TEST(ChatInterpreterTest, SyntaxErrorsNameLineAndColumn) {
  EXPECT_THAT(parse_error("line1\n{% if %}"),
              AllOf(StartsWith("chat template 2:7:"), HasSubstr("expected an expression")));
  EXPECT_THAT(parse_error("{{ 1 + }}"), StartsWith("chat template 1:8:"));
  EXPECT_THAT(parse_error("{{ x | nope }}"),
              AllOf(StartsWith("chat template 1:8:"), HasSubstr("no filter named 'nope'")));
  EXPECT_THAT(parse_error("{% if x is nothing %}{% endif %}"),
              HasSubstr("no test named 'nothing'"));
  EXPECT_THAT(parse_error("ab\n  {{ 'unterminated }}"),
              AllOf(StartsWith("chat template 2:6:"), HasSubstr("unterminated string")));
  EXPECT_THAT(parse_error("x {{ y "), AllOf(StartsWith("chat template 1:3:"), HasSubstr("'}}'")));
  EXPECT_THAT(parse_error("{# never closed"),
              AllOf(StartsWith("chat template 1:1:"), HasSubstr("comment")));
  EXPECT_THAT(parse_error("{% for x in y %}abc"),
              AllOf(HasSubstr("opened at 1:4"), HasSubstr("endfor")));
  EXPECT_THAT(parse_error("{% if a %}{% endfor %}"), HasSubstr("unexpected '{% endfor %}'"));
  EXPECT_THAT(parse_error("{% endif %}"), HasSubstr("'{% endif %}'"));
  EXPECT_THAT(parse_error("{% break %}"), HasSubstr("outside of a for loop"));
  EXPECT_THAT(parse_error("{{ a ! b }}"),
              AllOf(StartsWith("chat template 1:6:"), HasSubstr("'!'")));
  EXPECT_THAT(parse_error("{{ 99999999999999999999 }}"), HasSubstr("too large"));
  EXPECT_THAT(parse_error("{{ 'a\\x4' }}"), HasSubstr("\\x"));
  EXPECT_THAT(parse_error("{{ }}"), HasSubstr("expected an expression"));
}

TEST(ChatInterpreterTest, UnsupportedConstructsAreRefusedByName) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"{% include 'x.j2' %}", "include"},
      {"{% extends 'base' %}", "extends"},
      {"{% import 'm' as m %}", "import"},
      {"{% call m() %}x{% endcall %}", "call"},
      {"{% for x in y recursive %}{% endfor %}", "recursive"},
      {"{{ x|truncate(3) }}", "truncate"},
      {"{{ f(*args) }}", "*args"},
      {"{% set x | upper %}a{% endset %}", "filters on a '{% set %}'"},
  };
  for (const auto& [source, name] : cases) {
    auto t = ChatTemplate::parse(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_EQ(t.status().code(), StatusCode::kNotSupported) << source;
    EXPECT_THAT(std::string(t.status().message()),
                AllOf(StartsWith("chat template 1:"), HasSubstr(name)));
  }
  // Unsupported at render time: printf-style formatting and non-string dict keys.
  EXPECT_THAT(render_error("{{ '%s' % 1 }}"), HasSubstr("printf-style"));
  EXPECT_THAT(render_error("{{ {1: 2} }}"), HasSubstr("dict keys must be strings"));
}

TEST(ChatInterpreterTest, RuntimeErrorsNameTheirPosition) {
  EXPECT_THAT(render_error("a\nb\n  {{ 1 / 0 }}"),
              AllOf(StartsWith("chat template 3:8:"), HasSubstr("division by zero")));
  EXPECT_THAT(render_error("{{ x.y }}"),
              AllOf(StartsWith("chat template 1:5:"), HasSubstr("'x' is undefined")));
  EXPECT_THAT(render_error("\n{{ [1]|join(attribute=none)|int(1, 2, 3) }}"),
              AllOf(StartsWith("chat template 2:"), HasSubstr("int")));
  EXPECT_THAT(render_error("{{ 'abc'.split('') }}"), HasSubstr("empty separator"));
  EXPECT_THAT(render_error("{{ 9223372036854775807 + 1 }}"), HasSubstr("overflow"));
  EXPECT_THAT(render_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), HasSubstr("at most 1"));
  EXPECT_THAT(render_error("{% macro m(a) %}{% endmacro %}{{ m(b=1) }}"),
              HasSubstr("no parameter named 'b'"));
}

TEST(ChatInterpreterTest, RaiseExceptionCarriesExactlyTheMessage) {
  auto out = render(
      "{% if messages|length > 1 %}{{ raise_exception('Only one message, got ' ~ messages|length) "
      "}}{% endif %}",
      Json{{"messages", Json::array({1, 2, 3})}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Only one message, got 3");
}

TEST(ChatInterpreterTest, UndefinedBehavesLikeJinjasDefault) {
  const Json ctx = {{"d", {{"a", 1}}}, {"n", nullptr}};
  EXPECT_EQ(*render("[{{ missing }}][{{ d.nokey }}][{{ n.attr }}][{{ d['x'] }}]", ctx), "[][][][]");
  EXPECT_EQ(
      *render("{% for x in missing %}x{% endfor %}{{ missing|length }}{{ missing is defined }}"
              "{{ d.nokey is defined }}{{ missing|default('dflt') }}{{ missing ~ '!' }}",
              ctx),
      "0FalseFalsedflt!");
  EXPECT_EQ(
      *render("{% if missing %}y{% else %}n{% endif %}{{ not missing }}{{ missing == missing }}"),
      "nTrueTrue");
  EXPECT_THAT(render_error("{{ missing.attr }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(render_error("{{ d.nokey.deeper }}", ctx),
              HasSubstr("'dict object' has no attribute 'nokey'"));
  EXPECT_THAT(render_error("{{ missing() }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(render_error("{{ missing + 1 }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(render_error("{{ missing[0] }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(render_error("{{ missing|tojson }}"), HasSubstr("not JSON serializable"));
  EXPECT_THAT(render_error("{% for x in n %}{% endfor %}", ctx), HasSubstr("not iterable"));
  EXPECT_THAT(render_error("{{ 5() }}"), HasSubstr("not callable"));
}

TEST(ChatInterpreterTest, StrftimeNowFormatsTheLocalDate) {
  auto out = render("{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('') }}|");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ(out->size(), 12u) << *out;
  EXPECT_TRUE(std::isdigit(static_cast<unsigned char>((*out)[0])));
  EXPECT_EQ((*out)[4], '-');
  EXPECT_EQ(out->substr(10), "||");
}

TEST(ChatInterpreterTest, ImmutableInputsAndNamespaceRules) {
  EXPECT_THAT(render_error("{{ l.append(1) }}", Json{{"l", Json::array()}}), HasSubstr("unsafe"));
  EXPECT_THAT(render_error("{{ d.update({}) }}", Json{{"d", Json::object()}}), HasSubstr("unsafe"));
  EXPECT_THAT(render_error("{% set x = 1 %}{% set x.y = 2 %}"), HasSubstr("not a namespace"));
  EXPECT_THAT(render_error("{% set ns = namespace() %}{% set ns._p = 1 %}"), HasSubstr("'_'"));
  EXPECT_THAT(render_error("{% set ns = namespace() %}{% set ns.me = [ns] %}"),
              HasSubstr("inside a namespace"));
  EXPECT_THAT(render_error("{{ namespace(_x=1) }}"), HasSubstr("'_'"));
}

TEST(ChatInterpreterTest, ContextKeyOrderFollowsTheJsonType) {
  auto t = ChatTemplate::parse("{{ d|tojson }}|{% for k, v in d.items() %}{{ k }}{% endfor %}");
  ASSERT_TRUE(t.ok());
  const std::string doc = R"({"d": {"zeta": 1, "alpha": 2}})";
  EXPECT_EQ(*t->render(Json::parse(doc)), R"({"zeta": 1, "alpha": 2}|zetaalpha)");
  EXPECT_EQ(*t->render(nlohmann::json::parse(doc)), R"({"alpha": 2, "zeta": 1}|alphazeta)");
  EXPECT_THAT(std::string(t->render(Json::array()).status().message()),
              HasSubstr("must be a JSON object"));
}

TEST(ChatInterpreterTest, ApplyChatTemplateBindsLikeTransformers) {
  auto t = ChatTemplate::parse(
      "{{ bos_token }}|{{ tools is none }}|{{ messages[0].content is defined }}|{{ "
      "add_generation_prompt }}|{{ flag }}");
  ASSERT_TRUE(t.ok());
  const Json messages = Json::parse(R"([{"role": "user", "content": null}])");
  auto out = apply_chat_template(*t, messages, true, Json{{"flag", 7}, {"bos_token", "<B>"}},
                                 Json{{"bos_token", "<s>"}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  EXPECT_EQ(*out, "<B>|True|False|True|7");

  EXPECT_THAT(
      std::string(apply_chat_template(*t, Json::object(), false, {}, {}).status().message()),
      HasSubstr("array"));
  EXPECT_THAT(
      std::string(apply_chat_template(*t, Json::array({"x"}), false, {}, {}).status().message()),
      HasSubstr("messages[0]"));
  EXPECT_THAT(
      std::string(
          apply_chat_template(*t, messages, false, Json{{"messages", 1}}, {}).status().message()),
      HasSubstr("'messages'"));
  EXPECT_THAT(
      std::string(apply_chat_template(*t, messages, false, Json{{"tools", Json::array({1})}}, {})
                      .status()
                      .message()),
      HasSubstr("tool"));
}

TEST(ChatInterpreterTest, ParsedTemplateRendersConcurrently) {
  auto t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m|length %}{{ m "
      "}}{% endfor %}={{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      Json messages = Json::array();
      for (std::size_t k = 0; k <= i; ++k) messages.push_back(std::string(k + 1, 'a'));
      for (int rep = 0; rep < 50; ++rep)
        results[i] = t->render(Json{{"messages", messages}}).value_or("error");
    });
  }
  for (auto& th : threads) th.join();
  for (std::size_t i = 0; i < results.size(); ++i) {
    std::string expected;
    std::size_t total = 0;
    for (std::size_t k = 0; k <= i; ++k) {
      expected += std::string(k + 1, 'a');
      total += k + 1;
    }
    EXPECT_EQ(results[i], expected + "=" + std::to_string(total));
  }
}

}  // namespace
}  // namespace cellm::chat
