// POST /v1/messages (the Anthropic Messages API) as a translation, not a
// second pipeline: an Anthropic request body is checked field by field and
// rewritten as the equivalent /v1/chat/completions body, which then takes the
// chat path (parse_request, template, admission, GenerationRun). Fields and
// content blocks cellm cannot honour (images, documents, thinking, forced
// tool use...) are refused by name rather than dropped.
//
// Mapping: `system` becomes a leading system message; text blocks of a turn
// are concatenated; an assistant turn's tool_use blocks become its OpenAI
// tool_calls (input → arguments); each tool_result block of a user turn
// becomes a "tool" message before the turn's text (an is_error one says
// "Error: " first); `stop_sequences` → stop;
// `tools` (name, description, input_schema) → function tools; tool_choice
// auto/none → "auto"/"none"; `metadata` is accepted and ignored, `thinking`
// only as {"type": "disabled"}, disable_parallel_tool_use only false. A final
// assistant turn (prefill) is refused: the chat path cannot continue it.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace cellm::server {

struct AnthropicRequest {
  nlohmann::ordered_json chat;              // the /v1/chat/completions body
  std::vector<std::string> stop_sequences;  // as sent, to name the one that matched
  bool stream = false;
};

// Translates a /v1/messages body; on failure fills *error (InvalidArgument or
// NotSupported, `param` the Anthropic field) and returns nullopt.
std::optional<AnthropicRequest> parse_anthropic_request(std::string_view body, RequestError* error);

// The Anthropic name of a field the chat parser refused ("stop" →
// "stop_sequences"); other names pass through.
std::string anthropic_param_name(std::string_view openai_param);

}  // namespace cellm::server
