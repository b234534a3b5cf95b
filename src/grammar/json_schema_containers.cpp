// Containers of the JSON-schema grammar: declared-property objects, maps,
// arrays with bounds and prefix items, and the recursive any-value rules
// (json_object mode, schemas without a type).
#include <array>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "grammar/json_schema_impl.h"

namespace cellm::grammar {

RuleId JsonGrammarBuilder::Impl::value_rule() {
  if (value_) return *value_;
  value_ = b_.add_rule("value");
  const NodeId s = b_.start(*value_), e = b_.node(*value_);
  b_.set_final(e);
  any_string(s, e);
  number(s, e, false);
  for (std::string_view lit : {"true", "false", "null"}) b_.literal(s, lit, e);
  b_.call(s, object_rule(), e);
  b_.call(s, array_rule(), e);
  return *value_;
}

RuleId JsonGrammarBuilder::Impl::object_rule() {
  if (object_) return *object_;
  object_ = b_.add_rule("object");
  const RuleId r = *object_;
  const NodeId s = b_.start(r), open = b_.node(r), empty = b_.node(r), kv = b_.node(r),
               key = b_.node(r), colon = b_.node(r), val = b_.node(r), after = b_.node(r),
               next = b_.node(r), comma = b_.node(r), end = b_.node(r);
  b_.set_final(end);
  b_.byte(s, '{', open);
  ws(open, empty);
  b_.byte(empty, '}', end);
  b_.epsilon(empty, kv);
  any_string(kv, key);
  const NodeId key_ws = b_.node(r);
  ws(key, key_ws);
  b_.byte(key_ws, ':', colon);
  ws(colon, val);
  const NodeId val_end = b_.node(r);
  b_.call(val, value_rule(), val_end);
  ws(val_end, after);
  b_.byte(after, ',', comma);
  ws(comma, next);
  b_.epsilon(next, kv);
  b_.byte(after, '}', end);
  return r;
}

RuleId JsonGrammarBuilder::Impl::array_rule() {
  if (array_) return *array_;
  array_ = b_.add_rule("array");
  const RuleId r = *array_;
  const NodeId s = b_.start(r), open = b_.node(r), empty = b_.node(r), item = b_.node(r),
               item_end = b_.node(r), after = b_.node(r), comma = b_.node(r), end = b_.node(r);
  b_.set_final(end);
  b_.byte(s, '[', open);
  ws(open, empty);
  b_.byte(empty, ']', end);
  b_.epsilon(empty, item);
  b_.call(item, value_rule(), item_end);
  ws(item_end, after);
  b_.byte(after, ',', comma);
  ws(comma, item);
  b_.byte(after, ']', end);
  return r;
}

Status JsonGrammarBuilder::Impl::object(const json& root, const json& schema, NodeId from,
                                        NodeId to, const std::string& path, int depth) {
  const json empty = json::object();
  const json* props = &empty;
  if (auto p = schema.find("properties"); p != schema.end()) {
    if (!p->is_object()) return invalid_argument("'properties' at {} must be an object", path);
    props = &*p;
  }
  std::set<std::string> required;
  if (auto r = schema.find("required"); r != schema.end()) {
    if (!r->is_array()) return invalid_argument("'required' at {} must be a list of names", path);
    for (const json& name : *r) {
      if (!name.is_string()) {
        return invalid_argument("'required' at {} must be a list of names", path);
      }
      if (!props->contains(name.get<std::string>())) {
        return invalid_argument(
            "'required' at {} names \"{}\", which is not in 'properties' (cellm generates only "
            "declared properties)",
            path, name.get<std::string>());
      }
      required.insert(name.get<std::string>());
    }
  }
  const json* extra = nullptr;  // the schema of undeclared properties, if generated
  if (auto a = schema.find("additionalProperties"); a != schema.end()) {
    if (!a->is_boolean() && !a->is_object()) {
      return invalid_argument("'additionalProperties' at {} must be a boolean or a schema", path);
    }
    if (props->empty() && !(a->is_boolean() && !a->get<bool>())) extra = &*a;
  } else if (props->empty()) {
    // Nothing declared, nothing forbidden: any object.
    any_object(from, to);
    return Status::ok();
  }
  const NodeId open = node_near(from);
  b_.byte(from, '{', open);
  if (extra != nullptr) {
    // A map: "key": value pairs of the additionalProperties schema.
    const NodeId first = node_near(from), kv = node_near(from), key = node_near(from),
                 key_ws = node_near(from), colon = node_near(from), val = node_near(from),
                 val_end = node_near(from), after = node_near(from), comma = node_near(from);
    ws(open, first);
    b_.byte(first, '}', to);
    b_.epsilon(first, kv);
    any_string(kv, key);
    ws(key, key_ws);
    b_.byte(key_ws, ':', colon);
    ws(colon, val);
    CELLM_RETURN_IF_ERROR(
        value(root, *extra, val, val_end, child_path(path, "additionalProperties"), depth + 1));
    ws(val_end, after);
    b_.byte(after, ',', comma);
    ws(comma, kv);
    b_.byte(after, '}', to);
    return Status::ok();
  }
  // Declared properties in order; pos[i][e]: before property i, e = whether
  // one was written (then a comma comes first). Each value is emitted once.
  const std::size_t k = props->size();
  std::vector<std::array<NodeId, 2>> pos(k + 1);
  for (auto& p : pos) p = {node_near(from), node_near(from)};
  ws(open, pos[0][0]);
  std::size_t i = 0;
  for (auto it = props->begin(); it != props->end(); ++it, ++i) {
    const NodeId key = node_near(from), comma = node_near(from), key_end = node_near(from),
                 key_ws = node_near(from), colon = node_near(from), val = node_near(from),
                 val_end = node_near(from);
    b_.epsilon(pos[i][0], key);
    b_.byte(pos[i][1], ',', comma);
    ws(comma, key);
    b_.literal(key, json(it.key()).dump(), key_end);
    ws(key_end, key_ws);
    b_.byte(key_ws, ':', colon);
    ws(colon, val);
    CELLM_RETURN_IF_ERROR(value(root, it.value(), val, val_end,
                                child_path(child_path(path, "properties"), it.key()), depth + 1));
    ws(val_end, pos[i + 1][1]);
    if (!required.contains(it.key())) {
      b_.epsilon(pos[i][0], pos[i + 1][0]);
      b_.epsilon(pos[i][1], pos[i + 1][1]);
    }
  }
  b_.byte(pos[k][0], '}', to);
  b_.byte(pos[k][1], '}', to);
  return Status::ok();
}

Status JsonGrammarBuilder::Impl::array(const json& root, const json& schema, NodeId from, NodeId to,
                                       const std::string& path, int depth) {
  CELLM_ASSIGN_OR_RETURN(std::int64_t min, bound(schema, "minItems", path));
  CELLM_ASSIGN_OR_RETURN(std::int64_t max, bound(schema, "maxItems", path));
  min = std::max<std::int64_t>(min, 0);
  if (max >= 0 && max < min) {
    return invalid_argument("'maxItems' {} is below 'minItems' {} at {}", max, min, path);
  }
  const json any = json::object();
  std::vector<const json*> prefix;
  if (auto p = schema.find("prefixItems"); p != schema.end()) {
    if (!p->is_array()) return invalid_argument("'prefixItems' at {} must be a list", path);
    for (const json& s : *p) prefix.push_back(&s);
  }
  const json* items = &any;
  if (auto it = schema.find("items"); it != schema.end()) {
    if (it->is_boolean() && !it->get<bool>()) {
      items = nullptr;  // nothing past the prefix
      if (max < 0 || max > static_cast<std::int64_t>(prefix.size())) {
        max = static_cast<std::int64_t>(prefix.size());
      }
    } else if (it->is_object() || it->is_boolean()) {
      items = &*it;
    } else {
      return invalid_argument("'items' at {} must be a schema", path);
    }
  }
  if (max >= 0 && min > max) {
    return invalid_argument("'minItems' {} at {} cannot be met with 'items' false", min, path);
  }
  const std::int64_t unrolled =
      max >= 0 ? max : std::max<std::int64_t>(min, static_cast<std::int64_t>(prefix.size()));
  const NodeId open = node_near(from);
  b_.byte(from, '[', open);
  std::vector<NodeId> slot;  // slot[i]: i items written, whitespace after taken
  for (std::int64_t i = 0; i <= unrolled; ++i) slot.push_back(node_near(from));
  ws(open, slot[0]);
  auto schema_of = [&](std::int64_t i) {
    return static_cast<std::size_t>(i) < prefix.size() ? prefix[static_cast<std::size_t>(i)]
                                                       : items;
  };
  // Item i from `at` (after its comma when i > 0) to slot[i + 1].
  auto item = [&](std::int64_t i, NodeId at, NodeId done) -> Status {
    const NodeId val_end = node_near(from);
    CELLM_RETURN_IF_ERROR(
        value(root, *schema_of(i), at, val_end, fmt::format("{}/items/{}", path, i), depth + 1));
    ws(val_end, done);
    return Status::ok();
  };
  for (std::int64_t i = 0; i < unrolled; ++i) {
    NodeId at = slot[static_cast<std::size_t>(i)];
    if (i > 0) {
      const NodeId comma = node_near(from), start = node_near(from);
      b_.byte(at, ',', comma);
      ws(comma, start);
      at = start;
    }
    CELLM_RETURN_IF_ERROR(item(i, at, slot[static_cast<std::size_t>(i) + 1]));
  }
  for (std::int64_t i = min; i <= unrolled; ++i)
    b_.byte(slot[static_cast<std::size_t>(i)], ']', to);
  if (max < 0 && items != nullptr) {
    // Unbounded tail: one more item at a time, each emitted once.
    const NodeId last = slot.back(), start = node_near(from);
    if (unrolled == 0) {
      const NodeId written = node_near(from), comma = node_near(from);
      b_.epsilon(last, start);
      CELLM_RETURN_IF_ERROR(item(0, start, written));
      b_.byte(written, ']', to);
      b_.byte(written, ',', comma);
      ws(comma, start);
    } else {
      const NodeId comma = node_near(from);
      b_.byte(last, ',', comma);
      ws(comma, start);
      CELLM_RETURN_IF_ERROR(item(unrolled, start, last));
    }
  }
  return Status::ok();
}

}  // namespace cellm::grammar
