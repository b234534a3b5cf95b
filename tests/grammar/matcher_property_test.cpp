// Property tests of the schema grammars: random values of a schema, written
// with random (bounded) whitespace, are always accepted; semantic mutations
// (an undeclared key, a missing required key, a value outside an enum, a
// wrong type) and truncations are always rejected; and whatever a random
// byte-level mutation makes, the matcher accepts it only if it parses as JSON
// and validates against the schema (an independent validator written here
// from the JSON Schema definitions).
#include <random>
#include <regex>

#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace cellm::grammar {
namespace {

using json = nlohmann::ordered_json;
using Rng = std::mt19937_64;

const json* resolve(const json& root, const std::string& ref) {
  if (ref == "#") return &root;
  for (std::string prefix : {"#/$defs/", "#/definitions/"}) {
    if (ref.starts_with(prefix)) {
      return &root.at(prefix.substr(2, prefix.size() - 3)).at(ref.substr(prefix.size()));
    }
  }
  return nullptr;
}

std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

bool format_ok(const std::string& format, const std::string& s) {
  static const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  static const std::string time =
      R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  if (format == "date") return std::regex_match(s, std::regex(date));
  if (format == "time") return std::regex_match(s, std::regex(time));
  if (format == "date-time") return std::regex_match(s, std::regex(date + "T" + time));
  if (format == "uuid") {
    return std::regex_match(
        s, std::regex(R"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"));
  }
  if (format == "email") return s.find('@') != std::string::npos;
  return false;
}

// JSON Schema validation for the subset the compiler supports.
bool valid(const json& root, const json& s, const json& v) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) return valid(root, *resolve(root, s["$ref"]), v);
  if (s.value("nullable", false) && v.is_null()) return true;
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const json& e : s["enum"]) {
      if (e == v) return true;
    }
    return false;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (s.contains(key)) {
      for (const json& b : s[key]) {
        if (valid(root, b, v)) return true;
      }
      return false;
    }
  }
  if (!s.contains("type")) return true;
  std::vector<std::string> types;
  if (s["type"].is_string()) {
    types.push_back(s["type"]);
  } else {
    for (const json& t : s["type"]) types.push_back(t);
  }
  for (const std::string& t : types) {
    if (t == "null" && v.is_null()) return true;
    if (t == "boolean" && v.is_boolean()) return true;
    if (t == "integer" && v.is_number_integer()) {
      const auto x = v.get<std::int64_t>();
      if (s.contains("minimum") && x < s["minimum"].get<double>()) continue;
      if (s.contains("maximum") && x > s["maximum"].get<double>()) continue;
      if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) continue;
      if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) continue;
      return true;
    }
    if (t == "number" && v.is_number()) return true;
    if (t == "string" && v.is_string()) {
      const std::string str = v.get<std::string>();
      const std::size_t n = code_points(str);
      if (s.contains("minLength") && n < s["minLength"].get<std::size_t>()) continue;
      if (s.contains("maxLength") && n > s["maxLength"].get<std::size_t>()) continue;
      if (s.contains("format") && !format_ok(s["format"], str)) continue;
      return true;
    }
    if (t == "array" && v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>()) continue;
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<std::size_t>()) continue;
      bool ok = true;
      for (std::size_t i = 0; i < v.size() && ok; ++i) {
        if (s.contains("prefixItems") && i < s["prefixItems"].size()) {
          ok = valid(root, s["prefixItems"][i], v[i]);
        } else if (s.contains("items")) {
          ok = valid(root, s["items"], v[i]);
        }
      }
      if (ok) return true;
    }
    if (t == "object" && v.is_object()) {
      bool ok = true;
      for (const json& r : s.value("required", json::array())) ok = ok && v.contains(r);
      const json props = s.value("properties", json::object());
      for (auto it = v.begin(); it != v.end() && ok; ++it) {
        if (props.contains(it.key())) {
          ok = valid(root, props[it.key()], it.value());
        } else if (s.contains("additionalProperties")) {
          ok = valid(root, s["additionalProperties"], it.value());
        }
      }
      if (ok) return true;
    }
  }
  return false;
}

std::string random_text(Rng& rng, std::size_t n) {
  static const std::vector<std::string> pieces = {
      "a",  "Z",  " ", "7",        "\"",           "\\",
      "\n", "\t", "/", "\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80",
      "{",  "}",  ","};
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
  return s;
}

json generate(const json& root, const json& s, Rng& rng, int depth = 0);

json generate_typed(const json& root, const json& s, const std::string& t, Rng& rng, int depth) {
  if (t == "null") return nullptr;
  if (t == "boolean") return rng() % 2 == 0;
  if (t == "integer") {
    // Inside the bounds the schema gives (inclusive ones here).
    const auto lo = static_cast<std::int64_t>(s.value("minimum", -1000000.0));
    const auto hi = static_cast<std::int64_t>(s.value("maximum", 1000000.0));
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  if (t == "number")
    return static_cast<double>(static_cast<std::int64_t>(rng() % 200001) - 100000) / 64.0;
  if (t == "string") {
    if (s.contains("format")) {
      const std::string f = s["format"];
      char buf[64];
      if (f == "date") {
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", static_cast<int>(rng() % 10000),
                      static_cast<int>(1 + rng() % 12), static_cast<int>(1 + rng() % 28));
      } else if (f == "date-time") {
        std::snprintf(buf, sizeof buf, "2025-%02d-%02dT%02d:%02d:%02d%s",
                      static_cast<int>(1 + rng() % 12), static_cast<int>(1 + rng() % 28),
                      static_cast<int>(rng() % 24), static_cast<int>(rng() % 60),
                      static_cast<int>(rng() % 60), rng() % 2 ? "Z" : ".5-03:30");
      } else if (f == "uuid") {
        std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(rng()),
                      static_cast<unsigned>(rng() % 65536), static_cast<unsigned>(rng() % 65536),
                      static_cast<unsigned>(rng() % 65536),
                      static_cast<unsigned long long>(rng() % (1ull << 48)));
      } else if (f == "time") {
        std::snprintf(buf, sizeof buf, "%02d:%02d:%02d%s", static_cast<int>(rng() % 24),
                      static_cast<int>(rng() % 60), static_cast<int>(rng() % 61),
                      rng() % 2 ? "Z" : "+01:00");
      } else {
        std::snprintf(buf, sizeof buf, "user%d@mail.example.org", static_cast<int>(rng() % 999));
      }
      return std::string(buf);
    }
    const std::size_t lo = s.value("minLength", 0);
    const std::size_t hi = s.value("maxLength", lo + 8);
    return random_text(rng, lo + rng() % (hi - lo + 1));
  }
  if (t == "array") {
    const std::size_t prefix = s.contains("prefixItems") ? s["prefixItems"].size() : 0;
    const std::size_t lo = s.value("minItems", 0);
    std::size_t hi = s.value("maxItems", std::max(lo, prefix) + (depth > 3 ? 0 : 3));
    if (s.contains("items") && s["items"].is_boolean() && !s["items"].get<bool>()) {
      hi = std::min(hi, prefix);
    }
    const std::size_t n = lo + rng() % (hi - lo + 1);
    json a = json::array();
    for (std::size_t i = 0; i < n; ++i) {
      a.push_back(generate(root,
                           i < prefix ? s["prefixItems"][i] : s.value("items", json::object()), rng,
                           depth + 1));
    }
    return a;
  }
  json o = json::object();
  const json props = s.value("properties", json::object());
  const json required = s.value("required", json::array());
  for (auto it = props.begin(); it != props.end(); ++it) {
    bool req = false;
    for (const json& r : required) req = req || r == it.key();
    if (req || rng() % 2 == 0) o[it.key()] = generate(root, it.value(), rng, depth + 1);
  }
  if (props.empty() && s.contains("additionalProperties") &&
      s["additionalProperties"].is_object()) {
    for (std::size_t i = rng() % 3; i > 0; --i) {
      o[random_text(rng, 1 + rng() % 4)] =
          generate(root, s["additionalProperties"], rng, depth + 1);
    }
  }
  return o;
}

json generate(const json& root, const json& s, Rng& rng, int depth) {
  if (s.contains("$ref")) return generate(root, *resolve(root, s["$ref"]), rng, depth);
  if (s.value("nullable", false) && rng() % 4 == 0) return nullptr;
  if (s.contains("const")) return s["const"];
  if (s.contains("enum")) return s["enum"][rng() % s["enum"].size()];
  for (const char* key : {"anyOf", "oneOf"}) {
    if (s.contains(key)) return generate(root, s[key][rng() % s[key].size()], rng, depth);
  }
  if (!s.contains("type")) return static_cast<std::int64_t>(rng() % 10);
  if (s["type"].is_array()) {
    return generate_typed(root, s, s["type"][rng() % s["type"].size()], rng, depth);
  }
  return generate_typed(root, s, s["type"], rng, depth);
}

std::string ws(Rng& rng) {
  static const char kWs[] = {' ', '\n', '\t', '\r'};
  std::string s;
  for (std::size_t n = rng() % 4 == 0 ? rng() % 5 : 0; n > 0; --n) s += kWs[rng() % 4];
  return s;
}

// JSON text with random bounded whitespace wherever JSON allows it.
std::string write(const json& v, Rng& rng) {
  // Appended piece by piece (GCC 12 warns falsely about "x" + std::string).
  std::string s;
  if (v.is_object()) {
    s += '{';
    s += ws(rng);
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) {
        s += ',';
        s += ws(rng);
      }
      first = false;
      s += json(it.key()).dump();
      s += ws(rng);
      s += ':';
      s += ws(rng);
      s += write(it.value(), rng);
      s += ws(rng);
    }
    s += '}';
    return s;
  }
  if (v.is_array()) {
    s += '[';
    s += ws(rng);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0) {
        s += ',';
        s += ws(rng);
      }
      s += write(v[i], rng);
      s += ws(rng);
    }
    s += ']';
    return s;
  }
  return v.dump();
}

const char* const kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
        "email":{"type":"string","format":"email"}},"required":["name","age"],
        "additionalProperties":false})",
    R"({"type":"object","properties":{"tags":{"type":"array","items":{"enum":["a","b","c"]},
        "minItems":1,"maxItems":4},"score":{"type":["number","null"]},
        "when":{"type":"string","format":"date-time"}},"required":["tags","score","when"],
        "additionalProperties":false})",
    R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},
        "kind":{"anyOf":[{"type":"object","properties":{"circle":{"type":"number"}},
        "required":["circle"],"additionalProperties":false},{"type":"object","properties":{
        "w":{"type":"integer"},"h":{"type":"integer"}},"required":["w","h"],
        "additionalProperties":false}]}},"required":["id","kind"],"additionalProperties":false})",
    R"({"$defs":{"item":{"type":"object","properties":{"label":{"type":"string","maxLength":5},
        "children":{"type":"array","items":{"$ref":"#/$defs/item"},"maxItems":2}},
        "required":["label","children"],"additionalProperties":false}},
        "type":"object","properties":{"root":{"$ref":"#/$defs/item"}},"required":["root"],
        "additionalProperties":false})",
    R"({"type":"object","properties":{"pair":{"type":"array","prefixItems":[{"type":"string",
        "minLength":1,"maxLength":3},{"type":"boolean"}],"items":false,"minItems":2},
        "day":{"type":"string","format":"date"},"v":{"const":42},
        "opt":{"type":"integer","nullable":true}},"required":["pair","day","v"],
        "additionalProperties":false})",
    R"({"type":"object","properties":{"small":{"type":"integer","minimum":-37,"maximum":1205},
        "big":{"type":"integer","minimum":99999,"maximum":123456789},
        "neg":{"type":"integer","minimum":-5000,"maximum":-3}},"required":["small","big","neg"],
        "additionalProperties":false})",
    R"({"type":"object","properties":{"counts":{"type":"object",
        "additionalProperties":{"type":"integer"}},"at":{"type":"string","format":"time"},
        "flag":{"type":"boolean"}},"required":["counts","at","flag"],
        "additionalProperties":false})",
};

TEST(MatcherProperty, GeneratedValuesAreAccepted) {
  Rng rng(1234);
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    for (int i = 0; i < 150; ++i) {
      const json v = generate(schema, schema, rng);
      ASSERT_TRUE(valid(schema, schema, v)) << "generator bug: " << v.dump();
      const std::string s = write(v, rng);
      EXPECT_TRUE(Matcher::matches(*g, s)) << text << "\n  value: " << s;
      // A strict prefix of an object is never a complete value.
      const std::size_t cut = rng() % s.size();
      EXPECT_FALSE(Matcher::matches(*g, s.substr(0, cut))) << s.substr(0, cut);
    }
  }
}

TEST(MatcherProperty, SemanticMutationsAreRejected) {
  Rng rng(99);
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok());
    for (int i = 0; i < 60; ++i) {
      json v = generate(schema, schema, rng);
      // An undeclared key (every root here forbids them).
      json extra = v;
      extra["zz_undeclared"] = 1;
      EXPECT_FALSE(Matcher::matches(*g, write(extra, rng))) << extra.dump();
      // A required key removed.
      json missing = v;
      missing.erase(schema["required"][rng() % schema["required"].size()].get<std::string>());
      EXPECT_FALSE(Matcher::matches(*g, write(missing, rng))) << missing.dump();
      // Each top-level value replaced by something of the wrong kind.
      for (auto it = v.begin(); it != v.end(); ++it) {
        for (const json& wrong : {json("~not-this~"), json(json::array({json::object()}))}) {
          json mutated = v;
          mutated[it.key()] = wrong;
          if (valid(schema, schema, mutated)) continue;  // e.g. a string field
          EXPECT_FALSE(Matcher::matches(*g, write(mutated, rng))) << mutated.dump();
        }
      }
    }
  }
}

TEST(MatcherProperty, AcceptedByteMutationsAreValid) {
  Rng rng(7);
  const std::string alphabet = "{}[]\",:0123456789.-eE tfnulrsa\\\n\xc3\xa9";
  std::size_t accepted = 0;
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok());
    for (int i = 0; i < 300; ++i) {
      std::string s = write(generate(schema, schema, rng), rng);
      const std::size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0: s.erase(at, 1); break;
        case 1: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        default: s[at] = alphabet[rng() % alphabet.size()]; break;
      }
      if (!Matcher::matches(*g, s)) continue;
      ++accepted;
      const json parsed = json::parse(s, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << "accepted invalid JSON: " << s;
      EXPECT_TRUE(valid(schema, schema, parsed)) << "accepted a value outside the schema: " << s;
    }
  }
  // Some mutations (a digit or letter inside a string) stay valid: the
  // check above must have run.
  EXPECT_GT(accepted, 0u);
}

}  // namespace
}  // namespace cellm::grammar
