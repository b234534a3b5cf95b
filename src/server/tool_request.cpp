#include "server/tool_request.h"

#include <fmt/format.h>

namespace cellm::server {
namespace {

using json = nlohmann::ordered_json;

bool fail(RequestError* error, std::string param, Status status) {
  error->param = std::move(param);
  error->status = std::move(status);
  return false;
}

// obj[key] == "function", without throwing when the value is not a string.
bool is_function_type(const json& obj) {
  auto it = obj.find("type");
  return it != obj.end() && it->is_string() && *it == "function";
}

}  // namespace

// Assistant turns that carry tool_calls: checked, and each call's arguments
// given to the template as an object (Llama 3 templates apply tojson to them,
// Qwen/Hermes ones accept either), as clients send them as a JSON string.
bool parse_tool_calls(json& calls, std::size_t index, RequestError* error) {
  const std::string field = fmt::format("messages[{}].tool_calls", index);
  if (!calls.is_array()) return fail(error, field, invalid_argument("'tool_calls' must be a list"));
  for (std::size_t j = 0; j < calls.size(); ++j) {
    json& call = calls[j];
    const std::string at = fmt::format("{}[{}]", field, j);
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
      return fail(error, at,
                  invalid_argument("each tool call must be an object with a 'function' "
                                   "object ({{\"name\": ..., \"arguments\": ...}})"));
    }
    json& fn = call["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) {
      return fail(error, at + ".function.name",
                  invalid_argument("the function name must be a string"));
    }
    auto args = fn.find("arguments");
    if (args == fn.end() || args->is_null()) {
      fn["arguments"] = json::object();
    } else if (args->is_string()) {
      json parsed = json::parse(args->get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (!parsed.is_object()) {
        return fail(error, at + ".function.arguments",
                    invalid_argument("'arguments' must be a JSON object encoded as a string"));
      }
      *args = std::move(parsed);
    } else if (!args->is_object()) {
      return fail(error, at + ".function.arguments",
                  invalid_argument("'arguments' must be a JSON object or a string holding one"));
    }
  }
  return true;
}

bool parse_tools(const json& tools, RequestError* error) {
  if (!tools.is_array()) return fail(error, "tools", invalid_argument("'tools' must be a list"));
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object() || !is_function_type(t) || !t.contains("function") ||
        !t["function"].is_object()) {
      return fail(error, at,
                  invalid_argument("each tool must be {{\"type\": \"function\", "
                                   "\"function\": {{\"name\": ..., ...}}}}"));
    }
    const json& fn = t["function"];
    if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty()) {
      return fail(error, at + ".function.name",
                  invalid_argument("each tool's function needs a non-empty 'name'"));
    }
  }
  return true;
}

// "auto" (the default) and "none" are served as they are; "required" and a
// named function constrain decoding to a call (structured_output.h).
bool parse_tool_choice(const json& choice, GenerationRequest* req, RequestError* error) {
  constexpr const char* kSupported =
      "supported values are \"auto\", \"none\", \"required\" and "
      "{\"type\": \"function\", \"function\": {\"name\": ...}}";
  const bool has_tools = req->tools.is_array() && !req->tools.empty();
  if (choice.is_string()) {
    const std::string s = choice.get<std::string>();
    if (s == "none") {
      req->tools = nullptr;
      req->tool_choice = ToolChoice::kNone;
      return true;
    }
    if (s == "auto") {
      req->tool_choice = ToolChoice::kAuto;
      return true;
    }
    if (s == "required") {
      if (!has_tools) {
        return fail(error, "tool_choice",
                    invalid_argument("tool_choice \"required\" needs a non-empty 'tools' list"));
      }
      req->tool_choice = ToolChoice::kRequired;
      return true;
    }
    return fail(error, "tool_choice",
                invalid_argument("tool_choice \"{}\" is not supported: {}", s, kSupported));
  }
  if (choice.is_object() && is_function_type(choice) && choice.contains("function") &&
      choice["function"].is_object() && choice["function"].contains("name") &&
      choice["function"]["name"].is_string()) {
    const std::string name = choice["function"]["name"].get<std::string>();
    bool known = false;
    if (has_tools) {
      for (const json& t : req->tools) known = known || t["function"]["name"] == name;
    }
    if (!known) {
      return fail(error, "tool_choice",
                  invalid_argument("tool_choice names the function \"{}\", "
                                   "which is not in 'tools'",
                                   name));
    }
    req->tool_choice = ToolChoice::kNamed;
    req->tool_choice_name = name;
    return true;
  }
  return fail(error, "tool_choice",
              invalid_argument("tool_choice must be \"auto\", \"none\", \"required\" or "
                               "{{\"type\": \"function\", \"function\": "
                               "{{\"name\": ...}}}}; {}",
                               kSupported));
}

}  // namespace cellm::server
