#include "grammar/json_schema.h"

#include <functional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "grammar/json_schema_impl.h"

namespace cellm::grammar {
namespace {

// Keywords that describe a schema without constraining values.
const std::set<std::string>& annotations() {
  static const std::set<std::string> s = {
      "title",      "description", "default",   "examples", "$schema",     "$id",   "$comment",
      "deprecated", "readOnly",    "writeOnly", "$defs",    "definitions", "strict"};
  return s;
}

// Keywords this compiler enforces.
const std::set<std::string>& supported() {
  static const std::set<std::string> s = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "$ref",
                                          "minLength",
                                          "maxLength",
                                          "format",
                                          "nullable",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum"};
  return s;
}

// Nodes a schema may create before epsilon removal.
constexpr std::size_t kMaxBuilderNodes = 200000;

}  // namespace

Result<const json*> JsonGrammarBuilder::Impl::resolve(const json& root, const std::string& ref,
                                                      const std::string& path) {
  if (ref == "#") return &root;
  for (std::string_view prefix : {"#/$defs/", "#/definitions/"}) {
    if (ref.starts_with(prefix)) {
      const std::string container(prefix.substr(2, prefix.size() - 3));
      const std::string name = ref.substr(prefix.size());
      auto defs = root.find(container);
      if (defs != root.end() && defs->is_object()) {
        auto it = defs->find(name);
        if (it != defs->end()) return &*it;
      }
      return invalid_argument("'$ref' \"{}\" at {} names no definition in the schema's {}", ref,
                              path, container);
    }
  }
  return invalid_argument(
      "unsupported JSON Schema keyword '$ref' value \"{}\" at {}: only \"#\", \"#/$defs/NAME\" "
      "and \"#/definitions/NAME\" are supported",
      ref, path);
}

Result<std::int64_t> JsonGrammarBuilder::Impl::bound(const json& schema, const char* key,
                                                     const std::string& path) {
  auto it = schema.find(key);
  if (it == schema.end()) return std::int64_t{-1};
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0) {
    return invalid_argument("'{}' at {} must be a non-negative integer", key, path);
  }
  if (it->get<std::int64_t>() > kMaxUnrolledBound) {
    return invalid_argument("'{}' at {} is {}; at most {} is supported", key, path,
                            it->get<std::int64_t>(), kMaxUnrolledBound);
  }
  return it->get<std::int64_t>();
}

Status JsonGrammarBuilder::Impl::value(const json& root, const json& schema, NodeId from, NodeId to,
                                       const std::string& path, int depth) {
  if (depth > kMaxSchemaDepth) {
    return invalid_argument("the schema nests deeper than {} levels at {}", kMaxSchemaDepth, path);
  }
  // Bounds multiply (maxItems of maxItems ...): stop before memory does.
  if (b_.node_count() > kMaxBuilderNodes) {
    return invalid_argument(
        "the schema is too large to compile (at {}): it unrolls past {} automaton nodes; lower "
        "minItems/maxItems/maxLength or nest less",
        path, kMaxBuilderNodes);
  }
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) {
      return invalid_argument("the schema at {} is false: no value matches it", path);
    }
    b_.call(from, value_rule(), to);
    return Status::ok();
  }
  if (!schema.is_object()) {
    return invalid_argument("the schema at {} must be an object or a boolean", path);
  }
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    if (!supported().contains(it.key()) && !annotations().contains(it.key())) {
      return invalid_argument(
          "unsupported JSON Schema keyword '{}' at {}: cellm's structured outputs support type, "
          "properties, required, additionalProperties, items, prefixItems, minItems, maxItems, "
          "enum, const, anyOf, oneOf, $ref, minLength, maxLength, format, nullable and integer "
          "minimum/maximum/exclusiveMinimum/exclusiveMaximum",
          it.key(), path);
    }
  }
  if (auto ref = schema.find("$ref"); ref != schema.end()) {
    if (!ref->is_string()) return invalid_argument("'$ref' at {} must be a string", path);
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it.key() != "$ref" && supported().contains(it.key())) {
        return invalid_argument(
            "unsupported JSON Schema keyword '{}' beside '$ref' at {}: move it into the "
            "definition",
            it.key(), path);
      }
    }
    const std::string target = ref->get<std::string>();
    CELLM_ASSIGN_OR_RETURN(const json* def, resolve(root, target, path));
    const auto key = std::make_pair(&root, target);
    auto found = refs_.find(key);
    if (found == refs_.end()) {
      const RuleId r = b_.add_rule(target);
      found = refs_.emplace(key, r).first;
      const NodeId end = b_.node(r);
      b_.set_final(end);
      CELLM_RETURN_IF_ERROR(value(root, *def, b_.start(r), end, target, depth + 1));
    }
    b_.call(from, found->second, to);
    return Status::ok();
  }
  bool nullable = false;
  if (auto n = schema.find("nullable"); n != schema.end()) {
    if (!n->is_boolean()) {
      return invalid_argument("'nullable' at {} must be true or false, not {}", path, n->dump());
    }
    nullable = n->get<bool>();
  }
  if (nullable) b_.literal(from, "null", to);
  if (auto c = schema.find("const"); c != schema.end()) {
    b_.literal(from, c->dump(), to);
    return Status::ok();
  }
  if (auto e = schema.find("enum"); e != schema.end()) {
    if (!e->is_array() || e->empty()) {
      return invalid_argument("'enum' at {} must be a non-empty list", path);
    }
    for (const json& v : *e) b_.literal(from, v.dump(), to);
    return Status::ok();
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto alts = schema.find(key);
    if (alts == schema.end()) continue;
    if (!alts->is_array() || alts->empty()) {
      return invalid_argument("'{}' at {} must be a non-empty list of schemas", key, path);
    }
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it.key() != key && it.key() != "nullable" && supported().contains(it.key())) {
        return invalid_argument(
            "unsupported JSON Schema keyword '{}' beside '{}' at {}: move it into each branch",
            it.key(), key, path);
      }
    }
    for (std::size_t i = 0; i < alts->size(); ++i) {
      CELLM_RETURN_IF_ERROR(
          value(root, (*alts)[i], from, to, fmt::format("{}/{}/{}", path, key, i), depth + 1));
    }
    return Status::ok();
  }
  std::vector<std::string> types;
  if (auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) {
      types.push_back(t->get<std::string>());
    } else if (t->is_array() && !t->empty()) {
      for (const json& x : *t) {
        if (!x.is_string()) {
          return invalid_argument("'type' at {} must be a string or a list of strings", path);
        }
        types.push_back(x.get<std::string>());
      }
    } else {
      return invalid_argument("'type' at {} must be a string or a list of strings", path);
    }
  } else if (schema.contains("properties") || schema.contains("additionalProperties") ||
             schema.contains("required")) {
    types.push_back("object");
  } else if (schema.contains("items") || schema.contains("prefixItems")) {
    types.push_back("array");
  } else {
    b_.call(from, value_rule(), to);  // unconstrained
    return Status::ok();
  }
  for (const std::string& type : types) {
    CELLM_RETURN_IF_ERROR(typed(root, schema, type, from, to, path, depth));
  }
  return Status::ok();
}

Status JsonGrammarBuilder::Impl::typed(const json& root, const json& schema,
                                       const std::string& type, NodeId from, NodeId to,
                                       const std::string& path, int depth) {
  if (type == "object") return object(root, schema, from, to, path, depth);
  if (type == "array") return array(root, schema, from, to, path, depth);
  if (type == "string") {
    if (auto f = schema.find("format"); f != schema.end()) {
      if (!f->is_string()) return invalid_argument("'format' at {} must be a string", path);
      if (schema.contains("minLength") || schema.contains("maxLength")) {
        return invalid_argument(
            "unsupported JSON Schema keyword 'minLength'/'maxLength' beside 'format' at {}", path);
      }
      return formatted_string(from, to, f->get<std::string>(), path);
    }
    CELLM_ASSIGN_OR_RETURN(const std::int64_t min, bound(schema, "minLength", path));
    CELLM_ASSIGN_OR_RETURN(const std::int64_t max, bound(schema, "maxLength", path));
    if (min <= 0 && max < 0) {
      any_string(from, to);
      return Status::ok();
    }
    return bounded_string(from, to, std::max<std::int64_t>(min, 0), max, path);
  }
  if (type == "integer") return bounded_integer(schema, from, to, path);
  if (type == "number") {
    for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      if (schema.contains(key)) {
        return invalid_argument(
            "unsupported JSON Schema keyword '{}' at {}: numeric bounds are supported on "
            "\"type\": \"integer\" only",
            key, path);
      }
    }
    number(from, to, false);
    return Status::ok();
  }
  if (type == "boolean") {
    b_.literal(from, "true", to);
    b_.literal(from, "false", to);
    return Status::ok();
  }
  if (type == "null") {
    b_.literal(from, "null", to);
    return Status::ok();
  }
  return invalid_argument(
      "unsupported JSON Schema keyword 'type' value \"{}\" at {}: use object, array, string, "
      "number, integer, boolean or null",
      type, path);
}

JsonGrammarBuilder::JsonGrammarBuilder(GrammarBuilder& builder, const JsonGrammarOptions& options)
    : impl_(std::make_unique<Impl>(builder, options)) {}
JsonGrammarBuilder::~JsonGrammarBuilder() = default;

Status JsonGrammarBuilder::value(const json& schema, NodeId from, NodeId to) {
  return impl_->value(schema, schema, from, to, "#", 0);
}
void JsonGrammarBuilder::any_object(NodeId from, NodeId to) {
  impl_->any_object(from, to);
}
void JsonGrammarBuilder::whitespace(NodeId from, NodeId to) {
  impl_->ws(from, to);
}

namespace {

Result<std::shared_ptr<const Grammar>> compile_root(
    const JsonGrammarOptions& options,
    const std::function<Status(JsonGrammarBuilder&, NodeId, NodeId)>& body) {
  if (options.max_whitespace < 0 || options.max_whitespace > 64) {
    return invalid_argument("max_whitespace {} must lie in [0, 64]", options.max_whitespace);
  }
  GrammarBuilder b;
  const RuleId root = b.add_rule("root");
  JsonGrammarBuilder json_b(b, options);
  const NodeId lead = b.node(root), end = b.node(root);
  b.set_final(end);
  json_b.whitespace(b.start(root), lead);
  CELLM_RETURN_IF_ERROR(body(json_b, lead, end));
  return b.build(root);
}

}  // namespace

Result<std::shared_ptr<const Grammar>> compile_json_object(const JsonGrammarOptions& options) {
  return compile_root(options, [](JsonGrammarBuilder& j, NodeId from, NodeId to) {
    j.any_object(from, to);
    return Status::ok();
  });
}

Result<std::shared_ptr<const Grammar>> compile_json_schema(const json& schema,
                                                           const JsonGrammarOptions& options) {
  return compile_root(options, [&](JsonGrammarBuilder& j, NodeId from, NodeId to) {
    return j.value(schema, from, to);
  });
}

}  // namespace cellm::grammar
