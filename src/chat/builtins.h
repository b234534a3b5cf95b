// Builtin filters, tests, globals and methods of the template language, and
// the argument binding they share. Filters and tests are looked up by name at
// parse time so an unknown one is a parse error, not a render surprise.
//
// Thread-safety: the tables are immutable; the functions are pure except for
// the Renderer they are handed.
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "chat/value.h"

namespace cellm::chat {

using FilterFn = Result<Value> (*)(Renderer& renderer, const Value& input, CallArgs& args);
using TestFn = Result<bool> (*)(Renderer& renderer, const Value& input, CallArgs& args);

// nullptr when `name` is not a filter/test this interpreter implements.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// Jinja builtins that exist but are not implemented here (for a clearer error).
bool is_known_jinja_filter(std::string_view name);
bool is_known_jinja_test(std::string_view name);

// Global functions: range, namespace, dict, raise_exception, strftime_now, ...
std::optional<Value> find_global(std::string_view name);

// obj.name for strings, lists and dicts: a bound method, or nullopt when the
// type has no such method. Mutating methods (append, update, ...) come back
// as an undefined that refuses to be called, as Jinja's immutable sandbox does.
std::optional<Value> find_method(const Value& self, std::string_view name);

// Binds call arguments to named parameters, Python style.
struct Param {
  std::string_view name;
  std::optional<Value> default_value;  // nullopt: required
};
Result<std::vector<Value>> bind_args(std::string_view callee, CallArgs& args,
                                     std::initializer_list<Param> params);

// Applies a filter/test by name (for map, select and friends).
Result<Value> apply_filter(Renderer& renderer, std::string_view name, const Value& input,
                           CallArgs& args);
Result<bool> apply_test(Renderer& renderer, std::string_view name, const Value& input,
                        CallArgs& args);

// Python slice semantics over `n` elements: the selected indices.
Result<std::vector<std::int64_t>> slice_indices(std::int64_t n, const Value& start,
                                                const Value& stop, const Value& step);

// Items of an iterable value (list/tuple items, dict keys, string code points,
// nothing for undefined); an error for other types.
Result<std::vector<Value>> iterate(const Value& v);

}  // namespace cellm::chat
