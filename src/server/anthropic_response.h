// Answers of POST /v1/messages in the Anthropic wire format, made from what
// the chat path produces: the chat.completion body of a finished run becomes
// a "message" object, and the chat.completion.chunk stream is rewritten event
// by event into Anthropic's named server-sent events (message_start, ping,
// content_block_start/delta/stop, message_delta, message_stop, error). A
// streamed tool call becomes a tool_use content_block_start (at the call's
// header chunk) and one input_json_delta per arguments piece, so tool input
// streams as incrementally as the chat path's function.arguments.
// Errors take Anthropic's {"type": "error", "error": {type, message}} shape.
//
// Thread-safety: the free functions are pure; an AnthropicStream belongs to
// the one HTTP thread writing its response.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cellm/status.h"

namespace cellm::server {

// The HTTP status and error type Anthropic uses in place of the chat path's
// status: 400 invalid_request_error (501 not-supported included), 401
// authentication_error, 404 not_found_error, 413 request_too_large, 529
// overloaded_error for a full queue (429 here) or a server that is loading
// or stopping (503), 500 api_error otherwise.
std::pair<int, const char*> anthropic_error_kind(int http);
// {"type": "error", "error": {"type", "message"}}; `param`, when given, is
// named at the start of the message.
nlohmann::json anthropic_error_json(std::string_view type, std::string_view message);
std::pair<int, nlohmann::json> anthropic_error(const Status& status, std::string_view param = {});

// stop_reason for a chat finish_reason; `stop_sequence` tells a stop string
// from the model's own end of turn. nullopt for "abort" (the run was ended
// by the server, which is reported as an error instead).
std::optional<std::string> anthropic_stop_reason(std::string_view finish_reason,
                                                 bool stop_sequence);
// "toolu_..." for a chat tool call id ("call_...").
std::string anthropic_tool_id(std::string_view call_id);

// The message object for a finished chat.completion body (its first
// choice). `stop_sequence` is the stop string that ended it, if one did.
// An aborted run gives an error instead: {status, body} either way.
std::pair<int, nlohmann::json> anthropic_message_from_chat(
    const nlohmann::json& chat, const std::optional<std::string>& stop_sequence);

// The error answer for a chat run that did not finish (collect()'s status
// and OpenAI error body).
std::pair<int, nlohmann::json> anthropic_error_from_chat(int status, const nlohmann::json& body);
// stops[index], or nullopt when index is -1 (no stop string matched).
std::optional<std::string> stop_sequence_at(const std::vector<std::string>& stops, int index);

// Rewrites the chat SSE stream of one run. feed() takes each piece the run
// writes ("data: {...}\n\n" or "data: [DONE]\n\n") and returns the Anthropic
// events to send in its place (possibly none).
class AnthropicStream {
 public:
  // `stop_sequence` is asked once the choice finished with "stop": the stop
  // string that ended it, or nullopt for the model's own end of turn.
  AnthropicStream(std::string id, std::string model, std::int64_t input_tokens,
                  std::function<std::optional<std::string>()> stop_sequence);

  std::string feed(std::string_view sse);

 private:
  void start(std::string* out);
  void open_block(nlohmann::json block, std::string* out);
  void close_block(std::string* out);
  void on_chunk(const nlohmann::json& chunk, std::string* out);

  std::string id_;
  std::string model_;
  std::int64_t input_tokens_;
  std::function<std::optional<std::string>()> stop_sequence_;
  bool started_ = false;
  bool block_open_ = false;
  bool block_is_text_ = false;
  std::int32_t next_block_ = 0;
  bool failed_ = false;  // an error event was sent: nothing follows it
  std::optional<std::string> stop_reason_;
  std::optional<std::string> stop_string_;
  std::int64_t output_tokens_ = 0;
};

// "event: NAME\ndata: JSON\n\n".
std::string anthropic_event(std::string_view name, const nlohmann::json& payload);

}  // namespace cellm::server
