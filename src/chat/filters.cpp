// Jinja's builtin filters (those chat templates use), with transformers'
// tojson in place of Jinja's HTML-safe one.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "chat/builtins.h"
#include "chat/json_value.h"
#include "chat/renderer.h"
#include "chat/utf8.h"

namespace cellm::chat {
namespace {

using Args = std::vector<Value>;

Value str_value(std::string s) {
  return Value::string(std::move(s));
}

// Jinja's attribute getter for map/sort/...: "a.b.0", item lookup first.
Result<Value> attribute_of(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  if (!attribute.is_string()) return invalid_argument("attribute must be a string or an integer");
  Value cur = item;
  const std::string& path = attribute.as_string();
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    const std::string part = path.substr(start, dot - start);
    Value key = Value::string(part);
    if (!part.empty() &&
        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      key = Value::integer(std::strtoll(part.c_str(), nullptr, 10));
    }
    CELLM_ASSIGN_OR_RETURN(cur, get_item(cur, key));
    start = dot + 1;
  }
  return cur;
}

// Sort/compare key: lowercased strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(utf8::to_lower(v.as_string()));
  return v;
}

Result<Value> f_abs(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("abs", args, {}));
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    const std::int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
    if (i == INT64_MIN) return invalid_argument("integer overflow");
    return Value::integer(i < 0 ? -i : i);
  }
  return invalid_argument("bad operand type for abs(): '{}'", type_name(v));
}

Result<Value> f_attr(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("attr", args, {{"name", std::nullopt}}));
  if (!a[0].is_string()) return invalid_argument("attr() name must be a string");
  if (v.is_namespace()) return get_attr(v, a[0].as_string());
  if (auto m = find_method(v, a[0].as_string())) return *m;
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_hint());
  return Value::undefined(
      fmt::format("'{}' object has no attribute '{}'", type_name(v), a[0].as_string()));
}

Result<Value> f_batch(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(
      Args a,
      bind_args("batch", args, {{"linecount", std::nullopt}, {"fill_with", Value::none()}}));
  if (!a[0].is_int() || a[0].as_int() <= 0)
    return invalid_argument("batch() linecount must be a positive integer");
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  const auto n = static_cast<std::size_t>(a[0].as_int());
  std::vector<Value> out;
  for (std::size_t i = 0; i < items.size(); i += n) {
    std::vector<Value> row(
        items.begin() + static_cast<std::ptrdiff_t>(i),
        items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + n)));
    if (!a[1].is_none()) {
      while (row.size() < n) row.push_back(a[1]);
    }
    out.push_back(Value::array(std::move(row)));
  }
  return Value::array(std::move(out));
}

Result<Value> f_capitalize(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("capitalize", args, {}));
  std::string s = utf8::to_lower(to_display_string(v));
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return str_value(std::move(s));
}

Result<Value> f_center(Renderer& r, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("center", args, {{"width", Value::integer(80)}}));
  if (!a[0].is_int()) return invalid_argument("center() width must be an integer");
  const std::string s = to_display_string(v);
  const auto len = static_cast<std::int64_t>(utf8::length(s));
  const std::int64_t width = a[0].as_int();
  if (width <= len) return str_value(s);
  CELLM_RETURN_IF_ERROR(r.check_size(static_cast<std::size_t>(width)));
  const std::int64_t pad = width - len;
  // CPython puts the odd extra space on the left when the width is odd.
  const std::int64_t left = pad / 2 + (pad & width & 1);
  return str_value(std::string(static_cast<std::size_t>(left), ' ') + s +
                   std::string(static_cast<std::size_t>(pad - left), ' '));
}

Result<Value> f_default(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("default", args,
                                           {{"default_value", Value::string("")},
                                            {"boolean", Value::boolean(false)}}));
  if (v.is_undefined() || (truthy(a[1]) && !truthy(v))) return a[0];
  return v;
}

Result<Value> f_dictsort(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("dictsort", args,
                                           {{"case_sensitive", Value::boolean(false)},
                                            {"by", Value::string("key")},
                                            {"reverse", Value::boolean(false)}}));
  if (!v.is_object()) return invalid_argument("dictsort() needs a mapping, got '{}'", type_name(v));
  const bool by_value = a[1].is_string() && a[1].as_string() == "value";
  if (!by_value && !(a[1].is_string() && a[1].as_string() == "key")) {
    return invalid_argument("dictsort() 'by' must be 'key' or 'value'");
  }
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.as_object().entries)
    pairs.push_back(Value::array({Value::string(k), val}, true));
  Status failure;
  const bool cs = truthy(a[0]);
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const std::size_t i = by_value ? 1 : 0;
    auto less =
        value_less(sort_key(x.as_array().items[i], cs), sort_key(y.as_array().items[i], cs));
    if (!less.ok()) {
      failure = less.status();
      return false;
    }
    return *less;
  });
  CELLM_RETURN_IF_ERROR(failure);
  if (truthy(a[2])) std::reverse(pairs.begin(), pairs.end());
  return Value::array(std::move(pairs));
}

Result<Value> f_escape(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("escape", args, {}));
  std::string out;
  for (char c : to_display_string(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return str_value(std::move(out));
}

Result<Value> f_first(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("first", args, {}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> f_last(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("last", args, {}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

// Python float(str): optional sign, digits with underscores, inf/nan.
std::optional<double> parse_python_float(const std::string& raw) {
  std::string s = utf8::strip(raw, std::nullopt, true, true);
  std::string clean;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = utf8::to_lower(clean);
  const std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double d = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -d : d;
  }
  if (body.empty() || body.find_first_not_of("0123456789.e+-") != std::string::npos ||
      body[0] == 'e') {
    return std::nullopt;
  }
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

Result<Value> f_float(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("float", args, {{"default", Value::number(0.0)}}));
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_hint());
  if (v.is_numeric()) return Value::number(v.to_double());
  if (v.is_string()) {
    if (auto d = parse_python_float(v.as_string())) return Value::number(*d);
  }
  return a[0];
}

Result<Value> f_int(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(
      Args a,
      bind_args("int", args, {{"default", Value::integer(0)}, {"base", Value::integer(10)}}));
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_hint());
  if (v.is_int()) return v;
  if (v.is_bool()) return Value::integer(v.as_bool());
  if (v.is_float()) {
    const double d = std::trunc(v.as_float());
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return a[0];
    return Value::integer(static_cast<std::int64_t>(d));
  }
  if (v.is_string()) {
    std::string s = utf8::strip(v.as_string(), std::nullopt, true, true);
    std::string clean;
    for (char c : s) {
      if (c != '_') clean.push_back(c);
    }
    const int base = a[1].is_int() ? static_cast<int>(a[1].as_int()) : 10;
    if (!clean.empty() && base >= 2 && base <= 36) {
      errno = 0;
      char* end = nullptr;
      const long long i = std::strtoll(clean.c_str(), &end, base);
      if (end == clean.c_str() + clean.size() && errno == 0 &&
          clean.find(' ') == std::string::npos) {
        return Value::integer(i);
      }
    }
    if (auto d = parse_python_float(v.as_string())) {
      if (std::isfinite(*d) && std::fabs(*d) < 9.2e18)
        return Value::integer(static_cast<std::int64_t>(std::trunc(*d)));
    }
  }
  return a[0];
}

// Python str.splitlines().
std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = i;
    const char32_t cp = utf8::next(s, j);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C ||
                     cp == 0x1D || cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (brk) {
      lines.push_back(s.substr(start, i - start));
      if (cp == '\r' && j < s.size() && s[j] == '\n') ++j;
      start = j;
    }
    i = j;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

Result<Value> f_indent(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("indent", args,
                                           {{"width", Value::integer(4)},
                                            {"first", Value::boolean(false)},
                                            {"blank", Value::boolean(false)}}));
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_hint());
  std::string indention;
  if (a[0].is_string()) {
    indention = a[0].as_string();
  } else if (a[0].is_int()) {
    indention.assign(static_cast<std::size_t>(std::clamp<std::int64_t>(a[0].as_int(), 0, 4096)),
                     ' ');
  } else {
    return invalid_argument("indent() width must be an integer or a string");
  }
  const std::vector<std::string> lines = split_lines(to_display_string(v) + "\n");
  std::string out;
  if (truthy(a[2])) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (truthy(a[1])) out = indention + out;
  return str_value(std::move(out));
}

Result<Value> f_items(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("items", args, {}));
  if (v.is_undefined()) return Value::array({});
  if (!v.is_object())
    return invalid_argument("can only get item pairs from a mapping, not '{}'", type_name(v));
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_object().entries)
    out.push_back(Value::array({Value::string(k), val}, true));
  return Value::array(std::move(out));
}

Result<Value> f_join(Renderer& r, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(
      Args a, bind_args("join", args, {{"d", Value::string("")}, {"attribute", Value::none()}}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  const std::string sep = to_display_string(a[0]);
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!a[1].is_none()) {
      CELLM_ASSIGN_OR_RETURN(item, attribute_of(item, a[1]));
    }
    if (i) out += sep;
    out += to_display_string(item);
    CELLM_RETURN_IF_ERROR(r.check_size(out.size()));
  }
  return str_value(std::move(out));
}

Result<Value> f_length(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("length", args, {}));
  switch (v.kind()) {
    case ValueKind::kString:
      return Value::integer(static_cast<std::int64_t>(utf8::length(v.as_string())));
    case ValueKind::kArray:
      return Value::integer(static_cast<std::int64_t>(v.as_array().items.size()));
    case ValueKind::kObject:
      return Value::integer(static_cast<std::int64_t>(v.as_object().entries.size()));
    case ValueKind::kUndefined: return Value::integer(0);
    default: return invalid_argument("object of type '{}' has no len()", type_name(v));
  }
}

Result<Value> f_list(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("list", args, {}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  return Value::array(std::move(items));
}

Result<Value> f_lower(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("lower", args, {}));
  return str_value(utf8::to_lower(to_display_string(v)));
}

Result<Value> f_upper(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("upper", args, {}));
  return str_value(utf8::to_upper(to_display_string(v)));
}

// Splits "name, *args, **kwargs" of map/select-style filters.
CallArgs rest_args(const CallArgs& args, std::size_t skip) {
  CallArgs rest;
  for (std::size_t i = skip; i < args.positional.size(); ++i)
    rest.positional.push_back(args.positional[i]);
  return rest;
}

Result<Value> f_map(Renderer& r, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* fallback = nullptr;
  for (const auto& [k, val] : args.keyword) {
    if (k == "attribute") {
      attribute = &val;
    } else if (k == "default") {
      fallback = &val;
    } else if (args.positional.empty()) {
      return invalid_argument("map() got an unexpected keyword argument '{}'", k);
    }
  }
  if (attribute != nullptr) {
    if (!args.positional.empty())
      return invalid_argument("map() takes either attribute= or a filter name");
    for (const Value& item : items) {
      CELLM_ASSIGN_OR_RETURN(Value x, attribute_of(item, *attribute));
      if (x.is_undefined() && fallback != nullptr) x = *fallback;
      out.push_back(std::move(x));
    }
    return Value::array(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return invalid_argument("map() needs a filter name or attribute=");
  }
  const std::string name = args.positional[0].as_string();
  if (find_filter(name) == nullptr) return invalid_argument("map(): no filter named '{}'", name);
  for (const Value& item : items) {
    CallArgs fa = rest_args(args, 1);
    fa.keyword = args.keyword;
    CELLM_ASSIGN_OR_RETURN(Value x, apply_filter(r, name, item, fa));
    out.push_back(std::move(x));
  }
  return Value::array(std::move(out));
}

Result<Value> select_impl(Renderer& r, const Value& v, CallArgs& args, bool by_attr, bool keep) {
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  std::size_t next = 0;
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) return invalid_argument("missing the attribute name");
    attribute = args.positional[next++];
  }
  std::optional<std::string> test;
  if (next < args.positional.size()) {
    if (!args.positional[next].is_string())
      return invalid_argument("the test name must be a string");
    test = args.positional[next++].as_string();
    if (find_test(*test) == nullptr) return invalid_argument("no test named '{}'", *test);
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      CELLM_ASSIGN_OR_RETURN(subject, attribute_of(item, attribute));
    }
    bool ok = false;
    if (test) {
      CallArgs ta = rest_args(args, next);
      ta.keyword = args.keyword;
      CELLM_ASSIGN_OR_RETURN(ok, apply_test(r, *test, subject, ta));
    } else {
      ok = truthy(subject);
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::array(std::move(out));
}

Result<Value> f_select(Renderer& r, const Value& v, CallArgs& a) {
  return select_impl(r, v, a, false, true);
}
Result<Value> f_reject(Renderer& r, const Value& v, CallArgs& a) {
  return select_impl(r, v, a, false, false);
}
Result<Value> f_selectattr(Renderer& r, const Value& v, CallArgs& a) {
  return select_impl(r, v, a, true, true);
}
Result<Value> f_rejectattr(Renderer& r, const Value& v, CallArgs& a) {
  return select_impl(r, v, a, true, false);
}

Result<Value> min_max(const Value& v, CallArgs& args, bool want_max) {
  CELLM_ASSIGN_OR_RETURN(
      Args a, bind_args(want_max ? "max" : "min", args,
                        {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool cs = truthy(a[0]);
  std::size_t best = 0;
  Value best_key;
  for (std::size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (!a[1].is_none()) {
      CELLM_ASSIGN_OR_RETURN(key, attribute_of(items[i], a[1]));
    }
    key = sort_key(key, cs);
    if (i == 0) {
      best_key = key;
      continue;
    }
    CELLM_ASSIGN_OR_RETURN(bool better,
                           want_max ? value_less(best_key, key) : value_less(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Result<Value> f_max(Renderer&, const Value& v, CallArgs& a) {
  return min_max(v, a, true);
}
Result<Value> f_min(Renderer&, const Value& v, CallArgs& a) {
  return min_max(v, a, false);
}

Result<Value> f_replace(Renderer& r, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(
      Args a, bind_args("replace", args,
                        {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::none()}}));
  CallArgs m;
  m.positional = {Value::string(to_display_string(a[0])), Value::string(to_display_string(a[1])),
                  a[2].is_none() ? Value::integer(-1) : a[2]};
  auto method = find_method(Value::string(to_display_string(v)), "replace");
  return r.call(*method, m);
}

Result<Value> f_reverse(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("reverse", args, {}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  std::reverse(items.begin(), items.end());
  if (v.is_string()) {
    std::string out;
    for (const Value& c : items) out += c.as_string();
    return str_value(std::move(out));
  }
  return Value::array(std::move(items));
}

Result<Value> f_round(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(
      Args a, bind_args("round", args,
                        {{"precision", Value::integer(0)}, {"method", Value::string("common")}}));
  if (!v.is_numeric()) return invalid_argument("round() needs a number, got '{}'", type_name(v));
  if (!a[0].is_int()) return invalid_argument("round() precision must be an integer");
  const std::string method = a[1].is_string() ? a[1].as_string() : "";
  const double x = v.to_double();
  const std::int64_t p = std::clamp<std::int64_t>(a[0].as_int(), -300, 300);
  if (method == "ceil" || method == "floor") {
    const double scale = std::pow(10.0, static_cast<double>(p));
    return Value::number((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (method != "common") return invalid_argument("round() method must be common, ceil or floor");
  if (!std::isfinite(x) || p < 0)
    return Value::number(std::nearbyint(x / std::pow(10.0, static_cast<double>(-p))) *
                         std::pow(10.0, static_cast<double>(-p)));
  // printf rounds the exact binary value half-to-even, as Python's round().
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(p), x);
  return Value::number(std::strtod(buf, nullptr));
}

Result<Value> f_safe(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("safe", args, {}));
  return str_value(to_display_string(v));
}

Result<Value> f_sort(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("sort", args,
                                           {{"reverse", Value::boolean(false)},
                                            {"case_sensitive", Value::boolean(false)},
                                            {"attribute", Value::none()}}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = item;
    if (!a[2].is_none()) {
      CELLM_ASSIGN_OR_RETURN(key, attribute_of(item, a[2]));
    }
    keyed.emplace_back(sort_key(key, truthy(a[1])), std::move(item));
  }
  Status failure;
  const bool rev = truthy(a[0]);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto less = rev ? value_less(y.first, x.first) : value_less(x.first, y.first);
    if (!less.ok()) {
      failure = less.status();
      return false;
    }
    return *less;
  });
  CELLM_RETURN_IF_ERROR(failure);
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::array(std::move(out));
}

Result<Value> f_string(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("string", args, {}));
  return str_value(to_display_string(v));
}

Result<Value> f_sum(Renderer& r, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(
      Args a, bind_args("sum", args, {{"attribute", Value::none()}, {"start", Value::integer(0)}}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  Value total = a[1];
  for (const Value& item : items) {
    Value x = item;
    if (!a[0].is_none()) {
      CELLM_ASSIGN_OR_RETURN(x, attribute_of(item, a[0]));
    }
    CELLM_ASSIGN_OR_RETURN(total, binary_op(r, "+", total, x));
  }
  return total;
}

Result<Value> f_title(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("title", args, {}));
  // Jinja: words start after whitespace, '-', '(', '{', '[' or '<'.
  const std::string s = to_display_string(v);
  std::string out;
  bool word_start = true;
  for (std::size_t i = 0; i < s.size();) {
    const char32_t cp = utf8::next(s, i);
    const bool sep =
        utf8::is_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    char32_t c = cp;
    if (!sep && cp < 0x80) {
      c = static_cast<char32_t>(word_start ? std::toupper(static_cast<int>(cp))
                                           : std::tolower(static_cast<int>(cp)));
    }
    utf8::append(out, c);
    word_start = sep;
  }
  return str_value(std::move(out));
}

Result<Value> f_tojson(Renderer& r, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("tojson", args,
                                           {{"ensure_ascii", Value::boolean(false)},
                                            {"indent", Value::none()},
                                            {"separators", Value::none()},
                                            {"sort_keys", Value::boolean(false)}}));
  JsonDumpOptions o;
  o.ensure_ascii = truthy(a[0]);
  if (a[1].is_int() || a[1].is_bool()) {
    const std::int64_t n = a[1].is_bool() ? a[1].as_bool() : a[1].as_int();
    o.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(n, 0, 4096)), ' ');
  } else if (a[1].is_string()) {
    o.indent = a[1].as_string();
  } else if (!a[1].is_none()) {
    return invalid_argument("tojson() indent must be an integer, a string or none");
  }
  if (o.indent) o.item_separator = ",";
  if (!a[2].is_none()) {
    if (!a[2].is_array() || a[2].as_array().items.size() != 2 ||
        !a[2].as_array().items[0].is_string() || !a[2].as_array().items[1].is_string()) {
      return invalid_argument("tojson() separators must be a pair of strings");
    }
    o.item_separator = a[2].as_array().items[0].as_string();
    o.key_separator = a[2].as_array().items[1].as_string();
  }
  o.sort_keys = truthy(a[3]);
  CELLM_ASSIGN_OR_RETURN(std::string s, dump_json(v, o));
  CELLM_RETURN_IF_ERROR(r.check_size(s.size()));
  return str_value(std::move(s));
}

Result<Value> f_trim(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("trim", args, {{"chars", Value::none()}}));
  std::optional<std::string> chars;
  if (a[0].is_string()) chars = a[0].as_string();
  return str_value(utf8::strip(to_display_string(v), chars, true, true));
}

Result<Value> f_unique(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(
      Args a, bind_args("unique", args,
                        {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}}));
  CELLM_ASSIGN_OR_RETURN(auto items, iterate(v));
  std::vector<Value> out;
  std::vector<Value> seen;
  for (const Value& item : items) {
    Value key = item;
    if (!a[1].is_none()) {
      CELLM_ASSIGN_OR_RETURN(key, attribute_of(item, a[1]));
    }
    key = sort_key(key, truthy(a[0]));
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); }))
      continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::array(std::move(out));
}

Result<Value> f_wordcount(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("wordcount", args, {}));
  const std::string s = to_display_string(v);
  std::int64_t words = 0;
  bool in_word = false;
  for (unsigned char c : s) {
    const bool w = std::isalnum(c) || c == '_' || c >= 0x80;
    if (w && !in_word) ++words;
    in_word = w;
  }
  return Value::integer(words);
}

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"forceescape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& t = filter_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

bool is_known_jinja_filter(std::string_view name) {
  static constexpr std::string_view kOthers[] = {
      "filesizeformat", "format",   "groupby",   "pprint", "random",   "slice",
      "striptags",      "truncate", "urlencode", "urlize", "wordwrap", "xmlattr"};
  return std::find(std::begin(kOthers), std::end(kOthers), name) != std::end(kOthers);
}

Result<Value> apply_filter(Renderer& renderer, std::string_view name, const Value& input,
                           CallArgs& args) {
  FilterFn f = find_filter(name);
  if (f == nullptr) return invalid_argument("no filter named '{}'", name);
  return f(renderer, input, args);
}

}  // namespace cellm::chat
