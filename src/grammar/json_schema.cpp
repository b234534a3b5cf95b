#include "grammar/json_schema.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace cellm::grammar {
namespace {

using json = nlohmann::ordered_json;

// Keywords that describe a schema without constraining values.
const std::set<std::string>& annotations() {
  static const std::set<std::string> s = {
      "title",      "description", "default",   "examples", "$schema",     "$id",   "$comment",
      "deprecated", "readOnly",    "writeOnly", "$defs",    "definitions", "strict"};
  return s;
}

// Keywords this compiler enforces.
const std::set<std::string>& supported() {
  static const std::set<std::string> s = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "$ref",
                                          "minLength",
                                          "maxLength",
                                          "format",
                                          "nullable",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum"};
  return s;
}

// Nodes a schema may create before epsilon removal.
constexpr std::size_t kMaxBuilderNodes = 200000;

std::string child_path(const std::string& path, std::string_view key) {
  return path + "/" + std::string(key);
}

}  // namespace

class JsonGrammarBuilder::Impl {
 public:
  Impl(GrammarBuilder& b, const JsonGrammarOptions& options) : b_(b), options_(options) {}

  Status value(const json& root, const json& schema, NodeId from, NodeId to,
               const std::string& path, int depth);
  void any_object(NodeId from, NodeId to) { b_.call(from, object_rule(), to); }
  void ws(NodeId from, NodeId to) { b_.call(from, ws_rule(), to); }

 private:
  NodeId node_near(NodeId n) { return b_.node(b_.rule_of(n)); }
  RuleId ws_rule();
  RuleId value_rule();
  RuleId object_rule();
  RuleId array_rule();
  void string_char(NodeId from, NodeId to);
  void any_string(NodeId from, NodeId to);
  Status bounded_string(NodeId from, NodeId to, std::int64_t min, std::int64_t max,
                        const std::string& path);
  Status formatted_string(NodeId from, NodeId to, const std::string& format,
                          const std::string& path);
  void number(NodeId from, NodeId to, bool integer);
  // Integers in [lo, hi] (both within +-kMaxIntegerBound), written without
  // leading zeros.
  void integer_range(NodeId from, NodeId to, std::int64_t lo, std::int64_t hi);
  // Non-negative decimals of one length, digit by digit between `lo` and `hi`.
  void digit_range(NodeId from, NodeId to, std::string_view lo, std::string_view hi);
  Status bounded_integer(const json& schema, NodeId from, NodeId to, const std::string& path);
  void digits(NodeId from, NodeId to, int min, int max);
  Status typed(const json& root, const json& schema, const std::string& type, NodeId from,
               NodeId to, const std::string& path, int depth);
  Status object(const json& root, const json& schema, NodeId from, NodeId to,
                const std::string& path, int depth);
  Status array(const json& root, const json& schema, NodeId from, NodeId to,
               const std::string& path, int depth);
  Result<const json*> resolve(const json& root, const std::string& ref, const std::string& path);
  Result<std::int64_t> bound(const json& schema, const char* key, const std::string& path);

  GrammarBuilder& b_;
  JsonGrammarOptions options_;
  std::optional<RuleId> ws_, value_, object_, array_;
  std::map<std::pair<const json*, std::string>, RuleId> refs_;
};

RuleId JsonGrammarBuilder::Impl::ws_rule() {
  if (ws_) return *ws_;
  ws_ = b_.add_rule("whitespace");
  NodeId at = b_.start(*ws_);
  b_.set_final(at);
  for (int i = 0; i < options_.max_whitespace; ++i) {
    const NodeId next = b_.node(*ws_);
    b_.set_final(next);
    for (char c : {' ', '\t', '\n', '\r'}) b_.byte(at, c, next);
    at = next;
  }
  return *ws_;
}

void JsonGrammarBuilder::Impl::string_char(NodeId from, NodeId to) {
  auto n = [&] { return node_near(from); };
  b_.bytes(from, 0x20, 0x21, to);
  b_.bytes(from, 0x23, 0x5B, to);
  b_.bytes(from, 0x5D, 0x7F, to);
  // Escapes.
  const NodeId esc = n();
  b_.byte(from, '\\', esc);
  for (char c : std::string_view("\"\\/bfnrt")) b_.byte(esc, c, to);
  NodeId hex = n();
  b_.byte(esc, 'u', hex);
  for (int i = 0; i < 4; ++i) {
    const NodeId next = i == 3 ? to : n();
    b_.bytes(hex, '0', '9', next);
    b_.bytes(hex, 'a', 'f', next);
    b_.bytes(hex, 'A', 'F', next);
    hex = next;
  }
  // Well-formed UTF-8 (RFC 3629): no overlongs, surrogates or values past U+10FFFF.
  const NodeId t1 = n(), t2 = n(), t3 = n();
  b_.bytes(t1, 0x80, 0xBF, to);
  b_.bytes(t2, 0x80, 0xBF, t1);
  b_.bytes(t3, 0x80, 0xBF, t2);
  b_.bytes(from, 0xC2, 0xDF, t1);
  const NodeId e0 = n(), ed = n(), f0 = n(), f4 = n();
  b_.byte(from, '\xE0', e0);
  b_.bytes(e0, 0xA0, 0xBF, t1);
  b_.bytes(from, 0xE1, 0xEC, t2);
  b_.byte(from, '\xED', ed);
  b_.bytes(ed, 0x80, 0x9F, t1);
  b_.bytes(from, 0xEE, 0xEF, t2);
  b_.byte(from, '\xF0', f0);
  b_.bytes(f0, 0x90, 0xBF, t2);
  b_.bytes(from, 0xF1, 0xF3, t3);
  b_.byte(from, '\xF4', f4);
  b_.bytes(f4, 0x80, 0x8F, t2);
}

void JsonGrammarBuilder::Impl::any_string(NodeId from, NodeId to) {
  const NodeId body = node_near(from);
  b_.byte(from, '"', body);
  string_char(body, body);
  b_.byte(body, '"', to);
}

Status JsonGrammarBuilder::Impl::bounded_string(NodeId from, NodeId to, std::int64_t min,
                                                std::int64_t max, const std::string& path) {
  if (min > kMaxUnrolledBound || max > kMaxUnrolledBound) {
    return invalid_argument("{}: minLength/maxLength above {} are not supported", path,
                            kMaxUnrolledBound);
  }
  if (max >= 0 && max < min) {
    return invalid_argument("{}: maxLength {} is below minLength {}", path, max, min);
  }
  NodeId at = node_near(from);
  b_.byte(from, '"', at);
  const std::int64_t last = max >= 0 ? max : min;
  for (std::int64_t i = 0; i <= last; ++i) {
    if (i >= min) b_.byte(at, '"', to);
    if (i == last) {
      if (max < 0) string_char(at, at);  // unbounded: loop past the minimum
      break;
    }
    const NodeId next = node_near(from);
    string_char(at, next);
    at = next;
  }
  return Status::ok();
}

void JsonGrammarBuilder::Impl::digits(NodeId from, NodeId to, int min, int max) {
  NodeId at = from;
  for (int i = 0; i < max; ++i) {
    if (i >= min) b_.epsilon(at, to);
    const NodeId next = i + 1 == max ? to : node_near(from);
    b_.bytes(at, '0', '9', next);
    at = next;
  }
}

Status JsonGrammarBuilder::Impl::formatted_string(NodeId from, NodeId to, const std::string& format,
                                                  const std::string& path) {
  auto n = [&] { return node_near(from); };
  auto d = [&](NodeId a, NodeId z) { b_.bytes(a, '0', '9', z); };
  // Pieces chained through fresh nodes: each returns its end.
  // [lo-hi][0-9], returning the end.
  auto pair = [&](NodeId a, char lo, char hi) {
    const NodeId mid = n(), end = n();
    b_.bytes(a, static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi), mid);
    d(mid, end);
    return end;
  };
  auto hours = [&](NodeId a) {  // 00-23
    const NodeId end = pair(a, '0', '1'), two = n();
    b_.byte(a, '2', two);
    b_.bytes(two, '0', '3', end);
    return end;
  };
  auto date = [&](NodeId a) {
    NodeId at = a;
    for (int i = 0; i < 4; ++i) {
      const NodeId next = n();
      d(at, next);
      at = next;
    }
    const NodeId dash = n();
    b_.byte(at, '-', dash);
    // Month and day together, so every date exists: days 01-28 in February
    // (29 would depend on the year), 01-30 in April, June, September and
    // November, 01-31 elsewhere.
    const NodeId dend = n();
    auto days = [&](NodeId month_end, char last_tens, char last_units) {
      const NodeId sep = n(), d0 = n(), d12 = n(), dl = n();
      b_.byte(month_end, '-', sep);
      b_.byte(sep, '0', d0);
      b_.bytes(d0, '1', '9', dend);
      b_.bytes(sep, '1', static_cast<std::uint8_t>(last_tens - 1), d12);
      d(d12, dend);
      b_.byte(sep, last_tens, dl);
      b_.bytes(dl, '0', static_cast<std::uint8_t>(last_units), dend);
    };
    for (std::string_view month : {"01", "03", "05", "07", "08", "10", "12"}) {
      const NodeId m = n();
      b_.literal(dash, month, m);
      days(m, '3', '1');
    }
    for (std::string_view month : {"04", "06", "09", "11"}) {
      const NodeId m = n();
      b_.literal(dash, month, m);
      days(m, '3', '0');
    }
    const NodeId feb = n();
    b_.literal(dash, "02", feb);
    days(feb, '2', '8');
    return dend;
  };
  auto time = [&](NodeId a) {
    NodeId at = hours(a);
    NodeId colon = n();
    b_.byte(at, ':', colon);
    at = pair(colon, '0', '5');
    colon = n();
    b_.byte(at, ':', colon);
    at = pair(colon, '0', '5');
    b_.literal(colon, "60", at);  // a leap second
    const NodeId frac = n(), after = n();
    b_.epsilon(at, after);
    b_.byte(at, '.', frac);
    digits(frac, after, 1, 6);
    // Offset: Z or +hh:mm / -hh:mm.
    const NodeId end = n(), sign = n();
    b_.byte(after, 'Z', end);
    b_.byte(after, '+', sign);
    b_.byte(after, '-', sign);
    const NodeId hh = hours(sign);
    colon = n();
    b_.byte(hh, ':', colon);
    b_.epsilon(pair(colon, '0', '5'), end);
    return end;
  };
  // 1..max characters of letters, digits and `extra`, returning the end.
  auto atom = [&](NodeId a, int max, std::string_view extra) {
    const NodeId end = n();
    NodeId at = a;
    for (int i = 0; i < max; ++i) {
      const NodeId next = n();
      b_.bytes(at, 'a', 'z', next);
      b_.bytes(at, 'A', 'Z', next);
      b_.bytes(at, '0', '9', next);
      for (char c : extra) b_.byte(at, c, next);
      b_.epsilon(next, end);
      at = next;
    }
    return end;
  };
  const NodeId open = n();
  b_.byte(from, '"', open);
  NodeId end = 0;
  if (format == "date") {
    end = date(open);
  } else if (format == "time") {
    end = time(open);
  } else if (format == "date-time") {
    const NodeId t = n();
    b_.byte(date(open), 'T', t);
    end = time(t);
  } else if (format == "uuid") {
    NodeId at = open;
    const int groups[] = {8, 4, 4, 4, 12};
    for (int g = 0; g < 5; ++g) {
      if (g > 0) {
        const NodeId dash = n();
        b_.byte(at, '-', dash);
        at = dash;
      }
      for (int i = 0; i < groups[g]; ++i) {
        const NodeId next = n();
        b_.bytes(at, '0', '9', next);
        b_.bytes(at, 'a', 'f', next);
        at = next;
      }
    }
    end = at;
  } else if (format == "email") {
    // local@label.label[.label], each part bounded: 1-32 characters of
    // letters, digits and "._+-" before the @, labels of 1-24 letters, digits
    // or hyphens.
    NodeId at = atom(open, 32, "._+-");
    const NodeId sign = n();
    b_.byte(at, '@', sign);
    at = atom(sign, 24, "-");
    NodeId dot = n();
    b_.byte(at, '.', dot);
    at = atom(dot, 24, "-");
    dot = n();
    const NodeId third = n();
    b_.byte(at, '.', dot);
    b_.epsilon(atom(dot, 24, "-"), third);
    b_.epsilon(at, third);
    end = third;
  } else {
    return invalid_argument(
        "unsupported JSON Schema keyword 'format' value \"{}\" at {}: supported formats are "
        "date, time, date-time, uuid and email",
        format, path);
  }
  b_.byte(end, '"', to);
  return Status::ok();
}

void JsonGrammarBuilder::Impl::number(NodeId from, NodeId to, bool integer) {
  const NodeId sign = node_near(from), int_end = node_near(from), nonzero = node_near(from);
  b_.epsilon(from, sign);
  b_.byte(from, '-', sign);
  b_.byte(sign, '0', int_end);
  b_.bytes(sign, '1', '9', nonzero);
  digits(nonzero, int_end, 0, 15);
  if (integer) {
    b_.epsilon(int_end, to);
    return;
  }
  const NodeId frac = node_near(from), frac_end = node_near(from);
  b_.epsilon(int_end, frac_end);
  b_.byte(int_end, '.', frac);
  digits(frac, frac_end, 1, 16);
  const NodeId exp = node_near(from), exp_sign = node_near(from);
  b_.epsilon(frac_end, to);
  b_.byte(frac_end, 'e', exp);
  b_.byte(frac_end, 'E', exp);
  b_.epsilon(exp, exp_sign);
  b_.byte(exp, '+', exp_sign);
  b_.byte(exp, '-', exp_sign);
  digits(exp_sign, to, 1, 3);
}

void JsonGrammarBuilder::Impl::digit_range(NodeId from, NodeId to, std::string_view lo,
                                           std::string_view hi) {
  // Same length, lo <= hi. Equal leading digits: one edge and recurse;
  // otherwise lo's first digit with the rest at least lo's rest, the digits
  // between with anything, hi's first digit with the rest at most hi's rest.
  if (lo.size() == 1) {
    b_.bytes(from, static_cast<std::uint8_t>(lo[0]), static_cast<std::uint8_t>(hi[0]), to);
    return;
  }
  // d0...0 to e9...9 is [d-e] then any digits: without this the recursion
  // would branch three ways per digit.
  if (lo.find_first_not_of('0', 1) == std::string_view::npos &&
      hi.find_first_not_of('9', 1) == std::string_view::npos) {
    const NodeId rest = node_near(from);
    b_.bytes(from, static_cast<std::uint8_t>(lo[0]), static_cast<std::uint8_t>(hi[0]), rest);
    digits(rest, to, static_cast<int>(lo.size() - 1), static_cast<int>(lo.size() - 1));
    return;
  }
  const std::string nines(lo.size() - 1, '9'), zeros(lo.size() - 1, '0');
  if (lo[0] == hi[0]) {
    const NodeId next = node_near(from);
    b_.byte(from, lo[0], next);
    digit_range(next, to, lo.substr(1), hi.substr(1));
    return;
  }
  NodeId next = node_near(from);
  b_.byte(from, lo[0], next);
  digit_range(next, to, lo.substr(1), nines);
  if (hi[0] - lo[0] > 1) {
    next = node_near(from);
    b_.bytes(from, static_cast<std::uint8_t>(lo[0] + 1), static_cast<std::uint8_t>(hi[0] - 1),
             next);
    digits(next, to, static_cast<int>(lo.size() - 1), static_cast<int>(lo.size() - 1));
  }
  next = node_near(from);
  b_.byte(from, hi[0], next);
  digit_range(next, to, zeros, hi.substr(1));
}

void JsonGrammarBuilder::Impl::integer_range(NodeId from, NodeId to, std::int64_t lo,
                                             std::int64_t hi) {
  // Non-negative [a, b], one digit length at a time (0 is its own length).
  auto non_negative = [&](NodeId at, std::int64_t a, std::int64_t b) {
    std::int64_t low = a;
    for (int len = 1; len <= 19 && low <= b; ++len) {
      const std::int64_t top = len >= 19 ? std::numeric_limits<std::int64_t>::max()
                                         : static_cast<std::int64_t>(std::pow(10.0, len)) - 1;
      if (low > top) continue;
      const std::int64_t high = std::min(b, top);
      digit_range(at, to, std::to_string(low), std::to_string(high));
      low = high + 1;
    }
  };
  if (hi >= 0) non_negative(from, std::max<std::int64_t>(lo, 0), hi);
  if (lo < 0) {
    const NodeId minus = node_near(from);
    b_.byte(from, '-', minus);
    non_negative(minus, std::max<std::int64_t>(-hi, 1), -lo);
  }
}

Status JsonGrammarBuilder::Impl::bounded_integer(const json& schema, NodeId from, NodeId to,
                                                 const std::string& path) {
  // JSON Schema bounds (draft 6+: exclusive* are numbers); an integer is
  // written with at most 16 digits, like every number here.
  constexpr std::int64_t kLimit = 9999999999999999;
  std::int64_t lo = -kLimit, hi = kLimit;
  bool bounded = false;
  for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    auto it = schema.find(key);
    if (it == schema.end()) continue;
    if (!it->is_number() || !std::isfinite(it->get<double>())) {
      return invalid_argument("'{}' at {} must be a number", key, path);
    }
    const double v = std::clamp(it->get<double>(), -1e17, 1e17);
    const std::string k = key;
    if (k == "minimum") lo = std::max(lo, static_cast<std::int64_t>(std::ceil(v)));
    if (k == "exclusiveMinimum") lo = std::max(lo, static_cast<std::int64_t>(std::floor(v)) + 1);
    if (k == "maximum") hi = std::min(hi, static_cast<std::int64_t>(std::floor(v)));
    if (k == "exclusiveMaximum") hi = std::min(hi, static_cast<std::int64_t>(std::ceil(v)) - 1);
    bounded = true;
  }
  if (!bounded) {
    number(from, to, true);
    return Status::ok();
  }
  lo = std::max(lo, -kLimit);
  hi = std::min(hi, kLimit);
  if (lo > hi) {
    return invalid_argument(
        "the integer bounds at {} leave no value (or none of at most 16 digits)", path);
  }
  integer_range(from, to, lo, hi);
  return Status::ok();
}

RuleId JsonGrammarBuilder::Impl::value_rule() {
  if (value_) return *value_;
  value_ = b_.add_rule("value");
  const NodeId s = b_.start(*value_), e = b_.node(*value_);
  b_.set_final(e);
  any_string(s, e);
  number(s, e, false);
  for (std::string_view lit : {"true", "false", "null"}) b_.literal(s, lit, e);
  b_.call(s, object_rule(), e);
  b_.call(s, array_rule(), e);
  return *value_;
}

RuleId JsonGrammarBuilder::Impl::object_rule() {
  if (object_) return *object_;
  object_ = b_.add_rule("object");
  const RuleId r = *object_;
  const NodeId s = b_.start(r), open = b_.node(r), empty = b_.node(r), kv = b_.node(r),
               key = b_.node(r), colon = b_.node(r), val = b_.node(r), after = b_.node(r),
               next = b_.node(r), comma = b_.node(r), end = b_.node(r);
  b_.set_final(end);
  b_.byte(s, '{', open);
  ws(open, empty);
  b_.byte(empty, '}', end);
  b_.epsilon(empty, kv);
  any_string(kv, key);
  const NodeId key_ws = b_.node(r);
  ws(key, key_ws);
  b_.byte(key_ws, ':', colon);
  ws(colon, val);
  const NodeId val_end = b_.node(r);
  b_.call(val, value_rule(), val_end);
  ws(val_end, after);
  b_.byte(after, ',', comma);
  ws(comma, next);
  b_.epsilon(next, kv);
  b_.byte(after, '}', end);
  return r;
}

RuleId JsonGrammarBuilder::Impl::array_rule() {
  if (array_) return *array_;
  array_ = b_.add_rule("array");
  const RuleId r = *array_;
  const NodeId s = b_.start(r), open = b_.node(r), empty = b_.node(r), item = b_.node(r),
               item_end = b_.node(r), after = b_.node(r), comma = b_.node(r), end = b_.node(r);
  b_.set_final(end);
  b_.byte(s, '[', open);
  ws(open, empty);
  b_.byte(empty, ']', end);
  b_.epsilon(empty, item);
  b_.call(item, value_rule(), item_end);
  ws(item_end, after);
  b_.byte(after, ',', comma);
  ws(comma, item);
  b_.byte(after, ']', end);
  return r;
}

Result<const json*> JsonGrammarBuilder::Impl::resolve(const json& root, const std::string& ref,
                                                      const std::string& path) {
  if (ref == "#") return &root;
  for (std::string_view prefix : {"#/$defs/", "#/definitions/"}) {
    if (ref.starts_with(prefix)) {
      const std::string container(prefix.substr(2, prefix.size() - 3));
      const std::string name = ref.substr(prefix.size());
      auto defs = root.find(container);
      if (defs != root.end() && defs->is_object()) {
        auto it = defs->find(name);
        if (it != defs->end()) return &*it;
      }
      return invalid_argument("'$ref' \"{}\" at {} names no definition in the schema's {}", ref,
                              path, container);
    }
  }
  return invalid_argument(
      "unsupported JSON Schema keyword '$ref' value \"{}\" at {}: only \"#\", \"#/$defs/NAME\" "
      "and \"#/definitions/NAME\" are supported",
      ref, path);
}

Result<std::int64_t> JsonGrammarBuilder::Impl::bound(const json& schema, const char* key,
                                                     const std::string& path) {
  auto it = schema.find(key);
  if (it == schema.end()) return std::int64_t{-1};
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0) {
    return invalid_argument("'{}' at {} must be a non-negative integer", key, path);
  }
  if (it->get<std::int64_t>() > kMaxUnrolledBound) {
    return invalid_argument("'{}' at {} is {}; at most {} is supported", key, path,
                            it->get<std::int64_t>(), kMaxUnrolledBound);
  }
  return it->get<std::int64_t>();
}

Status JsonGrammarBuilder::Impl::value(const json& root, const json& schema, NodeId from, NodeId to,
                                       const std::string& path, int depth) {
  if (depth > kMaxSchemaDepth) {
    return invalid_argument("the schema nests deeper than {} levels at {}", kMaxSchemaDepth, path);
  }
  // Bounds multiply (maxItems of maxItems ...): stop before memory does.
  if (b_.node_count() > kMaxBuilderNodes) {
    return invalid_argument(
        "the schema is too large to compile (at {}): it unrolls past {} automaton nodes; lower "
        "minItems/maxItems/maxLength or nest less",
        path, kMaxBuilderNodes);
  }
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) {
      return invalid_argument("the schema at {} is false: no value matches it", path);
    }
    b_.call(from, value_rule(), to);
    return Status::ok();
  }
  if (!schema.is_object()) {
    return invalid_argument("the schema at {} must be an object or a boolean", path);
  }
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    if (!supported().contains(it.key()) && !annotations().contains(it.key())) {
      return invalid_argument(
          "unsupported JSON Schema keyword '{}' at {}: cellm's structured outputs support type, "
          "properties, required, additionalProperties, items, prefixItems, minItems, maxItems, "
          "enum, const, anyOf, oneOf, $ref, minLength, maxLength, format, nullable and integer "
          "minimum/maximum/exclusiveMinimum/exclusiveMaximum",
          it.key(), path);
    }
  }
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    if (!ref->is_string()) return invalid_argument("'$ref' at {} must be a string", path);
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it.key() != "$ref" && supported().contains(it.key())) {
        return invalid_argument(
            "unsupported JSON Schema keyword '{}' beside '$ref' at {}: move it into the "
            "definition",
            it.key(), path);
      }
    }
    const std::string target = ref->get<std::string>();
    CELLM_ASSIGN_OR_RETURN(const json* def, resolve(root, target, path));
    const auto key = std::make_pair(&root, target);
    auto found = refs_.find(key);
    if (found == refs_.end()) {
      const RuleId r = b_.add_rule(target);
      found = refs_.emplace(key, r).first;
      const NodeId end = b_.node(r);
      b_.set_final(end);
      CELLM_RETURN_IF_ERROR(value(root, *def, b_.start(r), end, target, depth + 1));
    }
    b_.call(from, found->second, to);
    return Status::ok();
  }
  const bool nullable = schema.value("nullable", false);
  if (nullable) b_.literal(from, "null", to);
  if (auto c = schema.find("const"); c != schema.end()) {
    b_.literal(from, c->dump(), to);
    return Status::ok();
  }
  if (auto e = schema.find("enum"); e != schema.end()) {
    if (!e->is_array() || e->empty()) {
      return invalid_argument("'enum' at {} must be a non-empty list", path);
    }
    for (const json& v : *e) b_.literal(from, v.dump(), to);
    return Status::ok();
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto alts = schema.find(key);
    if (alts == schema.end()) continue;
    if (!alts->is_array() || alts->empty()) {
      return invalid_argument("'{}' at {} must be a non-empty list of schemas", key, path);
    }
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it.key() != key && it.key() != "nullable" && supported().contains(it.key())) {
        return invalid_argument(
            "unsupported JSON Schema keyword '{}' beside '{}' at {}: move it into each branch",
            it.key(), key, path);
      }
    }
    for (std::size_t i = 0; i < alts->size(); ++i) {
      CELLM_RETURN_IF_ERROR(
          value(root, (*alts)[i], from, to, fmt::format("{}/{}/{}", path, key, i), depth + 1));
    }
    return Status::ok();
  }
  std::vector<std::string> types;
  if (auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) {
      types.push_back(t->get<std::string>());
    } else if (t->is_array() && !t->empty()) {
      for (const json& x : *t) {
        if (!x.is_string()) {
          return invalid_argument("'type' at {} must be a string or a list of strings", path);
        }
        types.push_back(x.get<std::string>());
      }
    } else {
      return invalid_argument("'type' at {} must be a string or a list of strings", path);
    }
  } else if (schema.contains("properties") || schema.contains("additionalProperties") ||
             schema.contains("required")) {
    types.push_back("object");
  } else if (schema.contains("items") || schema.contains("prefixItems")) {
    types.push_back("array");
  } else {
    b_.call(from, value_rule(), to);  // unconstrained
    return Status::ok();
  }
  for (const std::string& type : types) {
    CELLM_RETURN_IF_ERROR(typed(root, schema, type, from, to, path, depth));
  }
  return Status::ok();
}

Status JsonGrammarBuilder::Impl::typed(const json& root, const json& schema,
                                       const std::string& type, NodeId from, NodeId to,
                                       const std::string& path, int depth) {
  if (type == "object") return object(root, schema, from, to, path, depth);
  if (type == "array") return array(root, schema, from, to, path, depth);
  if (type == "string") {
    if (auto f = schema.find("format"); f != schema.end()) {
      if (!f->is_string()) return invalid_argument("'format' at {} must be a string", path);
      if (schema.contains("minLength") || schema.contains("maxLength")) {
        return invalid_argument(
            "unsupported JSON Schema keyword 'minLength'/'maxLength' beside 'format' at {}", path);
      }
      return formatted_string(from, to, f->get<std::string>(), path);
    }
    CELLM_ASSIGN_OR_RETURN(const std::int64_t min, bound(schema, "minLength", path));
    CELLM_ASSIGN_OR_RETURN(const std::int64_t max, bound(schema, "maxLength", path));
    if (min <= 0 && max < 0) {
      any_string(from, to);
      return Status::ok();
    }
    return bounded_string(from, to, std::max<std::int64_t>(min, 0), max, path);
  }
  if (type == "integer") return bounded_integer(schema, from, to, path);
  if (type == "number") {
    for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (schema.contains(key)) {
        return invalid_argument(
            "unsupported JSON Schema keyword '{}' at {}: numeric bounds are supported on "
            "\"type\": \"integer\" only",
            key, path);
      }
    }
    number(from, to, false);
    return Status::ok();
  }
  if (type == "boolean") {
    b_.literal(from, "true", to);
    b_.literal(from, "false", to);
    return Status::ok();
  }
  if (type == "null") {
    b_.literal(from, "null", to);
    return Status::ok();
  }
  return invalid_argument(
      "unsupported JSON Schema keyword 'type' value \"{}\" at {}: use object, array, string, "
      "number, integer, boolean or null",
      type, path);
}

Status JsonGrammarBuilder::Impl::object(const json& root, const json& schema, NodeId from,
                                        NodeId to, const std::string& path, int depth) {
  const json empty = json::object();
  const json* props = &empty;
  if (auto p = schema.find("properties"); p != schema.end()) {
    if (!p->is_object()) return invalid_argument("'properties' at {} must be an object", path);
    props = &*p;
  }
  std::set<std::string> required;
  if (auto r = schema.find("required"); r != schema.end()) {
    if (!r->is_array()) return invalid_argument("'required' at {} must be a list of names", path);
    for (const json& name : *r) {
      if (!name.is_string()) {
        return invalid_argument("'required' at {} must be a list of names", path);
      }
      if (!props->contains(name.get<std::string>())) {
        return invalid_argument(
            "'required' at {} names \"{}\", which is not in 'properties' (cellm generates only "
            "declared properties)",
            path, name.get<std::string>());
      }
      required.insert(name.get<std::string>());
    }
  }
  const json* extra = nullptr;  // the schema of undeclared properties, if generated
  if (auto a = schema.find("additionalProperties"); a != schema.end()) {
    if (!a->is_boolean() && !a->is_object()) {
      return invalid_argument("'additionalProperties' at {} must be a boolean or a schema", path);
    }
    if (props->empty() && !(a->is_boolean() && !a->get<bool>())) extra = &*a;
  } else if (props->empty()) {
    // Nothing declared, nothing forbidden: any object.
    any_object(from, to);
    return Status::ok();
  }
  const NodeId open = node_near(from);
  b_.byte(from, '{', open);
  if (extra != nullptr) {
    // A map: "key": value pairs of the additionalProperties schema.
    const NodeId first = node_near(from), kv = node_near(from), key = node_near(from),
                 key_ws = node_near(from), colon = node_near(from), val = node_near(from),
                 val_end = node_near(from), after = node_near(from), comma = node_near(from);
    ws(open, first);
    b_.byte(first, '}', to);
    b_.epsilon(first, kv);
    any_string(kv, key);
    ws(key, key_ws);
    b_.byte(key_ws, ':', colon);
    ws(colon, val);
    CELLM_RETURN_IF_ERROR(
        value(root, *extra, val, val_end, child_path(path, "additionalProperties"), depth + 1));
    ws(val_end, after);
    b_.byte(after, ',', comma);
    ws(comma, kv);
    b_.byte(after, '}', to);
    return Status::ok();
  }
  // Declared properties in order; pos[i][e]: before property i, e = whether
  // one was written (then a comma comes first). Each value is emitted once.
  const std::size_t k = props->size();
  std::vector<std::array<NodeId, 2>> pos(k + 1);
  for (auto& p : pos) p = {node_near(from), node_near(from)};
  ws(open, pos[0][0]);
  std::size_t i = 0;
  for (auto it = props->begin(); it != props->end(); ++it, ++i) {
    const NodeId key = node_near(from), comma = node_near(from), key_end = node_near(from),
                 key_ws = node_near(from), colon = node_near(from), val = node_near(from),
                 val_end = node_near(from);
    b_.epsilon(pos[i][0], key);
    b_.byte(pos[i][1], ',', comma);
    ws(comma, key);
    b_.literal(key, json(it.key()).dump(), key_end);
    ws(key_end, key_ws);
    b_.byte(key_ws, ':', colon);
    ws(colon, val);
    CELLM_RETURN_IF_ERROR(value(root, it.value(), val, val_end,
                                child_path(child_path(path, "properties"), it.key()), depth + 1));
    ws(val_end, pos[i + 1][1]);
    if (!required.contains(it.key())) {
      b_.epsilon(pos[i][0], pos[i + 1][0]);
      b_.epsilon(pos[i][1], pos[i + 1][1]);
    }
  }
  b_.byte(pos[k][0], '}', to);
  b_.byte(pos[k][1], '}', to);
  return Status::ok();
}

Status JsonGrammarBuilder::Impl::array(const json& root, const json& schema, NodeId from, NodeId to,
                                       const std::string& path, int depth) {
  CELLM_ASSIGN_OR_RETURN(std::int64_t min, bound(schema, "minItems", path));
  CELLM_ASSIGN_OR_RETURN(std::int64_t max, bound(schema, "maxItems", path));
  min = std::max<std::int64_t>(min, 0);
  if (max >= 0 && max < min) {
    return invalid_argument("'maxItems' {} is below 'minItems' {} at {}", max, min, path);
  }
  const json any = json::object();
  std::vector<const json*> prefix;
  if (auto p = schema.find("prefixItems"); p != schema.end()) {
    if (!p->is_array()) return invalid_argument("'prefixItems' at {} must be a list", path);
    for (const json& s : *p) prefix.push_back(&s);
  }
  const json* items = &any;
  if (auto it = schema.find("items"); it != schema.end()) {
    if (it->is_boolean() && !it->get<bool>()) {
      items = nullptr;  // nothing past the prefix
      if (max < 0 || max > static_cast<std::int64_t>(prefix.size())) {
        max = static_cast<std::int64_t>(prefix.size());
      }
    } else if (it->is_object() || it->is_boolean()) {
      items = &*it;
    } else {
      return invalid_argument("'items' at {} must be a schema", path);
    }
  }
  if (max >= 0 && min > max) {
    return invalid_argument("'minItems' {} at {} cannot be met with 'items' false", min, path);
  }
  const std::int64_t unrolled =
      max >= 0 ? max : std::max<std::int64_t>(min, static_cast<std::int64_t>(prefix.size()));
  const NodeId open = node_near(from);
  b_.byte(from, '[', open);
  std::vector<NodeId> slot;  // slot[i]: i items written, whitespace after taken
  for (std::int64_t i = 0; i <= unrolled; ++i) slot.push_back(node_near(from));
  ws(open, slot[0]);
  auto schema_of = [&](std::int64_t i) {
    return static_cast<std::size_t>(i) < prefix.size() ? prefix[static_cast<std::size_t>(i)]
                                                       : items;
  };
  // Item i from `at` (after its comma when i > 0) to slot[i + 1].
  auto item = [&](std::int64_t i, NodeId at, NodeId done) -> Status {
    const NodeId val_end = node_near(from);
    CELLM_RETURN_IF_ERROR(
        value(root, *schema_of(i), at, val_end, fmt::format("{}/items/{}", path, i), depth + 1));
    ws(val_end, done);
    return Status::ok();
  };
  for (std::int64_t i = 0; i < unrolled; ++i) {
    NodeId at = slot[static_cast<std::size_t>(i)];
    if (i > 0) {
      const NodeId comma = node_near(from), start = node_near(from);
      b_.byte(at, ',', comma);
      ws(comma, start);
      at = start;
    }
    CELLM_RETURN_IF_ERROR(item(i, at, slot[static_cast<std::size_t>(i) + 1]));
  }
  for (std::int64_t i = min; i <= unrolled; ++i)
    b_.byte(slot[static_cast<std::size_t>(i)], ']', to);
  if (max < 0 && items != nullptr) {
    // Unbounded tail: one more item at a time, each emitted once.
    const NodeId last = slot.back(), start = node_near(from);
    if (unrolled == 0) {
      const NodeId written = node_near(from), comma = node_near(from);
      b_.epsilon(last, start);
      CELLM_RETURN_IF_ERROR(item(0, start, written));
      b_.byte(written, ']', to);
      b_.byte(written, ',', comma);
      ws(comma, start);
    } else {
      const NodeId comma = node_near(from);
      b_.byte(last, ',', comma);
      ws(comma, start);
      CELLM_RETURN_IF_ERROR(item(unrolled, start, last));
    }
  }
  return Status::ok();
}

JsonGrammarBuilder::JsonGrammarBuilder(GrammarBuilder& builder, const JsonGrammarOptions& options)
    : impl_(std::make_unique<Impl>(builder, options)) {}
JsonGrammarBuilder::~JsonGrammarBuilder() = default;

Status JsonGrammarBuilder::value(const json& schema, NodeId from, NodeId to) {
  return impl_->value(schema, schema, from, to, "#", 0);
}
void JsonGrammarBuilder::any_object(NodeId from, NodeId to) {
  impl_->any_object(from, to);
}
void JsonGrammarBuilder::whitespace(NodeId from, NodeId to) {
  impl_->ws(from, to);
}

namespace {

Result<std::shared_ptr<const Grammar>> compile_root(
    const JsonGrammarOptions& options,
    const std::function<Status(JsonGrammarBuilder&, NodeId, NodeId)>& body) {
  if (options.max_whitespace < 0 || options.max_whitespace > 64) {
    return invalid_argument("max_whitespace {} must lie in [0, 64]", options.max_whitespace);
  }
  GrammarBuilder b;
  const RuleId root = b.add_rule("root");
  JsonGrammarBuilder json_b(b, options);
  const NodeId lead = b.node(root), end = b.node(root);
  b.set_final(end);
  json_b.whitespace(b.start(root), lead);
  CELLM_RETURN_IF_ERROR(body(json_b, lead, end));
  return b.build(root);
}

}  // namespace

Result<std::shared_ptr<const Grammar>> compile_json_object(const JsonGrammarOptions& options) {
  return compile_root(options, [](JsonGrammarBuilder& j, NodeId from, NodeId to) {
    j.any_object(from, to);
    return Status::ok();
  });
}

Result<std::shared_ptr<const Grammar>> compile_json_schema(const json& schema,
                                                           const JsonGrammarOptions& options) {
  return compile_root(options, [&](JsonGrammarBuilder& j, NodeId from, NodeId to) {
    return j.value(schema, from, to);
  });
}

}  // namespace cellm::grammar
