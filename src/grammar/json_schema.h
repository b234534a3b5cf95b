// JSON Schema → Grammar: the subset real clients send for structured outputs
// (OpenAI response_format json_schema, tool parameters).
//
// Covered: type (one or a list, "null" included; OpenAPI's nullable),
// properties (emitted in the schema's order) / required /
// additionalProperties (false, true or a schema: an object without declared
// properties becomes a map of that schema), items / prefixItems, minItems /
// maxItems, enum, const, anyOf / oneOf (oneOf is generated as anyOf: a value
// that matches two branches is possible), $ref to "#", "#/$defs/..." and
// "#/definitions/..." (recursion allowed), string minLength / maxLength and
// format date, time, date-time, uuid and email, integer minimum / maximum /
// exclusiveMinimum / exclusiveMaximum (a digit-range automaton; bounds on
// "number" are refused). Annotations (title,
// description, default, examples, $schema, $id, $comment, deprecated,
// readOnly, writeOnly) are ignored. Every other keyword (pattern, allOf,
// not, multipleOf, ...) is refused with InvalidArgument naming the keyword and
// where it appears, so nothing is silently unenforced.
//
// Formats are generated strictly: a date is one that exists in every year
// (February stops at 28), an email's parts are bounded (1-32 characters
// before the @, 2-3 labels of 1-24 after it).
//
// The generated text is JSON with bounded whitespace: at most
// `max_whitespace` bytes of space, tab, CR or newline at each place JSON
// allows them (none after the root value), so a model cannot loop on
// spaces; numbers have at most 16 integer, 16 fraction and 3 exponent digits.
//
// Thread-safety: pure functions.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "cellm/status.h"
#include "grammar/grammar.h"

namespace cellm::grammar {

struct JsonGrammarOptions {
  int max_whitespace = 16;
};

// Schema nesting deeper than this is refused.
inline constexpr int kMaxSchemaDepth = 64;
// Unrolled bounds (minItems, maxItems, minLength, maxLength) above this are refused.
inline constexpr int kMaxUnrolledBound = 256;

// Any JSON object (response_format json_object).
Result<std::shared_ptr<const Grammar>> compile_json_object(const JsonGrammarOptions& options = {});
// One JSON value matching `schema`.
Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::ordered_json& schema,
                                                           const JsonGrammarOptions& options = {});

// Callers that build larger grammars around schema values (tool calls) use
// the compiler's pieces through this builder.
class JsonGrammarBuilder {
 public:
  explicit JsonGrammarBuilder(GrammarBuilder& builder, const JsonGrammarOptions& options = {});
  ~JsonGrammarBuilder();
  JsonGrammarBuilder(const JsonGrammarBuilder&) = delete;
  JsonGrammarBuilder& operator=(const JsonGrammarBuilder&) = delete;

  // A value of `schema` (whose "#" is `schema` itself) between two nodes of
  // one rule.
  Status value(const nlohmann::ordered_json& schema, NodeId from, NodeId to);
  // Any JSON object between two nodes.
  void any_object(NodeId from, NodeId to);
  // Optional bounded whitespace between two nodes.
  void whitespace(NodeId from, NodeId to);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cellm::grammar
