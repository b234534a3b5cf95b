// The values a chat template computes with: Jinja's view of Python objects,
// reduced to what JSON inputs and template literals can produce (undefined,
// None, bool, int, float, str, list/tuple, dict) plus namespaces and callables.
//
// Thread-safety: values are immutable once built (namespaces excepted, which
// only the render that created them can reach); copies share storage.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "cellm/status.h"

namespace cellm::chat {

class Value;
class Renderer;

// Containers deeper than this are refused, so that printing, comparing and
// destroying a value never recurses without bound.
inline constexpr int kMaxValueDepth = 256;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A callable: a builtin, a bound method or a macro. `renderer` is the render
// in progress (macros and higher-order filters need it).
using NativeFunction = std::function<Result<Value>(Renderer& renderer, CallArgs& args)>;

enum class ValueKind : std::uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kArray,
  kObject,
  kNamespace,
  kFunction,
};

struct ArrayData;
struct ObjectData;
struct NamespaceData;
struct FunctionData;

// Undefined remembers why it is undefined ("'x' is undefined") so that the
// error raised when it is used says what was missing.
struct UndefinedData {
  std::string hint;
};

class Value {
 public:
  Value() : data_(UndefinedData{}) {}
  static Value undefined(std::string hint) { return Value(Tag{}, UndefinedData{std::move(hint)}); }
  static Value none() { return Value(Tag{}, std::monostate{}); }
  static Value boolean(bool b) { return Value(Tag{}, b); }
  static Value integer(std::int64_t i) { return Value(Tag{}, i); }
  static Value number(double d) { return Value(Tag{}, d); }
  static Value string(std::string s) { return Value(Tag{}, std::move(s)); }
  static Value array(std::vector<Value> items, bool is_tuple = false);
  static Value object(std::vector<std::pair<std::string, Value>> entries);
  static Value make_namespace(std::vector<std::pair<std::string, Value>> entries);
  static Value function(std::string name, NativeFunction fn);

  ValueKind kind() const { return static_cast<ValueKind>(data_.index()); }
  bool is_undefined() const { return kind() == ValueKind::kUndefined; }
  bool is_none() const { return kind() == ValueKind::kNone; }
  bool is_bool() const { return kind() == ValueKind::kBool; }
  bool is_int() const { return kind() == ValueKind::kInt; }
  bool is_float() const { return kind() == ValueKind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_numeric() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == ValueKind::kString; }
  bool is_array() const { return kind() == ValueKind::kArray; }
  bool is_object() const { return kind() == ValueKind::kObject; }
  bool is_namespace() const { return kind() == ValueKind::kNamespace; }
  bool is_function() const { return kind() == ValueKind::kFunction; }

  bool as_bool() const { return std::get<bool>(data_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // A numeric value as double (bool and int widen).
  double to_double() const;
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const ArrayData& as_array() const { return *std::get<std::shared_ptr<const ArrayData>>(data_); }
  const ObjectData& as_object() const {
    return *std::get<std::shared_ptr<const ObjectData>>(data_);
  }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(data_); }
  const FunctionData& as_function() const {
    return *std::get<std::shared_ptr<const FunctionData>>(data_);
  }
  const std::string& undefined_hint() const { return std::get<UndefinedData>(data_).hint; }

  // Nesting depth of containers (0 for scalars); bounded by kMaxValueDepth.
  int depth() const;

 private:
  struct Tag {};
  template <typename T>
  Value(Tag /*unused*/, T&& v) : data_(std::forward<T>(v)) {}

  std::variant<UndefinedData, std::monostate, bool, std::int64_t, double, std::string,
               std::shared_ptr<const ArrayData>, std::shared_ptr<const ObjectData>,
               std::shared_ptr<NamespaceData>, std::shared_ptr<const FunctionData>>
      data_;
};

struct ArrayData {
  std::vector<Value> items;
  bool is_tuple = false;
  int depth = 1;
};

struct ObjectData {
  std::vector<std::pair<std::string, Value>> entries;  // insertion order, as Python dicts
  int depth = 1;
  const Value* find(std::string_view key) const;
};

struct NamespaceData {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

struct FunctionData {
  std::string name;
  NativeFunction fn;
};

// Python truthiness.
bool truthy(const Value& v);
// Python's name of the value's type, for messages: 'str', 'int', 'dict', ...
std::string_view type_name(const Value& v);
// str(v) as Python prints it ({{ v }}); undefined prints as "".
std::string to_display_string(const Value& v);
// repr(v) as Python writes it inside containers: 'text', None, True, [1, 'a'].
std::string to_repr(const Value& v);
// Python float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16".
std::string format_python_float(double d);
// Python ==, with 1 == 1.0 == True.
bool values_equal(const Value& a, const Value& b);
// Python <: numbers, strings (by code point) and sequences; other pairs are an error.
Result<bool> value_less(const Value& a, const Value& b);
// True when a namespace is reachable from `v` (namespaces may not nest: no cycles).
bool contains_namespace(const Value& v);

}  // namespace cellm::chat
