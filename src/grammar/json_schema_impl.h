// The JSON-schema compiler's internals (json_schema.h), shared by its
// files: json_schema.cpp (dispatch over keywords, $ref, the public entry
// points), json_schema_containers.cpp (objects, arrays, the any-value rules)
// and json_schema_scalars.cpp (strings, formats, numbers, whitespace).
// Each member emits the automaton of one construct between two nodes of the
// rule being built.
//
// Thread-safety: an Impl belongs to one JsonGrammarBuilder (one thread).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "grammar/json_schema.h"

namespace cellm::grammar {

using json = nlohmann::ordered_json;

inline std::string child_path(const std::string& path, std::string_view key) {
  return path + "/" + std::string(key);
}

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
  // Integers in [lo, hi] (at most 16 digits either way), written without
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

}  // namespace cellm::grammar
