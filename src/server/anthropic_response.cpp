#include "server/anthropic_response.h"

#include <fmt/format.h>

namespace cellm::server {
namespace {

using nlohmann::json;

json usage(std::int64_t input, std::int64_t output) {
  return json{{"input_tokens", input}, {"output_tokens", output}};
}

// A tool call's arguments as the input object; text that is not a JSON
// object (the arguments of a call cut short by max_tokens, as far as the
// model got) is kept under "_raw".
json tool_input(const json& arguments) {
  if (arguments.is_object()) return arguments;
  if (arguments.is_string()) {
    json parsed = json::parse(arguments.get<std::string>(), nullptr, false);
    if (parsed.is_object()) return parsed;
    return json{{"_raw", arguments}};
  }
  return json::object();
}

const json* first_choice(const json& chunk) {
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return nullptr;
  return &(*choices)[0];
}

}  // namespace

std::pair<int, const char*> anthropic_error_kind(int http) {
  switch (http) {
    case 400:
    case 422:
    case 501: return {400, "invalid_request_error"};
    case 401: return {401, "authentication_error"};
    case 403: return {403, "permission_error"};
    case 404: return {404, "not_found_error"};
    case 413: return {413, "request_too_large"};
    case 429:
    case 503: return {529, "overloaded_error"};
    default: return {500, "api_error"};
  }
}

json anthropic_error_json(std::string_view type, std::string_view message) {
  return json{{"type", "error"},
              {"error", {{"type", std::string(type)}, {"message", std::string(message)}}}};
}

std::pair<int, json> anthropic_error(const Status& status, std::string_view param) {
  const auto [http, type] = anthropic_error_kind(http_status(status.code()));
  // Anthropic errors have no param field: the field is named in the message
  // unless the message already names it.
  const std::string_view text = status.message();
  const std::string message = param.empty() || text.find(param) != std::string_view::npos
                                  ? std::string(text)
                                  : fmt::format("{}: {}", param, text);
  return {http, anthropic_error_json(type, message)};
}

std::pair<int, json> anthropic_error_from_chat(int status, const json& body) {
  const auto [http, type] = anthropic_error_kind(status);
  std::string message = "the generation failed";
  if (auto e = body.find("error"); e != body.end() && e->is_object()) {
    message = e->value("message", message);
  }
  return {http, anthropic_error_json(type, message)};
}

std::optional<std::string> stop_sequence_at(const std::vector<std::string>& stops, int index) {
  if (index < 0 || static_cast<std::size_t>(index) >= stops.size()) return std::nullopt;
  return stops[static_cast<std::size_t>(index)];
}

std::optional<std::string> anthropic_stop_reason(std::string_view finish_reason,
                                                 bool stop_sequence) {
  if (finish_reason == "stop") return stop_sequence ? "stop_sequence" : "end_turn";
  if (finish_reason == "length") return "max_tokens";
  if (finish_reason == "tool_calls") return "tool_use";
  return std::nullopt;
}

std::string anthropic_tool_id(std::string_view call_id) {
  if (call_id.starts_with("call_")) call_id.remove_prefix(5);
  return "toolu_" + std::string(call_id);
}

std::pair<int, json> anthropic_message_from_chat(const json& chat,
                                                 const std::optional<std::string>& stop_sequence) {
  const json* choice = first_choice(chat);
  if (choice == nullptr || !choice->contains("message")) {
    return {500, anthropic_error_json("api_error", "the generation produced no answer")};
  }
  const json& message = (*choice)["message"];
  const std::string finish = choice->value("finish_reason", json(nullptr)).is_string()
                                 ? (*choice)["finish_reason"].get<std::string>()
                                 : std::string();
  const std::optional<std::string> reason =
      anthropic_stop_reason(finish, stop_sequence.has_value());
  if (!reason) {
    return {529, anthropic_error_json("overloaded_error",
                                      "the server ended this generation before it finished (it "
                                      "is shutting down); retry later")};
  }
  json content = json::array();
  if (auto text = message.find("content"); text != message.end() && text->is_string()) {
    // Anthropic leaves out an empty text block when tools were called.
    if (!text->get_ref<const std::string&>().empty() || !message.contains("tool_calls")) {
      content.push_back(json{{"type", "text"}, {"text", *text}});
    }
  }
  if (auto calls = message.find("tool_calls"); calls != message.end() && calls->is_array()) {
    for (const json& call : *calls) {
      const json& fn = call["function"];
      content.push_back(json{{"type", "tool_use"},
                             {"id", anthropic_tool_id(call.value("id", ""))},
                             {"name", fn.value("name", "")},
                             {"input", tool_input(fn.value("arguments", json(nullptr)))}});
    }
  }
  const json& u = chat.contains("usage") ? chat["usage"] : json::object();
  json body{{"id", chat.value("id", "")},
            {"type", "message"},
            {"role", "assistant"},
            {"model", chat.value("model", "")},
            {"content", std::move(content)},
            {"stop_reason", *reason},
            {"stop_sequence", stop_sequence ? json(*stop_sequence) : json(nullptr)},
            {"usage", usage(u.value("prompt_tokens", std::int64_t{0}),
                            u.value("completion_tokens", std::int64_t{0}))}};
  return {200, std::move(body)};
}

std::string anthropic_event(std::string_view name, const json& payload) {
  return fmt::format("event: {}\ndata: {}\n\n", name,
                     payload.dump(-1, ' ', false, json::error_handler_t::replace));
}

AnthropicStream::AnthropicStream(std::string id, std::string model, std::int64_t input_tokens,
                                 std::function<std::optional<std::string>()> stop_sequence)
    : id_(std::move(id)),
      model_(std::move(model)),
      input_tokens_(input_tokens),
      stop_sequence_(std::move(stop_sequence)) {}

void AnthropicStream::start(std::string* out) {
  if (started_) return;
  started_ = true;
  json message{{"id", id_},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model_},
               {"content", json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage", usage(input_tokens_, 0)}};
  *out += anthropic_event("message_start",
                          json{{"type", "message_start"}, {"message", std::move(message)}});
  *out += anthropic_event("ping", json{{"type", "ping"}});
}

void AnthropicStream::open_block(json block, std::string* out) {
  close_block(out);
  block_open_ = true;
  block_is_text_ = block["type"] == "text";
  *out += anthropic_event("content_block_start", json{{"type", "content_block_start"},
                                                      {"index", next_block_},
                                                      {"content_block", std::move(block)}});
}

void AnthropicStream::close_block(std::string* out) {
  if (!block_open_) return;
  block_open_ = false;
  *out += anthropic_event("content_block_stop",
                          json{{"type", "content_block_stop"}, {"index", next_block_}});
  ++next_block_;
}

void AnthropicStream::on_chunk(const json& chunk, std::string* out) {
  if (auto error = chunk.find("error"); error != chunk.end()) {
    // A failure after the stream began: Anthropic's error event ends it.
    const std::string message =
        error->is_object() ? error->value("message", "the generation failed") : "failed";
    *out += anthropic_event("error", anthropic_error_json("api_error", message));
    failed_ = true;
    return;
  }
  if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
    output_tokens_ = u->value("completion_tokens", std::int64_t{0});
  }
  const json* choice = first_choice(chunk);
  if (choice == nullptr) return;
  const json delta = choice->value("delta", json::object());
  if (auto text = delta.find("content");
      text != delta.end() && text->is_string() && !text->get_ref<const std::string&>().empty()) {
    if (!block_open_ || !block_is_text_) open_block(json{{"type", "text"}, {"text", ""}}, out);
    *out += anthropic_event("content_block_delta",
                            json{{"type", "content_block_delta"},
                                 {"index", next_block_},
                                 {"delta", {{"type", "text_delta"}, {"text", *text}}}});
  }
  if (auto calls = delta.find("tool_calls"); calls != delta.end() && calls->is_array()) {
    for (const json& call : *calls) {
      const json fn = call.value("function", json::object());
      if (call.contains("id")) {
        open_block(json{{"type", "tool_use"},
                        {"id", anthropic_tool_id(call["id"].get<std::string>())},
                        {"name", fn.value("name", "")},
                        {"input", json::object()}},
                   out);
      }
      const std::string args = fn.value("arguments", "");
      if (!args.empty() && block_open_ && !block_is_text_) {
        *out += anthropic_event(
            "content_block_delta",
            json{{"type", "content_block_delta"},
                 {"index", next_block_},
                 {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
      }
    }
  }
  if (auto f = choice->find("finish_reason"); f != choice->end() && f->is_string()) {
    const std::string finish = f->get<std::string>();
    if (finish == "stop" && stop_sequence_) stop_string_ = stop_sequence_();
    stop_reason_ = anthropic_stop_reason(finish, stop_string_.has_value());
    // A reply with no content still gets one (empty) text block.
    if (!block_open_ && next_block_ == 0) open_block(json{{"type", "text"}, {"text", ""}}, out);
    close_block(out);
  }
}

std::string AnthropicStream::feed(std::string_view sse) {
  std::string out;
  if (failed_) return out;
  start(&out);
  std::string_view data = sse;
  if (data.starts_with("data: ")) data.remove_prefix(6);
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r')) data.remove_suffix(1);
  if (data == "[DONE]") {
    close_block(&out);
    if (!stop_reason_) {
      // Ended by the server ("abort") without a failure reported: it stopped.
      out += anthropic_event(
          "error", anthropic_error_json("overloaded_error",
                                        "the server ended this generation before it finished "
                                        "(it is shutting down); retry later"));
      failed_ = true;
      return out;
    }
    json delta{{"stop_reason", stop_reason_ ? json(*stop_reason_) : json(nullptr)},
               {"stop_sequence", stop_string_ ? json(*stop_string_) : json(nullptr)}};
    out += anthropic_event("message_delta", json{{"type", "message_delta"},
                                                 {"delta", std::move(delta)},
                                                 {"usage", {{"output_tokens", output_tokens_}}}});
    out += anthropic_event("message_stop", json{{"type", "message_stop"}});
    return out;
  }
  const json chunk = json::parse(data, nullptr, false);
  if (chunk.is_object()) on_chunk(chunk, &out);
  return out;
}

}  // namespace cellm::server
