// The structured-output part of a request body: `response_format` on chat
// and completions ({"type": "text"}, {"type": "json_object"} or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict",
// "description"}}). The schema itself is checked when it is compiled
// (structured_output.h), still before anything starts.
//
// The grammar extension, on both endpoints, constrains the output to a
// user-written grammar instead:
//   "grammar": {"type": "ebnf" | "regex", "value": "<text>"}
// with the aliases "grammar": "<EBNF text>" (llama-server),
// "guided_grammar": "<EBNF text>" and "guided_regex": "<regex>" (vLLM).
// At most one of them, and none with a JSON response_format or a forced
// tool_choice. The text compiles with the schemas (structured_output.h).
//
// Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace cellm::server {

// Fills req->response_format and req->response_schema; false with *error
// naming the field (response_format, response_format.type, ...).
bool parse_response_format(const nlohmann::ordered_json& value, GenerationRequest* req,
                           RequestError* error);

// Fills req->grammar_* from whichever grammar field the body has (null
// pointers for absent ones); call after response_format and tool_choice are
// parsed. False with *error naming the field.
bool parse_grammar(const nlohmann::ordered_json* grammar,
                   const nlohmann::ordered_json* guided_grammar,
                   const nlohmann::ordered_json* guided_regex, GenerationRequest* req,
                   RequestError* error);

}  // namespace cellm::server
