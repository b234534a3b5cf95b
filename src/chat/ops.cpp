// Operators and attribute/item lookup with Python/Jinja semantics.
#include <cmath>
#include <limits>

#include "chat/builtins.h"
#include "chat/renderer.h"
#include "chat/utf8.h"

namespace cellm::chat {
namespace {

Status unsupported_operands(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) return invalid_argument("{}", a.undefined_hint());
  if (b.is_undefined()) return invalid_argument("{}", b.undefined_hint());
  return invalid_argument("unsupported operand types for {}: '{}' and '{}'", op, type_name(a),
                          type_name(b));
}

std::int64_t as_integer(const Value& v) {
  return v.is_bool() ? v.as_bool() : v.as_int();
}

Status overflow() {
  return invalid_argument("integer overflow (template integers are 64-bit)");
}

Result<Value> repeat(Renderer& r, const Value& seq, std::int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty())
      CELLM_RETURN_IF_ERROR(
          r.check_size(s.size() * static_cast<std::size_t>(std::min<std::int64_t>(
                                      times, std::numeric_limits<std::int32_t>::max()))));
    std::string out;
    for (std::int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_array().items;
  if (!items.empty())
    CELLM_RETURN_IF_ERROR(
        r.check_size(items.size() * static_cast<std::size_t>(std::min<std::int64_t>(
                                        times, std::numeric_limits<std::int32_t>::max()))));
  std::vector<Value> out;
  for (std::int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::array(std::move(out), seq.as_array().is_tuple);
}

bool is_sequence(const Value& v) {
  return v.is_string() || v.is_array();
}

Result<Value> arithmetic(Renderer& r, std::string_view op, const Value& a, const Value& b) {
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      CELLM_RETURN_IF_ERROR(r.check_size(a.as_string().size() + b.as_string().size()));
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_array() && b.is_array() && a.as_array().is_tuple == b.as_array().is_tuple) {
      std::vector<Value> items = a.as_array().items;
      items.insert(items.end(), b.as_array().items.begin(), b.as_array().items.end());
      CELLM_RETURN_IF_ERROR(r.check_size(items.size()));
      return Value::array(std::move(items), a.as_array().is_tuple);
    }
  }
  if (op == "*") {
    if (is_sequence(a) && (b.is_int() || b.is_bool())) return repeat(r, a, as_integer(b));
    if (is_sequence(b) && (a.is_int() || a.is_bool())) return repeat(r, b, as_integer(a));
  }
  if (op == "%" && a.is_string()) {
    return not_supported("printf-style '%' string formatting is not supported; use ~ or format()");
  }
  if (!a.is_numeric() || !b.is_numeric()) return unsupported_operands(op, a, b);
  if (!a.is_float() && !b.is_float()) {
    const std::int64_t x = as_integer(a);
    const std::int64_t y = as_integer(b);
    std::int64_t out = 0;
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &out)) return overflow();
      return Value::integer(out);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &out)) return overflow();
      return Value::integer(out);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &out)) return overflow();
      return Value::integer(out);
    }
    if (op == "//" || op == "%") {
      if (y == 0) return invalid_argument("integer division or modulo by zero");
      if (x == std::numeric_limits<std::int64_t>::min() && y == -1) return overflow();
      std::int64_t q = x / y;
      std::int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (op == "**") {
      if (y < 0) {
        if (x == 0) return invalid_argument("0 cannot be raised to a negative power");
        return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      std::int64_t result = 1;
      std::int64_t base = x;
      std::int64_t e = y;
      while (e > 0) {
        if (e & 1) {
          if (__builtin_mul_overflow(result, base, &result)) return overflow();
        }
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
      }
      return Value::integer(result);
    }
  }
  const double x = a.to_double();
  const double y = b.to_double();
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0.0) return invalid_argument("division by zero");
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0.0) return invalid_argument("float floor division or modulo by zero");
    double m = std::fmod(x, y);
    double q = (x - m) / y;
    if (m != 0.0 && ((m < 0) != (y < 0))) {
      m += y;
      q -= 1.0;
    }
    if (op == "%") return Value::number(m == 0.0 ? std::copysign(0.0, y) : m);
    if (q == 0.0) return Value::number(std::copysign(0.0, x / y));
    double fq = std::floor(q);
    if (q - fq > 0.5) fq += 1.0;  // as CPython's float_floor_div
    return Value::number(fq);
  }
  if (op == "**") {
    if (x == 0.0 && y < 0.0) return invalid_argument("0.0 cannot be raised to a negative power");
    return Value::number(std::pow(x, y));
  }
  return internal_error("unknown operator '{}'", op);
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kString:
      if (!item.is_string()) {
        return invalid_argument("'in <string>' requires a string on the left, not '{}'",
                                type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case ValueKind::kArray:
      for (const Value& v : container.as_array().items) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case ValueKind::kObject:
      return item.is_string() && container.as_object().find(item.as_string()) != nullptr;
    case ValueKind::kUndefined: return false;  // Jinja's Undefined iterates as empty
    case ValueKind::kNamespace:
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kFunction: break;
  }
  return invalid_argument("argument of type '{}' is not iterable", type_name(container));
}

std::string jinja_type_name(const Value& v) {
  if (v.is_none()) return "None";
  return std::string(type_name(v)) + " object";
}

}  // namespace

Result<Value> binary_op(Renderer& r, std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_display_string(a);
    const std::string t = to_display_string(b);
    CELLM_RETURN_IF_ERROR(r.check_size(s.size() + t.size()));
    return Value::string(s + t);
  }
  return arithmetic(r, op, a, b);
}

Result<bool> compare_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "<") return value_less(a, b);
  if (op == ">") return value_less(b, a);
  if (op == "<=") {
    if (values_equal(a, b) && (a.is_numeric() || a.is_string() || a.is_array())) return true;
    return value_less(a, b);
  }
  if (op == ">=") {
    if (values_equal(a, b) && (a.is_numeric() || a.is_string() || a.is_array())) return true;
    return value_less(b, a);
  }
  if (op == "in") return contains(b, a);
  if (op == "not in") {
    CELLM_ASSIGN_OR_RETURN(bool in, contains(b, a));
    return !in;
  }
  return internal_error("unknown comparison '{}'", op);
}

Result<Value> get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case ValueKind::kUndefined: return invalid_argument("{}", obj.undefined_hint());
    case ValueKind::kObject: {
      if (auto m = find_method(obj, name)) return *m;
      if (const Value* v = obj.as_object().find(name)) return *v;
      break;
    }
    case ValueKind::kNamespace:
      if (const Value* v = obj.as_namespace().find(name)) return *v;
      break;
    case ValueKind::kString:
    case ValueKind::kArray:
      if (auto m = find_method(obj, name)) return *m;
      break;
    case ValueKind::kNone:
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
    case ValueKind::kFunction: break;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", jinja_type_name(obj), name));
}

Result<Value> get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return invalid_argument("{}", obj.undefined_hint());
  if (obj.is_object() && key.is_string()) {
    if (const Value* v = obj.as_object().find(key.as_string())) return *v;
  }
  if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = as_integer(key);
    if (obj.is_array()) {
      const auto n = static_cast<std::int64_t>(obj.as_array().items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return obj.as_array().items[static_cast<std::size_t>(i)];
    } else {
      const std::string& s = obj.as_string();
      const auto bounds = utf8::boundaries(s);
      const auto n = static_cast<std::int64_t>(bounds.size() - 1);
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        const auto u = static_cast<std::size_t>(i);
        return Value::string(s.substr(bounds[u], bounds[u + 1] - bounds[u]));
      }
    }
    return Value::undefined(fmt::format("'{}' has no element {}", jinja_type_name(obj), i));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(fmt::format("'{}' has no item {}", jinja_type_name(obj), to_repr(key)));
}

}  // namespace cellm::chat
