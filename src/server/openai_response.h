// Response bodies in the OpenAI wire format: completion and chat objects,
// their streaming chunks (server-sent events), usage, and error bodies.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cellm/status.h"
#include "server/openai_request.h"
#include "server/tool_calls.h"

namespace cellm::server {

struct Usage {
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

// One token as logprobs show it: its text (valid UTF-8: a token that holds
// part of a character shows U+FFFD) and the raw bytes it stands for.
struct TokenText {
  std::string token;
  std::string bytes;
  float logprob = 0.0f;
};

// The log probabilities of one generated token as a response shows them.
struct TokenLogprobsText {
  std::string token;
  std::string bytes;
  float logprob = 0.0f;
  std::vector<TokenText> top;  // most likely first
  // Completions: where the token's text starts in the choice's text, in
  // code points (OpenAI's text_offset).
  std::int64_t text_offset = 0;
  // False for an echoed prompt's first token, which nothing predicts: its
  // logprob and top list show as null.
  bool scored = true;
};

// "stop" (a stop token or string), "length" (the token budget) or "abort".
struct Choice {
  std::int32_t index = 0;
  std::string text;
  std::optional<std::string> finish_reason;
  // Chat only: calls parsed out of the output (text is then the rest; the
  // message's content is null when that is empty).
  std::vector<ToolCall> tool_calls;
  // Set when the request asked for logprobs: one entry per token this
  // choice (or chunk) carries; the body then shows them in the endpoint's
  // form, otherwise "logprobs": null.
  std::optional<std::vector<TokenLogprobsText>> logprobs;
};

struct ResponseIds {
  std::string id;  // "cmpl-..." or "chatcmpl-..."
  std::int64_t created = 0;
  std::string model;
};

nlohmann::json usage_json(const Usage& usage);
// The non-streaming body for `kind` with every choice.
nlohmann::json response_json(RequestKind kind, const ResponseIds& ids,
                             const std::vector<Choice>& choices, const Usage& usage);
// One streaming chunk for one choice (text delta and/or finish reason). The
// first chat chunk of a choice carries the assistant role.
nlohmann::json chunk_json(RequestKind kind, const ResponseIds& ids, const Choice& delta,
                          bool first_of_choice);
// A chat chunk for one tool-call event of ToolCallParser: a call's header
// (kCallStart: `index`, `id`, `type`, `function.name` and empty
// `function.arguments`, as vLLM and SGLang send it) or a piece of its
// `function.arguments` (kArguments: `index` and the piece only).
nlohmann::json tool_event_chunk_json(const ResponseIds& ids, std::int32_t choice,
                                     const ToolEvent& event);
// Adds a choice's ToolCallParser events to its non-streamed form, in order:
// content to its text, a call from its header, each piece to that call's
// arguments (so they are the concatenation the stream shows).
void add_tool_events(Choice* choice, std::vector<ToolEvent>* events);
// A choice's "logprobs" value: null without entries, else the completions
// form (tokens, token_logprobs, top_logprobs, text_offset) or the chat form
// ({"content": [{token, logprob, bytes, top_logprobs}], "refusal": null}).
// A logprob of -inf (an id the sampler could not draw) is shown as -9999.0,
// as OpenAI does.
nlohmann::json logprobs_json(RequestKind kind,
                             const std::optional<std::vector<TokenLogprobsText>>& logprobs);
// The final usage-only chunk (stream_options.include_usage).
nlohmann::json usage_chunk_json(RequestKind kind, const ResponseIds& ids, const Usage& usage);
// "data: <json>\n\n".
std::string sse_event(const nlohmann::json& payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// {"error": {"message", "type", "param", "code"}} with the OpenAI type for the status.
nlohmann::json error_json(const Status& status, std::string_view param = {});

}  // namespace cellm::server
