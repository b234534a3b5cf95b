#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/utf8.h"

namespace cellm::chat {

Value Value::array(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ArrayData>();
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, v.depth());
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  data->depth = depth + 1;
  return Value(Tag{}, std::shared_ptr<const ArrayData>(std::move(data)));
}

Value Value::object(std::vector<std::pair<std::string, Value>> entries) {
  auto data = std::make_shared<ObjectData>();
  int depth = 0;
  for (const auto& [k, v] : entries) depth = std::max(depth, v.depth());
  data->entries = std::move(entries);
  data->depth = depth + 1;
  return Value(Tag{}, std::shared_ptr<const ObjectData>(std::move(data)));
}

Value Value::make_namespace(std::vector<std::pair<std::string, Value>> entries) {
  auto data = std::make_shared<NamespaceData>();
  for (auto& entry : entries) data->set(std::move(entry.first), std::move(entry.second));
  return Value(Tag{}, std::move(data));
}

Value Value::function(std::string name, NativeFunction fn) {
  auto data = std::make_shared<FunctionData>();
  data->name = std::move(name);
  data->fn = std::move(fn);
  return Value(Tag{}, std::shared_ptr<const FunctionData>(std::move(data)));
}

double Value::to_double() const {
  switch (kind()) {
    case ValueKind::kBool: return as_bool() ? 1.0 : 0.0;
    case ValueKind::kInt: return static_cast<double>(as_int());
    case ValueKind::kFloat: return as_float();
    default: return 0.0;
  }
}

int Value::depth() const {
  switch (kind()) {
    case ValueKind::kArray: return as_array().depth;
    case ValueKind::kObject: return as_object().depth;
    case ValueKind::kNamespace: return 1;
    default: return 0;
  }
}

const Value* ObjectData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

const Value* NamespaceData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k == key) return &v;
  }
  return nullptr;
}

void NamespaceData::set(std::string key, Value value) {
  for (auto& [k, v] : entries) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return false;
    case ValueKind::kBool: return v.as_bool();
    case ValueKind::kInt: return v.as_int() != 0;
    case ValueKind::kFloat: return v.as_float() != 0.0;
    case ValueKind::kString: return !v.as_string().empty();
    case ValueKind::kArray: return !v.as_array().items.empty();
    case ValueKind::kObject: return !v.as_object().entries.empty();
    case ValueKind::kNamespace:
    case ValueKind::kFunction: return true;
  }
  return false;
}

std::string_view type_name(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return "Undefined";
    case ValueKind::kNone: return "NoneType";
    case ValueKind::kBool: return "bool";
    case ValueKind::kInt: return "int";
    case ValueKind::kFloat: return "float";
    case ValueKind::kString: return "str";
    case ValueKind::kArray: return v.as_array().is_tuple ? "tuple" : "list";
    case ValueKind::kObject: return "dict";
    case ValueKind::kNamespace: return "Namespace";
    case ValueKind::kFunction: return "function";
  }
  return "?";
}

std::string format_python_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<std::size_t>(res.ptr - buf));
  std::string sign;
  if (!sci.empty() && sci.front() == '-') {
    sign = "-";
    sci.remove_prefix(1);
  }
  const std::size_t e_at = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_at)) {
    if (c != '.') digits.push_back(c);
  }
  int exponent = 0;
  std::from_chars(sci.data() + e_at + 1 + (sci[e_at + 1] == '+' ? 1 : 0), sci.data() + sci.size(),
                  exponent);
  const int decpt = exponent + 1;  // value = 0.<digits> * 10^decpt
  const int n = static_cast<int>(digits.size());
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(static_cast<std::size_t>(decpt - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(decpt)) + "." +
             digits.substr(static_cast<std::size_t>(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_buf;
}

namespace {

void append_repr_string(std::string& out, const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out.push_back(quote);
  for (std::size_t i = 0; i < s.size();) {
    const char32_t cp = utf8::next(s, i);
    char buf[16];
    if (cp == static_cast<char32_t>(quote) || cp == U'\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp == 0x2028 || cp == 0x2029 || (cp >= 0x200B && cp <= 0x200F) || cp == 0xFEFF) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      utf8::append(out, cp);
    }
  }
  out.push_back(quote);
}

void append_repr(std::string& out, const Value& v);

void append_entries_repr(std::string& out, const std::vector<std::pair<std::string, Value>>& e) {
  out.push_back('{');
  for (std::size_t i = 0; i < e.size(); ++i) {
    if (i) out += ", ";
    append_repr_string(out, e[i].first);
    out += ": ";
    append_repr(out, e[i].second);
  }
  out.push_back('}');
}

void append_repr(std::string& out, const Value& v) {
  switch (v.kind()) {
    case ValueKind::kString: append_repr_string(out, v.as_string()); return;
    case ValueKind::kArray: {
      const ArrayData& a = v.as_array();
      out.push_back(a.is_tuple ? '(' : '[');
      for (std::size_t i = 0; i < a.items.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, a.items[i]);
      }
      if (a.is_tuple && a.items.size() == 1) out.push_back(',');
      out.push_back(a.is_tuple ? ')' : ']');
      return;
    }
    case ValueKind::kObject: append_entries_repr(out, v.as_object().entries); return;
    case ValueKind::kNamespace:
      out += "<Namespace ";
      append_entries_repr(out, v.as_namespace().entries);
      out += ">";
      return;
    case ValueKind::kUndefined:
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kFunction: out += to_display_string(v); return;
  }
}

}  // namespace

std::string to_display_string(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined: return "";
    case ValueKind::kNone: return "None";
    case ValueKind::kBool: return v.as_bool() ? "True" : "False";
    case ValueKind::kInt: return std::to_string(v.as_int());
    case ValueKind::kFloat: return format_python_float(v.as_float());
    case ValueKind::kString: return v.as_string();
    case ValueKind::kFunction: return "<function " + v.as_function().name + ">";
    case ValueKind::kArray:
    case ValueKind::kObject:
    case ValueKind::kNamespace: {
      std::string out;
      append_repr(out, v);
      return out;
    }
  }
  return "";
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_numeric() && b.is_numeric()) {
    if (!a.is_float() && !b.is_float()) {
      const std::int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
      const std::int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
      return x == y;
    }
    return a.to_double() == b.to_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone: return true;
    case ValueKind::kString: return a.as_string() == b.as_string();
    case ValueKind::kArray: {
      const ArrayData& x = a.as_array();
      const ArrayData& y = b.as_array();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (std::size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case ValueKind::kObject: {
      const ObjectData& x = a.as_object();
      const ObjectData& y = b.as_object();
      if (x.entries.size() != y.entries.size()) return false;
      return std::ranges::all_of(x.entries, [&](const auto& entry) {
        const Value* other = y.find(entry.first);
        return other != nullptr && values_equal(entry.second, *other);
      });
    }
    case ValueKind::kNamespace: return &a.as_namespace() == &b.as_namespace();
    case ValueKind::kFunction: return &a.as_function() == &b.as_function();
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat: return false;  // handled above
  }
  return false;
}

Result<bool> value_less(const Value& a, const Value& b) {
  if (a.is_numeric() && b.is_numeric()) {
    if (!a.is_float() && !b.is_float()) {
      const std::int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
      const std::int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
      return x < y;
    }
    return a.to_double() < b.to_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_array() && b.is_array() && a.as_array().is_tuple == b.as_array().is_tuple) {
    const auto& x = a.as_array().items;
    const auto& y = b.as_array().items;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) {
    return invalid_argument("{}", a.is_undefined() ? a.undefined_hint() : b.undefined_hint());
  }
  return invalid_argument("'<' is not supported between instances of '{}' and '{}'", type_name(a),
                          type_name(b));
}

bool contains_namespace(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kNamespace: return true;
    case ValueKind::kArray:
      return std::any_of(v.as_array().items.begin(), v.as_array().items.end(), contains_namespace);
    case ValueKind::kObject:
      return std::any_of(v.as_object().entries.begin(), v.as_object().entries.end(),
                         [](const auto& e) { return contains_namespace(e.second); });
    default: return false;
  }
}

}  // namespace cellm::chat
