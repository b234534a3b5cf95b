// Parsing and validation of OpenAI-style request bodies (/v1/completions and
// /v1/chat/completions). Every field is checked for type and range; a field
// cellm does not implement is refused with its name, never silently ignored
// (a few are accepted only at their neutral value, e.g. echo false).
// Ranges that need the model (logit_bias and stop_token_ids ids inside the
// vocabulary) are checked by the endpoint, also before anything starts.
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

#include "cellm/runner.h"
#include "cellm/sampling_defaults.h"
#include "cellm/status.h"

namespace cellm::server {

enum class RequestKind : std::uint8_t { kCompletion, kChat };

// response_format: free text, any JSON object, or JSON matching a schema
// (decoding is constrained by a grammar; see structured_output.h).
enum class ResponseFormat : std::uint8_t { kText, kJsonObject, kJsonSchema };
// The "grammar" extension (aliases "guided_grammar", "guided_regex"): output
// constrained to a user-written EBNF grammar or regex (grammar/ebnf.h,
// grammar/regex.h; see structured_request.h for the request shapes).
enum class GrammarSyntax : std::uint8_t { kNone, kEbnf, kRegex };
// tool_choice: "auto" (the model decides), "none" (tools cleared),
// "required" (one call of any tool, constrained) or a named function.
enum class ToolChoice : std::uint8_t { kAuto, kNone, kRequired, kNamed };

// One chat message as the template sees it (content flattened to text).
struct ChatMessage {
  std::string role;
  std::string content;
  nlohmann::ordered_json
      extra;  // other fields (name, tool_calls, reasoning_content...) passed to the template
};

struct GenerationRequest {
  RequestKind kind = RequestKind::kCompletion;
  std::string model;
  // Completions: either text or token ids.
  std::optional<std::string> prompt_text;
  std::optional<std::vector<std::int64_t>> prompt_tokens;
  // Completions: the choice text starts with the prompt (OpenAI's legacy
  // `echo`); with logprobs the prompt's tokens come first in them (the first
  // one unscored). max_tokens may then be 0: the prompt alone.
  bool echo = false;
  // Chat: the conversation; tools and template variables go to the template.
  std::vector<ChatMessage> messages;
  // Ordered: templates that print JSON (tool schemas) keep the client's key order.
  // null when absent or when tool_choice is "none" (then neither rendered
  // nor parsed); otherwise a list of {"type": "function", "function": {...}}.
  nlohmann::ordered_json tools;
  nlohmann::ordered_json chat_template_kwargs;  // object; e.g. {"enable_thinking": false}
  bool add_generation_prompt = true;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed: the function (present in tools)

  ResponseFormat response_format = ResponseFormat::kText;
  // kJsonSchema: json_schema.schema as sent (checked when compiled).
  nlohmann::ordered_json response_schema;
  // The grammar extension: its syntax, text (compiled with the schemas,
  // before anything starts) and the field that carried it, which errors name
  // ("grammar.value", "grammar", "guided_grammar" or "guided_regex").
  GrammarSyntax grammar_syntax = GrammarSyntax::kNone;
  std::string grammar_text;
  std::string grammar_param;

  std::optional<std::int32_t> max_tokens;  // max_tokens or max_completion_tokens
  float temperature = 1.0f;
  float top_p = 1.0f;
  std::int32_t top_k = 0;  // 0 or -1: disabled
  // Which sampling settings the body set; the others take the model's
  // defaults (GenerationService::sampling_defaults) before the values above.
  SamplingGiven given;
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;
  std::int32_t n = 1;
  bool ignore_eos = false;
  std::int32_t min_tokens = 0;
  // The rest of the sampling set (SamplingParams documents the semantics).
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0
  float min_p = 0.0f;               // [0, 1]
  // Token id -> bias in [-100, 100], at most kMaxLogitBias ids, in the order
  // the body gave them (keys are decimal strings in JSON).
  std::vector<std::pair<std::int64_t, float>> logit_bias;
  // Extra ids that end a choice like EOS does (even with ignore_eos).
  std::vector<std::int64_t> stop_token_ids;
  // Log probabilities with every generated token: -1 none, else how many
  // top alternatives (0..kMaxTopLogprobs). Completions: `logprobs: k`; chat:
  // `logprobs: true` with `top_logprobs: k` (0 when absent).
  std::int32_t logprobs = -1;
  bool stream = false;
  bool include_usage = false;
  std::string user;
};

// Why a request was refused: the HTTP status comes from the Status code,
// `param` names the offending field (empty when the body as a whole is bad).
struct RequestError {
  Status status;
  std::string param;
};

struct RequestLimits {
  std::int32_t max_n = 16;
  // The engine's own limits (check_gen_config refuses more), so that a
  // request is refused here with the field named rather than at submit.
  std::int32_t max_stop_strings = static_cast<std::int32_t>(kMaxStopStrings);
  std::size_t max_stop_length = kMaxStopStringBytes;
  // max_tokens of a request that sends none, capped by what the context
  // leaves (0: what the context leaves).
  std::int32_t default_max_tokens = 0;
  std::int32_t max_stop_token_ids = 64;
};

// Parses a JSON body; on failure fills *error and returns nullopt.
std::optional<GenerationRequest> parse_request(RequestKind kind, std::string_view body,
                                               const RequestLimits& limits, RequestError* error);

}  // namespace cellm::server
