// Jinja's builtin tests (`x is defined`, `x is string`, ...) and the global
// functions transformers exposes to chat templates.
#include <algorithm>
#include <ctime>
#include <unordered_map>

#include "chat/builtins.h"
#include "chat/renderer.h"
#include "chat/utf8.h"

namespace cellm::chat {
namespace {

using Args = std::vector<Value>;

#define CELLM_CHAT_SIMPLE_TEST(fn, expr)                       \
  Result<bool> fn(Renderer&, const Value& v, CallArgs& args) { \
    CELLM_ASSIGN_OR_RETURN(Args a, bind_args(#fn, args, {}));  \
    return (expr);                                             \
  }

CELLM_CHAT_SIMPLE_TEST(t_defined, !v.is_undefined())
CELLM_CHAT_SIMPLE_TEST(t_undefined, v.is_undefined())
CELLM_CHAT_SIMPLE_TEST(t_none, v.is_none())
CELLM_CHAT_SIMPLE_TEST(t_boolean, v.is_bool())
CELLM_CHAT_SIMPLE_TEST(t_true, v.is_bool() && v.as_bool())
CELLM_CHAT_SIMPLE_TEST(t_false, v.is_bool() && !v.as_bool())
CELLM_CHAT_SIMPLE_TEST(t_integer, v.is_int())
CELLM_CHAT_SIMPLE_TEST(t_float, v.is_float())
CELLM_CHAT_SIMPLE_TEST(t_number, v.is_numeric())
CELLM_CHAT_SIMPLE_TEST(t_string, v.is_string())
CELLM_CHAT_SIMPLE_TEST(t_mapping, v.is_object())
// Jinja's Undefined iterates (as empty) and has a length, so it passes both.
CELLM_CHAT_SIMPLE_TEST(t_iterable,
                       v.is_string() || v.is_array() || v.is_object() || v.is_undefined())
CELLM_CHAT_SIMPLE_TEST(t_sequence,
                       v.is_string() || v.is_array() || v.is_object() || v.is_undefined())
CELLM_CHAT_SIMPLE_TEST(t_callable, v.is_function() || v.is_undefined())
CELLM_CHAT_SIMPLE_TEST(t_escaped, (static_cast<void>(v), false))
CELLM_CHAT_SIMPLE_TEST(t_lower, v.is_string() && v.as_string() != utf8::to_upper(v.as_string()) &&
                                    v.as_string() == utf8::to_lower(v.as_string()))
CELLM_CHAT_SIMPLE_TEST(t_upper, v.is_string() && v.as_string() != utf8::to_lower(v.as_string()) &&
                                    v.as_string() == utf8::to_upper(v.as_string()))
#undef CELLM_CHAT_SIMPLE_TEST

Result<std::int64_t> integer_of(const Value& v, std::string_view test) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return static_cast<std::int64_t>(v.as_bool());
  if (v.is_undefined()) return invalid_argument("{}", v.undefined_hint());
  return invalid_argument("the '{}' test needs an integer, got '{}'", test, type_name(v));
}

Result<bool> t_odd(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("odd", args, {}));
  CELLM_ASSIGN_OR_RETURN(std::int64_t i, integer_of(v, "odd"));
  return i % 2 != 0;
}

Result<bool> t_even(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("even", args, {}));
  CELLM_ASSIGN_OR_RETURN(std::int64_t i, integer_of(v, "even"));
  return i % 2 == 0;
}

Result<bool> t_divisibleby(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("divisibleby", args, {{"num", std::nullopt}}));
  CELLM_ASSIGN_OR_RETURN(std::int64_t i, integer_of(v, "divisibleby"));
  CELLM_ASSIGN_OR_RETURN(std::int64_t n, integer_of(a[0], "divisibleby"));
  if (n == 0) return invalid_argument("divisibleby(0)");
  if (n == -1) return true;
  return i % n == 0;
}

template <int kOp>
Result<bool> t_compare(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("compare", args, {{"other", std::nullopt}}));
  static constexpr std::string_view kOps[] = {"==", "!=", "<", "<=", ">", ">=", "in"};
  return compare_op(kOps[kOp], v, a[0]);
}

Result<bool> t_sameas(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("sameas", args, {{"other", std::nullopt}}));
  const Value& o = a[0];
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case ValueKind::kArray: return &v.as_array() == &o.as_array();
    case ValueKind::kObject: return &v.as_object() == &o.as_object();
    default: return values_equal(v, o);
  }
}

Result<bool> t_filter(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("filter", args, {}));
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}

Result<bool> t_test(Renderer&, const Value& v, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("test", args, {}));
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

const std::unordered_map<std::string_view, TestFn>& test_table() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"lower", t_lower},
      {"upper", t_upper},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
      {"eq", t_compare<0>},
      {"equalto", t_compare<0>},
      {"==", t_compare<0>},
      {"ne", t_compare<1>},
      {"!=", t_compare<1>},
      {"lt", t_compare<2>},
      {"lessthan", t_compare<2>},
      {"<", t_compare<2>},
      {"le", t_compare<3>},
      {"<=", t_compare<3>},
      {"gt", t_compare<4>},
      {"greaterthan", t_compare<4>},
      {">", t_compare<4>},
      {"ge", t_compare<5>},
      {">=", t_compare<5>},
      {"in", t_compare<6>},
  };
  return table;
}

// ---- globals ---------------------------------------------------------------

Result<Value> g_range(Renderer& r, CallArgs& args) {
  if (!args.keyword.empty()) return invalid_argument("range() takes no keyword arguments");
  std::int64_t start = 0;
  std::int64_t stop = 0;
  std::int64_t step = 1;
  std::vector<std::int64_t> n;
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool())
      return invalid_argument("range() arguments must be integers, not '{}'", type_name(v));
    n.push_back(v.is_bool() ? v.as_bool() : v.as_int());
  }
  if (n.size() == 1) {
    stop = n[0];
  } else if (n.size() == 2 || n.size() == 3) {
    start = n[0];
    stop = n[1];
    if (n.size() == 3) step = n[2];
  } else {
    return invalid_argument("range() takes 1 to 3 arguments, got {}", n.size());
  }
  if (step == 0) return invalid_argument("range() step must not be zero");
  const double count =
      std::max(0.0, std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                              static_cast<double>(step)));
  CELLM_RETURN_IF_ERROR(r.check_size(static_cast<std::size_t>(std::min(count, 1e18))));
  std::vector<Value> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(count); ++i)
    out.push_back(Value::integer(start + i * step));
  return Value::array(std::move(out));
}

// dict(mapping or pairs, **kwargs) / namespace(...): the entries.
Result<std::vector<std::pair<std::string, Value>>> entries_of(std::string_view callee,
                                                              CallArgs& args) {
  std::vector<std::pair<std::string, Value>> entries;
  const auto put = [&](std::string k, Value v) {
    for (auto& e : entries) {
      if (e.first == k) {
        e.second = std::move(v);
        return;
      }
    }
    entries.emplace_back(std::move(k), std::move(v));
  };
  if (args.positional.size() > 1)
    return invalid_argument("{}() takes at most one positional argument", callee);
  if (args.positional.size() == 1) {
    const Value& src = args.positional[0];
    if (src.is_object()) {
      for (const auto& [k, v] : src.as_object().entries) put(k, v);
    } else if (src.is_array()) {
      for (const Value& pair : src.as_array().items) {
        if (!pair.is_array() || pair.as_array().items.size() != 2 ||
            !pair.as_array().items[0].is_string()) {
          return invalid_argument("{}() needs (string key, value) pairs", callee);
        }
        put(pair.as_array().items[0].as_string(), pair.as_array().items[1]);
      }
    } else {
      return invalid_argument("{}() cannot build a mapping from '{}'", callee, type_name(src));
    }
  }
  for (auto& [k, v] : args.keyword) put(k, v);
  return entries;
}

Result<Value> g_dict(Renderer&, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(auto entries, entries_of("dict", args));
  return Value::object(std::move(entries));
}

Result<Value> g_namespace(Renderer&, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(auto entries, entries_of("namespace", args));
  for (const auto& [k, v] : entries) {
    if (!k.empty() && k[0] == '_') {
      return invalid_argument("namespace attributes may not start with '_' ('{}')", k);
    }
    if (contains_namespace(v))
      return invalid_argument("a namespace cannot be stored inside a namespace");
  }
  return Value::make_namespace(std::move(entries));
}

Result<Value> g_raise_exception(Renderer& r, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("raise_exception", args, {{"message", std::nullopt}}));
  return r.raise(to_display_string(a[0]));
}

Result<Value> g_strftime_now(Renderer&, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(Args a, bind_args("strftime_now", args, {{"format", std::nullopt}}));
  if (!a[0].is_string()) return invalid_argument("strftime_now() format must be a string");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  const std::size_t n = std::strftime(buf, sizeof(buf), a[0].as_string().c_str(), &local);
  if (n == 0 && !a[0].as_string().empty())
    return invalid_argument("strftime_now() format produced nothing or too much");
  return Value::string(std::string(buf, n));
}

Result<Value> g_unsupported(Renderer&, CallArgs&) {
  return not_supported("this Jinja global (cycler, joiner, lipsum) is not supported");
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& t = test_table();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

bool is_known_jinja_test(std::string_view) {
  return false;
}

Result<bool> apply_test(Renderer& renderer, std::string_view name, const Value& input,
                        CallArgs& args) {
  TestFn t = find_test(name);
  if (t == nullptr) return invalid_argument("no test named '{}'", name);
  return t(renderer, input, args);
}

std::optional<Value> find_global(std::string_view name) {
  using Fn = Result<Value> (*)(Renderer&, CallArgs&);
  static const std::unordered_map<std::string_view, Fn> table = {
      {"range", g_range},
      {"dict", g_dict},
      {"namespace", g_namespace},
      {"raise_exception", g_raise_exception},
      {"strftime_now", g_strftime_now},
      {"cycler", g_unsupported},
      {"joiner", g_unsupported},
      {"lipsum", g_unsupported},
  };
  auto it = table.find(name);
  if (it == table.end()) return std::nullopt;
  Fn fn = it->second;
  return Value::function(std::string(name), [fn](Renderer& r, CallArgs& a) { return fn(r, a); });
}

}  // namespace cellm::chat
