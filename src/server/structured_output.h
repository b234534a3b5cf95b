// Structured outputs for a request: the grammar that response_format
// (json_object / json_schema), a forced tool_choice ("required" or a named
// function) or the grammar extension (a user's EBNF or regex) asks for,
// bound to the model's vocabulary as the TokenConstraint the engine decodes
// under.
//
// Forced tool calls are written in the model's own tool-call convention so
// that its parser (tool_calls.h) reads them back: Hermes/Qwen
// "<tool_call>\n{...}\n</tool_call>", Llama 3 {"name", "parameters"},
// Mistral [{"name", "arguments"}] (the [TOOL_CALLS] marker is a control token
// and stays out), and for a template without a convention (and Gemma's
// Python-style one) a bare {"name", "arguments"} object, parsed as Llama 3's
// JSON form. Each tool's arguments follow its "parameters" schema.
//
// Compiled grammars are cached (schema text, tools or grammar text as the key), so a
// repeated schema costs a lookup and its masks stay cached across requests.
//
// Thread-safety: structured_constraint may be called from any thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cellm/status.h"
#include "cellm/token_constraint.h"
#include "grammar/token_vocab.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace cellm::server {

struct StructuredOutput {
  TokenConstraintPtr constraint;  // null: unconstrained
  // Set for a forced tool call: the format its reply is parsed with.
  std::optional<ToolFormat> tool_format;
  Status status;  // not ok: refuse with 400 naming `param`
  std::string param;
};

// `format`: the model's tool-call convention; `vocab`: null when the service
// cannot constrain decoding (then a request that needs it is refused).
StructuredOutput structured_constraint(
    const GenerationRequest& request, ToolFormat format,
    const std::shared_ptr<const grammar::TokenVocabulary>& vocab);

}  // namespace cellm::server
