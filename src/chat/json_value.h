// Conversions between JSON (nlohmann) and template values, and the `tojson`
// writer, which reproduces Python's json.dumps as transformers calls it
// (ensure_ascii=False, separators ", " / ": ", or "," with an indent).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/utf8.h"
#include "chat/value.h"

namespace cellm::chat {

struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// json.dumps(v): undefined, namespaces and callables are not serializable.
Result<std::string> dump_json(const Value& v, const JsonDumpOptions& options);

// JSON → value, keeping the object key order the json type iterates in
// (insertion order for nlohmann::ordered_json, sorted for nlohmann::json).
// `path` names the value in errors ("messages[2].content").
template <typename Json>
Result<Value> value_from_json(const Json& j, const std::string& path, int depth = 0) {
  if (depth > kMaxValueDepth) {
    return invalid_argument("{} nests deeper than {} levels", path, kMaxValueDepth);
  }
  switch (j.type()) {
    case nlohmann::detail::value_t::null: return Value::none();
    case nlohmann::detail::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::detail::value_t::number_integer:
      return Value::integer(j.template get<std::int64_t>());
    case nlohmann::detail::value_t::number_unsigned: {
      const auto u = j.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return invalid_argument("{}: integer {} is out of range (at most 2^63-1)", path, u);
      }
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::detail::value_t::number_float: return Value::number(j.template get<double>());
    case nlohmann::detail::value_t::string: {
      const auto& s = j.template get_ref<const std::string&>();
      if (auto bad = utf8::find_invalid(s)) {
        return invalid_argument("{}: string is not valid UTF-8 (byte {})", path, *bad);
      }
      return Value::string(s);
    }
    case nlohmann::detail::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      std::size_t i = 0;
      for (const auto& e : j) {
        CELLM_ASSIGN_OR_RETURN(
            Value v, value_from_json(e, path + "[" + std::to_string(i++) + "]", depth + 1));
        items.push_back(std::move(v));
      }
      return Value::array(std::move(items));
    }
    case nlohmann::detail::value_t::object: {
      std::vector<std::pair<std::string, Value>> entries;
      entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (auto bad = utf8::find_invalid(it.key())) {
          return invalid_argument("{}: key is not valid UTF-8 (byte {})", path, *bad);
        }
        CELLM_ASSIGN_OR_RETURN(Value v,
                               value_from_json(it.value(), path + "." + it.key(), depth + 1));
        entries.emplace_back(it.key(), std::move(v));
      }
      return Value::object(std::move(entries));
    }
    case nlohmann::detail::value_t::binary:
    case nlohmann::detail::value_t::discarded: break;
  }
  return invalid_argument("{}: binary or discarded JSON values cannot enter a template", path);
}

}  // namespace cellm::chat
