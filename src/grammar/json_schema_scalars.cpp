// Scalars of the JSON-schema grammar: bounded whitespace, strings (UTF-8,
// escapes, length bounds, formats) and numbers (bounded digits, integer
// ranges).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "grammar/json_schema_impl.h"

namespace cellm::grammar {

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
  // 1..max bytes of letters, digits and `extra`, where a byte of `inner`
  // may stand only between two of those (never first, last or doubled): an
  // RFC 5321 dot-atom with inner ".", an RFC 1035 label with inner "-".
  auto word = [&](NodeId a, int max, std::string_view extra, std::string_view inner) {
    const NodeId end = n();
    NodeId after_inner = a;  // the next byte may not be an inner one (the start too)
    NodeId after_plain = 0;  // the next byte may be anything; the word may end here
    for (int i = 0; i < max; ++i) {
      const NodeId plain = n(), sep = n();
      for (NodeId at : {after_inner, after_plain}) {
        if (at == 0) continue;
        b_.bytes(at, 'a', 'z', plain);
        b_.bytes(at, 'A', 'Z', plain);
        b_.bytes(at, '0', '9', plain);
        for (char c : extra) b_.byte(at, c, plain);
      }
      // None at the last place: it would need a byte past `max`.
      if (after_plain != 0 && i + 1 < max) {
        for (char c : inner) b_.byte(after_plain, c, sep);
      }
      b_.epsilon(plain, end);
      after_inner = sep;
      after_plain = plain;
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
    // letters, digits and "_+-" with single dots between them before the @,
    // labels of 1-24 letters, digits or inner hyphens.
    NodeId at = word(open, 32, "_+-", ".");
    const NodeId sign = n();
    b_.byte(at, '@', sign);
    at = word(sign, 24, "", "-");
    NodeId dot = n();
    b_.byte(at, '.', dot);
    at = word(dot, 24, "", "-");
    dot = n();
    const NodeId third = n();
    b_.byte(at, '.', dot);
    b_.epsilon(word(dot, 24, "", "-"), third);
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

}  // namespace cellm::grammar
