// JsonPrefixScanner (json_prefix.h) against nlohmann's parser: valid
// documents and every prefix of them, hand-picked invalid ones (refused at
// the first bad byte: grammar, escapes, unpaired surrogates, invalid UTF-8),
// where members begin and end, and random mutations (fixed seed): a whole
// text is accepted and done exactly when nlohmann parses it.
#include "server/json_prefix.h"

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "json_prefix_feed.h"

namespace cellm::server {
namespace {

using nlohmann::json;

bool whole_json(const std::string& text) {
  JsonPrefixScanner s;
  return accepted(text, &s) == text.size() && s.done();
}

const std::vector<std::string> kValidDocs = {
    R"({})",
    R"({"a": 1})",
    R"({"city": "Paris", "days": [1, 2.5, -3e2, 0, -0.5E+3], "ok": true, "no": null, "x": false})",
    R"({"nested": {"deep": {"deeper": [[], [{}], [[1]]]}}, "s": "}{][\"\\\/\b\f\n\r\t\u00e9"})",
    R"({"q": "a \"quoted\" {brace} [bracket]", "path": "C:\\dir\\"})",
    "{ \"spaced\" :\n\t[ 1 , 2 ] ,\r\n \"k\" : { } }",
    R"({"unicode": "caf\u00E9 \ud83d\ude00", "raw": "été 😀"})",
    R"([1, "two", {"three": 3}])",
    R"("just a string")",
};

TEST(JsonPrefixScannerTest, ValidDocumentsAndAllTheirPrefixes) {
  for (const std::string& doc : kValidDocs) {
    ASSERT_TRUE(json::accept(doc)) << doc;
    JsonPrefixScanner s;
    for (std::size_t i = 0; i < doc.size(); ++i) {
      ASSERT_TRUE(s.push(doc[i]).ok) << doc << " at " << i;
      EXPECT_EQ(s.done(), i + 1 == doc.size()) << doc << " at " << i;
    }
    // Nothing may follow the value.
    EXPECT_FALSE(s.push('x').ok);
  }
}

TEST(JsonPrefixScannerTest, InvalidTextIsRefusedAtTheFirstBadByte) {
  // The text, and how many bytes of it are a valid prefix.
  const std::vector<std::pair<std::string, std::size_t>> cases = {
      {R"({"a": tru})", 9},
      {R"({"a" 1})", 5},
      {R"({"a": "x\q"})", 9},
      {R"([1,])", 3},
      {R"({"a": 01})", 7},
      {R"({"a": -})", 7},
      {R"({"a": 1.})", 8},
      {R"({"a": 1e})", 8},
      {R"({"a": 1,})", 8},
      {R"({a: 1})", 1},
      {R"({"a": 1]})", 7},
      {R"({"a": "\u12g4"})", 11},
      {"{\"a\": \"x\ny\"}", 8},
      {R"({"a": +1})", 6},
      {R"(})", 0},
      {R"({"a": "\ud83d"})", 13},
      {R"({"a": "\ud83dx"})", 13},
      {R"({"a": "\ude00"})", 12},
      {R"({"a": "\ud83d\u0041"})", 18},
      // Invalid UTF-8: a cut sequence, a stray continuation byte, an overlong
      // form, an encoded surrogate, a code point past U+10FFFF.
      {"{\"a\": \"\xC3\"}", 8},
      {"{\"a\": \"\x80\"}", 7},
      {"{\"a\": \"\xC0\xAF\"}", 7},
      {"{\"a\": \"\xED\xA0\x80\"}", 8},
      {"{\"a\": \"\xF4\x90\x80\x80\"}", 8},
  };
  for (const auto& [text, good] : cases) {
    EXPECT_FALSE(json::accept(text)) << text;
    JsonPrefixScanner s;
    EXPECT_EQ(accepted(text, &s), good) << text;
    EXPECT_TRUE(s.failed()) << text;
  }
}

TEST(JsonPrefixScannerTest, ReportsWhereMembersBeginAndEnd) {
  const std::string doc = R"({"k": {"n": [1]}, "s": "v", "t": true})";
  JsonPrefixScanner s;
  std::vector<std::string> events;  // "<begin|end> <key|value> level@pos"
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const JsonPrefixScanner::Step step = s.push(doc[i]);
    ASSERT_TRUE(step.ok);
    const std::string what = std::string(step.key ? "key " : "value ") +
                             std::to_string(step.level) + "@" + std::to_string(i);
    if (step.begins) events.push_back("begin " + what);
    if (step.ends) events.push_back("end " + what);
  }
  // Positions from the text itself, not from the scanner.
  const auto at = [&](std::string_view needle, std::size_t from = 0) {
    return std::to_string(doc.find(needle, from));
  };
  const std::size_t v = doc.find("\"v\"");
  const std::vector<std::string> want = {
      "begin value 0@0",
      "begin key 1@" + at("\"k\""),
      "end key 1@" + std::to_string(doc.find("\"k\"") + 2),
      "begin value 1@" + at("{", 1),
      "begin key 2@" + at("\"n\""),
      "end key 2@" + std::to_string(doc.find("\"n\"") + 2),
      "begin value 2@" + at("["),
      "begin value 3@" + at("1"),
      "end value 2@" + at("]"),
      "end value 1@" + at("}"),
      "begin key 1@" + at("\"s\""),
      "end key 1@" + std::to_string(doc.find("\"s\"") + 2),
      "begin value 1@" + std::to_string(v),
      "end value 1@" + std::to_string(v + 2),
      "begin key 1@" + at("\"t\""),
      "end key 1@" + std::to_string(doc.find("\"t\"") + 2),
      "begin value 1@" + at("true"),
      "end value 1@" + std::to_string(doc.find("true") + 3),
      "end value 0@" + std::to_string(doc.size() - 1),
  };
  EXPECT_EQ(events, want);
}

TEST(JsonPrefixScannerTest, AgreesWithNlohmannOnRandomMutations) {
  static constexpr std::string_view kAlphabet = "{}[]\":,\\ abtrufnl0123456789.eE+-u";
  std::mt19937_64 rng(36);
  int valid = 0;
  int invalid = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string text = kValidDocs[rng() % kValidDocs.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const std::size_t at = rng() % text.size();
      const char c = kAlphabet[rng() % kAlphabet.size()];
      switch (rng() % 3) {
        case 0: text[at] = c; break;
        case 1: text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: text.erase(at, 1); break;
      }
    }
    // nlohmann allows whitespace around the value; the scanner refuses
    // anything after it, so such texts are left out.
    // A top-level number never ends for the scanner (nothing follows it).
    if (!text.empty() && (text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) continue;
    if (text.empty() || text.back() == ' ' || text.front() == ' ') continue;
    const bool want = json::accept(text);
    EXPECT_EQ(whole_json(text), want) << text;
    (want ? valid : invalid)++;
  }
  // Both sides of the comparison were exercised.
  EXPECT_GT(valid, 100);
  EXPECT_GT(invalid, 1000);
}

}  // namespace
}  // namespace cellm::server
