#include "server/openai_response.h"

#include <cmath>

namespace cellm::server {
namespace {

using nlohmann::json;

const char* object_name(RequestKind kind, bool chunk) {
  if (kind == RequestKind::kChat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

json finish_json(const std::optional<std::string>& reason) {
  return reason ? json(*reason) : json(nullptr);
}

json header(RequestKind kind, const ResponseIds& ids, bool chunk) {
  return json{{"id", ids.id},
              {"object", object_name(kind, chunk)},
              {"created", ids.created},
              {"model", ids.model}};
}

// JSON has no -inf; OpenAI reports such tokens with this value.
constexpr double kFloorLogprob = -9999.0;

double shown(float logprob) {
  return std::isfinite(logprob) ? static_cast<double>(logprob) : kFloorLogprob;
}

json bytes_json(const std::string& text) {
  json bytes = json::array();
  for (char c : text) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return bytes;
}

}  // namespace

json logprobs_json(RequestKind kind,
                   const std::optional<std::vector<TokenLogprobsText>>& logprobs) {
  if (!logprobs) return nullptr;
  if (kind == RequestKind::kChat) {
    json content = json::array();
    for (const TokenLogprobsText& t : *logprobs) {
      json top = json::array();
      for (const TokenText& alt : t.top) {
        top.push_back({{"token", alt.token},
                       {"logprob", shown(alt.logprob)},
                       {"bytes", bytes_json(alt.bytes)}});
      }
      content.push_back({{"token", t.token},
                         {"logprob", shown(t.logprob)},
                         {"bytes", bytes_json(t.bytes)},
                         {"top_logprobs", std::move(top)}});
    }
    return json{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array();
  json values = json::array();
  json tops = json::array();
  json offsets = json::array();
  for (const TokenLogprobsText& t : *logprobs) {
    tokens.push_back(t.token);
    offsets.push_back(t.text_offset);
    if (!t.scored) {
      values.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    values.push_back(shown(t.logprob));
    // The alternatives and the chosen token (OpenAI: up to k + 1 entries);
    // tokens of equal text share one key, the likelier one kept.
    json top = json::object();
    for (const TokenText& alt : t.top) {
      if (!top.contains(alt.token)) top[alt.token] = shown(alt.logprob);
    }
    if (!top.contains(t.token)) top[t.token] = shown(t.logprob);
    tops.push_back(std::move(top));
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(values)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

json usage_json(const Usage& usage) {
  json u{{"prompt_tokens", usage.prompt_tokens},
         {"completion_tokens", usage.completion_tokens},
         {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  u["prompt_tokens_details"] = json{{"cached_tokens", usage.cached_tokens}};
  return u;
}

json response_json(RequestKind kind, const ResponseIds& ids, const std::vector<Choice>& choices,
                   const Usage& usage) {
  json body = header(kind, ids, false);
  json list = json::array();
  for (const Choice& c : choices) {
    if (kind == RequestKind::kChat) {
      json message{{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) message["content"] = nullptr;
        json calls = json::array();
        for (const ToolCall& t : c.tool_calls) {
          calls.push_back({{"id", t.id},
                           {"type", "function"},
                           {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        }
        message["tool_calls"] = std::move(calls);
      }
      list.push_back({{"index", c.index},
                      {"message", std::move(message)},
                      {"logprobs", logprobs_json(kind, c.logprobs)},
                      {"finish_reason", finish_json(c.finish_reason)}});
    } else {
      list.push_back({{"index", c.index},
                      {"text", c.text},
                      {"logprobs", logprobs_json(kind, c.logprobs)},
                      {"finish_reason", finish_json(c.finish_reason)}});
    }
  }
  body["choices"] = std::move(list);
  body["usage"] = usage_json(usage);
  return body;
}

json chunk_json(RequestKind kind, const ResponseIds& ids, const Choice& delta,
                bool first_of_choice) {
  json body = header(kind, ids, true);
  json choice{{"index", delta.index},
              {"logprobs", logprobs_json(kind, delta.logprobs)},
              {"finish_reason", finish_json(delta.finish_reason)}};
  if (kind == RequestKind::kChat) {
    json d = json::object();
    if (first_of_choice) d["role"] = "assistant";
    if (!delta.text.empty() || first_of_choice) d["content"] = delta.text;
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = delta.text;
  }
  body["choices"] = json::array({std::move(choice)});
  return body;
}

json tool_event_chunk_json(const ResponseIds& ids, std::int32_t choice, const ToolEvent& event) {
  json body = header(RequestKind::kChat, ids, true);
  json entry{{"index", event.index}};
  if (event.kind == ToolEvent::Kind::kCallStart) {
    entry["id"] = event.id;
    entry["type"] = "function";
    entry["function"] = {{"name", event.name}, {"arguments", ""}};
  } else {
    entry["function"] = {{"arguments", event.text}};
  }
  json delta{{"tool_calls", json::array({std::move(entry)})}};
  body["choices"] = json::array({{{"index", choice},
                                  {"delta", std::move(delta)},
                                  {"logprobs", nullptr},
                                  {"finish_reason", nullptr}}});
  return body;
}

void add_tool_events(Choice* choice, std::vector<ToolEvent>* events) {
  for (ToolEvent& e : *events) {
    if (e.kind == ToolEvent::Kind::kContent) {
      choice->text += e.text;
    } else if (e.kind == ToolEvent::Kind::kCallStart) {
      ToolCall call;
      call.index = e.index;
      call.id = std::move(e.id);
      call.name = std::move(e.name);
      choice->tool_calls.push_back(std::move(call));
    } else if (e.index >= 0 && static_cast<std::size_t>(e.index) < choice->tool_calls.size()) {
      choice->tool_calls[static_cast<std::size_t>(e.index)].arguments += e.text;
    }
  }
}

json usage_chunk_json(RequestKind kind, const ResponseIds& ids, const Usage& usage) {
  json body = header(kind, ids, true);
  body["choices"] = json::array();
  body["usage"] = usage_json(usage);
  return body;
}

std::string sse_event(const json& payload) {
  // Replacement of invalid UTF-8 keeps a stream well formed even if a model
  // emits a broken byte sequence.
  return "data: " + payload.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

json error_json(const Status& status, std::string_view param) {
  const int http = http_status(status.code());
  const char* type = http == 400 || http == 404 ? "invalid_request_error"
                     : http == 429              ? "rate_limit_error"
                     : http == 501              ? "not_implemented_error"
                     : http == 503              ? "service_unavailable_error"
                                                : "server_error";
  return json{{"error",
               {{"message", std::string(status.message())},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(std::string(param))},
                {"code", std::string(status_code_name(status.code()))}}}};
}

}  // namespace cellm::server
