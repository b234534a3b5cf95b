// Methods of str, list and dict that templates call (message.content.split(...),
// tool.items(), ...), plus argument binding, slicing and iteration helpers.
#include <algorithm>
#include <limits>

#include "chat/builtins.h"
#include "chat/renderer.h"
#include "chat/utf8.h"

namespace cellm::chat {

Result<std::vector<Value>> bind_args(std::string_view callee, CallArgs& args,
                                     std::initializer_list<Param> params) {
  const std::size_t n = params.size();
  if (args.positional.size() > n) {
    return invalid_argument("{}() takes at most {} argument(s) ({} given)", callee, n,
                            args.positional.size());
  }
  std::vector<std::optional<Value>> bound(n);
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (auto& [k, v] : args.keyword) {
    std::size_t i = 0;
    for (const Param& p : params) {
      if (p.name == k) break;
      ++i;
    }
    if (i == n) return invalid_argument("{}() got an unexpected keyword argument '{}'", callee, k);
    if (bound[i]) return invalid_argument("{}() got multiple values for argument '{}'", callee, k);
    bound[i] = v;
  }
  std::vector<Value> out;
  out.reserve(n);
  std::size_t i = 0;
  for (const Param& p : params) {
    if (bound[i]) {
      out.push_back(std::move(*bound[i]));
    } else if (p.default_value) {
      out.push_back(*p.default_value);
    } else {
      return invalid_argument("{}() is missing the required argument '{}'", callee, p.name);
    }
    ++i;
  }
  return out;
}

Result<std::vector<std::int64_t>> slice_indices(std::int64_t n, const Value& start,
                                                const Value& stop, const Value& step) {
  const auto as_index = [](const Value& v, std::int64_t& out) -> Status {
    if (v.is_int()) {
      out = v.as_int();
    } else if (v.is_bool()) {
      out = v.as_bool();
    } else {
      return invalid_argument("slice indices must be integers or none, not '{}'", type_name(v));
    }
    return Status::ok();
  };
  std::int64_t st = 1;
  if (!step.is_none()) CELLM_RETURN_IF_ERROR(as_index(step, st));
  if (st == 0) return invalid_argument("slice step cannot be zero");
  const std::int64_t lower = st > 0 ? 0 : -1;
  const std::int64_t upper = st > 0 ? n : n - 1;
  const auto clamp = [&](const Value& v, std::int64_t fallback, std::int64_t& out) -> Status {
    if (v.is_none()) {
      out = fallback;
      return Status::ok();
    }
    CELLM_RETURN_IF_ERROR(as_index(v, out));
    if (out < 0) {
      out = out < std::numeric_limits<std::int64_t>::min() + n ? lower : out + n;
      if (out < lower) out = lower;
    } else if (out > upper) {
      out = upper;
    }
    return Status::ok();
  };
  std::int64_t b = 0;
  std::int64_t e = 0;
  CELLM_RETURN_IF_ERROR(clamp(start, st > 0 ? lower : upper, b));
  CELLM_RETURN_IF_ERROR(clamp(stop, st > 0 ? upper : lower, e));
  std::vector<std::int64_t> out;
  if (st > 0) {
    for (std::int64_t i = b; i < e; i += st) {
      out.push_back(i);
      if (e - i <= st) break;
    }
  } else {
    for (std::int64_t i = b; i > e; i += st) {
      out.push_back(i);
      if (i - e <= -st) break;
    }
  }
  return out;
}

Result<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kArray: return v.as_array().items;
    case ValueKind::kObject: {
      std::vector<Value> keys;
      for (const auto& [k, val] : v.as_object().entries) keys.push_back(Value::string(k));
      return keys;
    }
    case ValueKind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      const auto b = utf8::boundaries(s);
      for (std::size_t i = 0; i + 1 < b.size(); ++i)
        chars.push_back(Value::string(s.substr(b[i], b[i + 1] - b[i])));
      return chars;
    }
    case ValueKind::kUndefined: return std::vector<Value>{};
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kNamespace:
    case ValueKind::kFunction: break;
  }
  return invalid_argument("'{}' object is not iterable", type_name(v));
}

namespace {

Result<std::string> string_arg(const Value& v, std::string_view what) {
  if (!v.is_string()) return invalid_argument("{} must be a string, not '{}'", what, type_name(v));
  return v.as_string();
}

std::optional<std::string> chars_arg(const Value& v) {
  if (v.is_none()) return std::nullopt;
  return v.is_string() ? std::optional<std::string>(v.as_string()) : std::nullopt;
}

// Python str.split / str.rsplit.
Result<Value> split(const std::string& s, const Value& sep_v, const Value& max_v, bool from_right) {
  if (!sep_v.is_none() && !sep_v.is_string()) {
    return invalid_argument("split() separator must be a string or none");
  }
  if (!max_v.is_int()) return invalid_argument("split() maxsplit must be an integer");
  std::int64_t maxsplit = max_v.as_int();
  if (maxsplit < 0) maxsplit = std::numeric_limits<std::int64_t>::max();
  std::vector<std::string> parts;
  if (sep_v.is_none()) {
    // Runs of whitespace separate; leading/trailing whitespace yields nothing.
    std::vector<std::pair<std::size_t, std::size_t>> words;  // byte ranges
    std::size_t i = 0;
    while (i < s.size()) {
      std::size_t j = i;
      const char32_t cp = utf8::next(s, j);
      if (utf8::is_space(cp)) {
        i = j;
        continue;
      }
      std::size_t end = j;
      while (end < s.size()) {
        std::size_t k = end;
        if (utf8::is_space(utf8::next(s, k))) break;
        end = k;
      }
      words.emplace_back(i, end);
      i = end;
    }
    const auto count = static_cast<std::int64_t>(words.size());
    if (count - 1 <= maxsplit) {
      for (auto [a, b] : words) parts.push_back(s.substr(a, b - a));
    } else if (!from_right) {
      for (std::int64_t k = 0; k < maxsplit; ++k) {
        parts.push_back(s.substr(
            words[static_cast<std::size_t>(k)].first,
            words[static_cast<std::size_t>(k)].second - words[static_cast<std::size_t>(k)].first));
      }
      const std::size_t rest = words[static_cast<std::size_t>(maxsplit)].first;
      parts.push_back(s.substr(rest));
    } else {
      const std::size_t cut = static_cast<std::size_t>(count - maxsplit);
      parts.push_back(s.substr(0, words[cut - 1].second));
      for (std::size_t k = cut; k < words.size(); ++k)
        parts.push_back(s.substr(words[k].first, words[k].second - words[k].first));
    }
  } else {
    const std::string& sep = sep_v.as_string();
    if (sep.empty()) return invalid_argument("empty separator");
    if (!from_right) {
      std::size_t start = 0;
      std::int64_t done = 0;
      while (done < maxsplit) {
        const std::size_t at = s.find(sep, start);
        if (at == std::string::npos) break;
        parts.push_back(s.substr(start, at - start));
        start = at + sep.size();
        ++done;
      }
      parts.push_back(s.substr(start));
    } else {
      std::size_t end = s.size();
      std::int64_t done = 0;
      std::vector<std::string> rev;
      while (done < maxsplit && end >= sep.size()) {
        const std::size_t at = s.rfind(sep, end - sep.size());
        if (at == std::string::npos) break;
        rev.push_back(s.substr(at + sep.size(), end - at - sep.size()));
        end = at;
        ++done;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  std::vector<Value> out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::array(std::move(out));
}

std::string replace_all(const std::string& s, const std::string& old, const std::string& repl,
                        std::int64_t count) {
  if (count < 0) count = std::numeric_limits<std::int64_t>::max();
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` before every code point and at the end.
    std::int64_t done = 0;
    std::size_t i = 0;
    while (i < s.size()) {
      if (done < count) {
        out += repl;
        ++done;
      }
      std::size_t j = i;
      utf8::next(s, j);
      out.append(s, i, j - i);
      i = j;
    }
    if (done < count) out += repl;
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  while (done < count) {
    const std::size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    out += repl;
    start = at + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

bool is_cased_letter(char32_t cp) {
  return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp >= 0xC0;
}

std::string python_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (std::size_t i = 0; i < s.size();) {
    char32_t cp = utf8::next(s, i);
    if (cp < 0x80 && is_cased_letter(cp)) {
      cp = prev_cased ? static_cast<char32_t>(std::tolower(static_cast<int>(cp)))
                      : static_cast<char32_t>(std::toupper(static_cast<int>(cp)));
    }
    prev_cased = is_cased_letter(cp);
    utf8::append(out, cp);
  }
  return out;
}

Result<Value> format_string(Renderer& r, const std::string& fmt_s, CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt_s.size(); ++i) {
    const char c = fmt_s[i];
    if (c == '}') {
      if (i + 1 < fmt_s.size() && fmt_s[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return invalid_argument("single '}}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt_s.size() && fmt_s[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const std::size_t close = fmt_s.find('}', i);
    if (close == std::string::npos) return invalid_argument("unmatched '{{' in format string");
    std::string field = fmt_s.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    if (const std::size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 'r' && field[bang + 1] != 's')) {
        return not_supported("format conversion in '{{{}}}' is not supported", field);
      }
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos || field.find('.') != std::string::npos ||
        field.find('[') != std::string::npos) {
      return not_supported("format specs and field access ('{{{}}}') are not supported", field);
    }
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_index >= args.positional.size())
        return invalid_argument("format(): not enough positional arguments");
      v = &args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return d >= '0' && d <= '9'; })) {
      const std::size_t k = std::stoul(field.substr(0, 9));
      if (k >= args.positional.size())
        return invalid_argument("format(): no positional argument {}", k);
      v = &args.positional[k];
    } else {
      for (const auto& [name, val] : args.keyword) {
        if (name == field) v = &val;
      }
      if (v == nullptr) return invalid_argument("format(): no argument named '{}'", field);
    }
    out += conversion == 'r' ? to_repr(*v) : to_display_string(*v);
    CELLM_RETURN_IF_ERROR(r.check_size(out.size()));
  }
  return Value::string(std::move(out));
}

// Index of the first/last occurrence, in code points; -1 when absent.
std::int64_t find_cp(const std::string& s, const std::string& sub, bool last) {
  const std::size_t at = last ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) return -1;
  return static_cast<std::int64_t>(utf8::length(std::string_view(s).substr(0, at)));
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return pred(static_cast<unsigned char>(c)); });
}

Result<Value> string_method(Renderer& r, const std::string& s, const std::string& name,
                            CallArgs& args) {
  const std::string callee = "str." + name;
  if (name == "startswith" || name == "endswith") {
    CELLM_ASSIGN_OR_RETURN(auto a, bind_args(callee, args, {{"prefix", std::nullopt}}));
    std::vector<std::string> options;
    if (a[0].is_array() && a[0].as_array().is_tuple) {
      for (const Value& v : a[0].as_array().items) {
        CELLM_ASSIGN_OR_RETURN(std::string o, string_arg(v, callee + " argument"));
        options.push_back(std::move(o));
      }
    } else {
      CELLM_ASSIGN_OR_RETURN(std::string o, string_arg(a[0], callee + " argument"));
      options.push_back(std::move(o));
    }
    const bool starts = name == "startswith";
    for (const std::string& o : options) {
      if (o.size() <= s.size() && (starts ? s.compare(0, o.size(), o) == 0
                                          : s.compare(s.size() - o.size(), o.size(), o) == 0)) {
        return Value::boolean(true);
      }
    }
    return Value::boolean(false);
  }
  if (name == "split" || name == "rsplit") {
    CELLM_ASSIGN_OR_RETURN(
        auto a,
        bind_args(callee, args, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}}));
    return split(s, a[0], a[1], name == "rsplit");
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    CELLM_ASSIGN_OR_RETURN(auto a, bind_args(callee, args, {{"chars", Value::none()}}));
    if (!a[0].is_none() && !a[0].is_string())
      return invalid_argument("{}() argument must be a string or none", callee);
    return Value::string(utf8::strip(s, chars_arg(a[0]), name != "rstrip", name != "lstrip"));
  }
  if (name == "replace") {
    CELLM_ASSIGN_OR_RETURN(
        auto a,
        bind_args(callee, args,
                  {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value::integer(-1)}}));
    CELLM_ASSIGN_OR_RETURN(std::string old, string_arg(a[0], "replace() old"));
    CELLM_ASSIGN_OR_RETURN(std::string repl, string_arg(a[1], "replace() new"));
    if (!a[2].is_int()) return invalid_argument("replace() count must be an integer");
    std::string out = replace_all(s, old, repl, a[2].as_int());
    CELLM_RETURN_IF_ERROR(r.check_size(out.size()));
    return Value::string(std::move(out));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    CELLM_ASSIGN_OR_RETURN(auto a, bind_args(callee, args, {}));
    if (name == "upper") return Value::string(utf8::to_upper(s));
    if (name == "lower") return Value::string(utf8::to_lower(s));
    if (name == "title") return Value::string(python_title(s));
    std::string out = utf8::to_lower(s);
    if (!out.empty() && out[0] >= 'a' && out[0] <= 'z')
      out[0] = static_cast<char>(out[0] - 'a' + 'A');
    return Value::string(std::move(out));
  }
  if (name == "format") return format_string(r, s, args);
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    CELLM_ASSIGN_OR_RETURN(auto a, bind_args(callee, args, {{"sub", std::nullopt}}));
    CELLM_ASSIGN_OR_RETURN(std::string sub, string_arg(a[0], callee + " argument"));
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<std::int64_t>(utf8::length(s)) + 1);
      std::int64_t n = 0;
      for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
        ++n;
      return Value::integer(n);
    }
    const std::int64_t at = find_cp(s, sub, name[0] == 'r');
    if (at < 0 && name.find("index") != std::string::npos)
      return invalid_argument("substring not found");
    return Value::integer(at);
  }
  if (name == "join") {
    CELLM_ASSIGN_OR_RETURN(auto a, bind_args(callee, args, {{"iterable", std::nullopt}}));
    CELLM_ASSIGN_OR_RETURN(auto items, iterate(a[0]));
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return invalid_argument("sequence item {}: expected str instance, {} found", i,
                                type_name(items[i]));
      }
      if (i) out += s;
      out += items[i].as_string();
      CELLM_RETURN_IF_ERROR(r.check_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    CELLM_ASSIGN_OR_RETURN(auto a, bind_args(callee, args, {{"affix", std::nullopt}}));
    CELLM_ASSIGN_OR_RETURN(std::string affix, string_arg(a[0], callee + " argument"));
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0)
      return Value::string(s.substr(affix.size()));
    if (name == "removesuffix" && affix.size() <= s.size() && !affix.empty() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value::string(s.substr(0, s.size() - affix.size()));
    }
    return Value::string(s);
  }
  if (name == "splitlines") {
    CELLM_ASSIGN_OR_RETURN(auto a, bind_args(callee, args, {}));
    std::vector<Value> lines;
    std::size_t start = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        lines.push_back(Value::string(s.substr(start, i - start)));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) lines.push_back(Value::string(s.substr(start)));
    return Value::array(std::move(lines));
  }
  CELLM_ASSIGN_OR_RETURN(auto a, bind_args(callee, args, {}));
  if (name == "isdigit")
    return Value::boolean(all_chars(s, [](unsigned char c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value::boolean(
        all_chars(s, [](unsigned char c) { return std::isalpha(c) || c >= 0x80; }));
  if (name == "isalnum")
    return Value::boolean(
        all_chars(s, [](unsigned char c) { return std::isalnum(c) || c >= 0x80; }));
  if (name == "isspace")
    return Value::boolean(!s.empty() && utf8::strip(s, std::nullopt, true, true).empty());
  if (name == "islower") return Value::boolean(s != utf8::to_upper(s) && s == utf8::to_lower(s));
  if (name == "isupper") return Value::boolean(s != utf8::to_lower(s) && s == utf8::to_upper(s));
  return internal_error("str.{} is listed but not implemented", name);
}

Result<Value> dict_method(const Value& self, const std::string& name, CallArgs& args) {
  const auto& entries = self.as_object().entries;
  if (name == "get") {
    CELLM_ASSIGN_OR_RETURN(
        auto a, bind_args("dict.get", args, {{"key", std::nullopt}, {"default", Value::none()}}));
    if (a[0].is_string()) {
      if (const Value* v = self.as_object().find(a[0].as_string())) return *v;
    }
    return a[1];
  }
  CELLM_ASSIGN_OR_RETURN(auto a, bind_args("dict." + name, args, {}));
  if (name == "copy") return self;
  std::vector<Value> out;
  out.reserve(entries.size());
  for (const auto& [k, v] : entries) {
    if (name == "items") {
      out.push_back(Value::array({Value::string(k), v}, true));
    } else if (name == "keys") {
      out.push_back(Value::string(k));
    } else {
      out.push_back(v);
    }
  }
  return Value::array(std::move(out));
}

Result<Value> list_method(const Value& self, const std::string& name, CallArgs& args) {
  CELLM_ASSIGN_OR_RETURN(auto a, bind_args("list." + name, args, {{"value", std::nullopt}}));
  const auto& items = self.as_array().items;
  std::int64_t count = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!values_equal(items[i], a[0])) continue;
    if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
    ++count;
  }
  if (name == "index") return invalid_argument("{} is not in list", to_repr(a[0]));
  return Value::integer(count);
}

constexpr std::string_view kStringMethods[] = {
    "startswith", "endswith", "split",   "rsplit",  "strip",      "lstrip",       "rstrip",
    "replace",    "upper",    "lower",   "title",   "capitalize", "format",       "find",
    "rfind",      "index",    "rindex",  "count",   "join",       "removeprefix", "removesuffix",
    "splitlines", "isdigit",  "isalpha", "isalnum", "isspace",    "islower",      "isupper"};
constexpr std::string_view kDictMethods[] = {"items", "keys", "values", "get", "copy"};
constexpr std::string_view kDictMutators[] = {"pop", "popitem", "setdefault", "update", "clear"};
constexpr std::string_view kListMethods[] = {"index", "count"};
constexpr std::string_view kListMutators[] = {"append", "extend",  "insert", "pop",
                                              "remove", "reverse", "sort",   "clear"};

template <std::size_t N>
bool listed(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Value unsafe(std::string_view name, std::string_view type) {
  return Value::undefined(
      fmt::format("access to attribute '{}' of '{}' object is unsafe: "
                  "chat templates cannot modify their inputs",
                  name, type));
}

}  // namespace

std::optional<Value> find_method(const Value& self, std::string_view name) {
  const std::string n(name);
  if (self.is_string() && listed(kStringMethods, name)) {
    return Value::function("str." + n, [self, n](Renderer& r, CallArgs& args) {
      return string_method(r, self.as_string(), n, args);
    });
  }
  if (self.is_object()) {
    if (listed(kDictMethods, name)) {
      return Value::function(
          "dict." + n, [self, n](Renderer&, CallArgs& args) { return dict_method(self, n, args); });
    }
    if (listed(kDictMutators, name)) return unsafe(name, "dict");
  }
  if (self.is_array()) {
    if (listed(kListMethods, name)) {
      return Value::function(
          "list." + n, [self, n](Renderer&, CallArgs& args) { return list_method(self, n, args); });
    }
    if (listed(kListMutators, name)) return unsafe(name, "list");
  }
  return std::nullopt;
}

}  // namespace cellm::chat
