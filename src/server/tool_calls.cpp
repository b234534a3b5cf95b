#include "server/tool_calls.h"

#include <array>

#include <nlohmann/json.hpp>

#include "server/python_calls.h"

namespace cellm::server {
namespace {

using json = nlohmann::ordered_json;

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

bool contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// The end (one past) of the JSON object or array starting at s[pos], found by
// bracket matching outside strings; npos when it does not close.
std::size_t json_value_end(std::string_view s, std::size_t pos) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

json parse_json(std::string_view s) {
  return json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
}

// {"name": "...", <args_key>: {...}} → a call; arguments may also be a
// string holding a JSON object (some models quote them).
std::optional<ParsedCall> call_from_json(const json& v) {
  if (!v.is_object()) return std::nullopt;
  auto name = v.find("name");
  if (name == v.end() || !name->is_string() || name->get<std::string>().empty()) {
    return std::nullopt;
  }
  const json* args = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    auto it = v.find(key);
    if (it != v.end()) {
      args = &*it;
      break;
    }
  }
  json object = json::object();
  if (args != nullptr) {
    if (args->is_string()) {
      object = parse_json(args->get<std::string>());
    } else {
      object = *args;
    }
    if (!object.is_object()) return std::nullopt;
  }
  return ParsedCall{name->get<std::string>(), object.dump()};
}

std::optional<std::vector<ParsedCall>> parse_hermes(std::string_view body) {
  const json v = parse_json(trim(body));
  std::optional<ParsedCall> call = call_from_json(v);
  if (!call) return std::nullopt;
  return std::vector<ParsedCall>{std::move(*call)};
}

// One or more JSON objects separated by ';' and/or whitespace.
std::optional<std::vector<ParsedCall>> parse_llama3(std::string_view body) {
  std::vector<ParsedCall> calls;
  std::size_t i = 0;
  while (true) {
    while (i < body.size() && (is_space(body[i]) || body[i] == ';')) ++i;
    if (i == body.size()) break;
    if (body[i] != '{') return std::nullopt;
    const std::size_t end = json_value_end(body, i);
    if (end == std::string_view::npos) return std::nullopt;
    std::optional<ParsedCall> call = call_from_json(parse_json(body.substr(i, end - i)));
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
    i = end;
  }
  if (calls.empty()) return std::nullopt;
  return calls;
}

std::optional<std::vector<ParsedCall>> parse_mistral(std::string_view body) {
  body = trim(body);
  if (body.starts_with("[TOOL_CALLS]")) body = trim(body.substr(12));
  const json v = parse_json(body);
  std::vector<ParsedCall> calls;
  if (v.is_object()) {
    std::optional<ParsedCall> call = call_from_json(v);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  } else if (v.is_array() && !v.empty()) {
    for (const json& item : v) {
      std::optional<ParsedCall> call = call_from_json(item);
      if (!call) return std::nullopt;
      calls.push_back(std::move(*call));
    }
  } else {
    return std::nullopt;
  }
  return calls;
}

std::optional<std::vector<ParsedCall>> parse_body(ToolFormat format, std::string_view body) {
  switch (format) {
    case ToolFormat::kLlama3: return parse_llama3(body);
    case ToolFormat::kHermes: return parse_hermes(body);
    case ToolFormat::kMistral: return parse_mistral(body);
    case ToolFormat::kGemma: return parse_python_calls(body);
    case ToolFormat::kNone: break;
  }
  return std::nullopt;
}

}  // namespace

std::string_view tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::kNone: return "none";
    case ToolFormat::kLlama3: return "llama3_json";
    case ToolFormat::kHermes: return "hermes";
    case ToolFormat::kMistral: return "mistral";
    case ToolFormat::kGemma: return "gemma_tool_code";
  }
  return "none";
}

ToolFormat detect_tool_format(std::string_view source, std::string_view arch) {
  const bool hermes = contains(source, "<tool_call>");
  const bool mistral = contains(source, "[TOOL_CALLS]");
  const bool llama3 = contains(source, "<|python_tag|>") || contains(source, "ipython");
  const bool gemma = contains(source, "tool_code");
  // A template may mention several conventions (e.g. in a system prompt);
  // the architecture says which one the family was trained on first.
  std::array<std::pair<bool, ToolFormat>, 4> order = {{{hermes, ToolFormat::kHermes},
                                                       {mistral, ToolFormat::kMistral},
                                                       {llama3, ToolFormat::kLlama3},
                                                       {gemma, ToolFormat::kGemma}}};
  if (arch.starts_with("gemma")) {
    order = {{{gemma, ToolFormat::kGemma},
              {hermes, ToolFormat::kHermes},
              {mistral, ToolFormat::kMistral},
              {llama3, ToolFormat::kLlama3}}};
  } else if (arch.starts_with("mistral")) {
    order = {{{mistral, ToolFormat::kMistral},
              {hermes, ToolFormat::kHermes},
              {llama3, ToolFormat::kLlama3},
              {gemma, ToolFormat::kGemma}}};
  }
  for (const auto& [found, format] : order) {
    if (found) return format;
  }
  return ToolFormat::kNone;
}

std::optional<std::vector<ParsedCall>> parse_tool_body(ToolFormat format, std::string_view body) {
  // Serializing text that is not valid UTF-8 throws: such a body is no call.
  try {
    return parse_body(format, body);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace cellm::server
