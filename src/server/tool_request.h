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

// Sets req->tool_choice: "auto" (the default); "none" also clears req->tools
// (nothing is rendered or parsed); "required" (tools must be non-empty) and
// a named function (it must be in tools) constrain decoding to one call
// (structured_output.h). Anything else is a 400 naming tool_choice that
// lists the supported values. req->tools must be set first.
bool parse_tool_choice(const nlohmann::ordered_json& choice, GenerationRequest* req,
                       RequestError* error);

// An assistant message's tool_calls, checked in place; each call's
// function.arguments becomes a JSON object (clients send a string; Llama 3
// templates apply tojson to it, Qwen/Hermes ones accept either).
bool parse_tool_calls(nlohmann::ordered_json& calls, std::size_t message_index,
                      RequestError* error);

}  // namespace cellm::server
