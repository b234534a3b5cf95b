// The structured-output part of a request body: `response_format` on chat
// and completions ({"type": "text"}, {"type": "json_object"} or
// {"type": "json_schema", "json_schema": {"name", "schema", "strict",
// "description"}}). The schema itself is checked when it is compiled
// (structured_output.h), still before anything starts.
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

}  // namespace cellm::server
