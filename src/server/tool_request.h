// The tool parts of a chat request: `tools`, `tool_choice`, and the
// tool_calls of earlier assistant turns. Each check names the offending field
// in RequestError, as parse_request does for the rest of the body.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace cellm::server {

// Each tool must be {"type": "function", "function": {"name": ..., ...}}.
bool parse_tools(const nlohmann::ordered_json& tools, RequestError* error);

// "auto" (the default) is served as is; "none" clears req->tools (nothing is
// rendered or parsed). "required" and a named function need constrained
// decoding, not implemented yet: a 400 listing the supported values (a name
// that is not in req->tools is named as such). req->tools must be set first.
bool parse_tool_choice(const nlohmann::ordered_json& choice, GenerationRequest* req,
                       RequestError* error);

// An assistant message's tool_calls, checked in place; each call's
// function.arguments becomes a JSON object (clients send a string; Llama 3
// templates apply tojson to it, Qwen/Hermes ones accept either).
bool parse_tool_calls(nlohmann::ordered_json& calls, std::size_t message_index,
                      RequestError* error);

}  // namespace cellm::server
