#include "server/anthropic_request.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

namespace cellm::server {
namespace {

using json = nlohmann::ordered_json;

// A refusal raised anywhere in the translation and caught once at the top:
// the nesting (turn → block → field) would otherwise thread a flag through
// every level.
struct Refusal {
  std::string param;
  Status status;
};

[[noreturn]] void refuse(std::string param, Status status) {
  throw Refusal{std::move(param), std::move(status)};
}

// A null field counts as absent: clients echo response blocks back, and the
// SDKs serialise every optional field (tool_use's caller, toolset_name...).
void only_keys(const json& obj, const std::set<std::string>& allowed, const std::string& where,
               std::string_view what) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (allowed.contains(it.key()) || it->is_null()) continue;
    std::string list;
    for (const std::string& k : allowed) list += (list.empty() ? "" : ", ") + k;
    refuse(where.empty() ? it.key() : where + "." + it.key(),
           invalid_argument("unknown or unsupported field '{}' in {}; this server accepts {}",
                            it.key(), what, list));
  }
}

const std::string& string_field(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    refuse(where + "." + key, invalid_argument("'{}' must be a string", key));
  }
  return it->get_ref<const std::string&>();
}

// A text block: {"type": "text", "text": ...}; cache_control and citations
// are hints cellm has no use for, so they are accepted and ignored.
std::string text_block(const json& block, const std::string& where) {
  only_keys(block, {"type", "text", "cache_control", "citations"}, where, "a text block");
  return string_field(block, "text", where);
}

std::string block_type(const json& block, const std::string& where) {
  if (!block.is_object()) refuse(where, invalid_argument("each content block must be an object"));
  auto t = block.find("type");
  if (t == block.end() || !t->is_string()) {
    refuse(where + ".type", invalid_argument("each content block needs a string 'type'"));
  }
  return t->get<std::string>();
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& where,
                                    std::string_view allowed) {
  refuse(where,
         not_supported("content blocks of type '{}' are not supported here; {}", type, allowed));
}

// tool_result content: a string or a list of text blocks.
std::string tool_result_text(const json& block, const std::string& where) {
  only_keys(block, {"type", "tool_use_id", "content", "is_error", "cache_control"}, where,
            "a tool_result block");
  auto c = block.find("content");
  if (c == block.end() || c->is_null()) return {};
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) {
    refuse(where + ".content",
           invalid_argument("tool_result content must be a string or a list of text blocks"));
  }
  std::string out;
  for (std::size_t i = 0; i < c->size(); ++i) {
    const std::string at = fmt::format("{}.content[{}]", where, i);
    const std::string type = block_type((*c)[i], at);
    if (type != "text") unsupported_block(type, at, "a tool_result holds text blocks only");
    out += text_block((*c)[i], at);
  }
  return out;
}

void add_turn(const json& m, std::size_t index, std::map<std::string, std::string>* tool_names,
              json* messages) {
  const std::string where = fmt::format("messages[{}]", index);
  if (!m.is_object()) refuse(where, invalid_argument("each message must be an object"));
  only_keys(m, {"role", "content"}, where, "a message");
  auto role_it = m.find("role");
  if (role_it == m.end() || !role_it->is_string() ||
      (*role_it != "user" && *role_it != "assistant")) {
    refuse(where + ".role", invalid_argument("role must be \"user\" or \"assistant\" (the system "
                                             "prompt goes in the top-level 'system' field)"));
  }
  const std::string role = role_it->get<std::string>();
  auto content = m.find("content");
  if (content == m.end()) refuse(where + ".content", invalid_argument("'content' is required"));
  if (content->is_string()) {
    messages->push_back(json{{"role", role}, {"content", content->get<std::string>()}});
    return;
  }
  if (!content->is_array()) {
    refuse(where + ".content",
           invalid_argument("'content' must be a string or a list of content blocks"));
  }
  std::string text;
  json tool_calls = json::array();
  for (std::size_t j = 0; j < content->size(); ++j) {
    const json& block = (*content)[j];
    const std::string at = fmt::format("{}.content[{}]", where, j);
    const std::string type = block_type(block, at);
    if (type == "text") {
      text += text_block(block, at);
    } else if (type == "tool_use" && role == "assistant") {
      only_keys(block, {"type", "id", "name", "input", "cache_control", "caller"}, at,
                "a tool_use block");
      // The model called it itself: the only caller cellm produces.
      if (auto c = block.find("caller");
          c != block.end() && !c->is_null() && *c != json{{"type", "direct"}}) {
        refuse(at + ".caller", not_supported("only direct tool calls are supported (the caller "
                                             "{} is a server tool)",
                                             c->dump()));
      }
      const std::string& id = string_field(block, "id", at);
      const std::string& name = string_field(block, "name", at);
      auto input = block.find("input");
      if (input == block.end() || !input->is_object()) {
        refuse(at + ".input", invalid_argument("a tool_use block's 'input' must be an object"));
      }
      (*tool_names)[id] = name;
      tool_calls.push_back(json{{"id", id},
                                {"type", "function"},
                                {"function", {{"name", name}, {"arguments", input->dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      const std::string& id = string_field(block, "tool_use_id", at);
      json tool{{"role", "tool"}, {"tool_call_id", id}};
      if (auto n = tool_names->find(id); n != tool_names->end()) tool["name"] = n->second;
      std::string result = tool_result_text(block, at);
      // Chat templates have no error flag for a tool message: the text says it.
      if (auto e = block.find("is_error"); e != block.end() && !e->is_null()) {
        if (!e->is_boolean()) refuse(at + ".is_error", invalid_argument("must be a boolean"));
        if (e->get<bool>()) result = "Error: " + result;
      }
      tool["content"] = std::move(result);
      messages->push_back(std::move(tool));
    } else {
      unsupported_block(type, at,
                        role == "user" ? "user turns may hold text and tool_result blocks"
                                       : "assistant turns may hold text and tool_use blocks");
    }
  }
  if (!tool_calls.empty()) {
    // Empty text rather than null: every template can print an empty string.
    json msg{{"role", role}, {"content", text}};
    msg["tool_calls"] = std::move(tool_calls);
    messages->push_back(std::move(msg));
  } else if (!text.empty() || content->empty()) {
    messages->push_back(json{{"role", role}, {"content", text}});
  }
}

std::string system_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) {
    refuse("system", invalid_argument("'system' must be a string or a list of text blocks"));
  }
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string at = fmt::format("system[{}]", i);
    const std::string type = block_type(v[i], at);
    if (type != "text") unsupported_block(type, at, "the system prompt holds text blocks only");
    out += text_block(v[i], at);
  }
  return out;
}

json tools_json(const json& v) {
  if (!v.is_array()) refuse("tools", invalid_argument("'tools' must be a list"));
  json out = json::array();
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!t.is_object()) refuse(at, invalid_argument("each tool must be an object"));
    if (auto type = t.find("type"); type != t.end() && *type != "custom") {
      refuse(at + ".type", not_supported("server tools ({}) are not supported; only client tools "
                                         "with name, description and input_schema are",
                                         type->dump()));
    }
    only_keys(t, {"type", "name", "description", "input_schema", "cache_control"}, at, "a tool");
    const std::string& name = string_field(t, "name", at);
    if (name.empty()) refuse(at + ".name", invalid_argument("a tool's 'name' must not be empty"));
    json fn{{"name", name}};
    if (t.contains("description")) fn["description"] = string_field(t, "description", at);
    auto schema = t.find("input_schema");
    if (schema == t.end() || !schema->is_object()) {
      refuse(at + ".input_schema", invalid_argument("a tool's 'input_schema' (a JSON schema "
                                                    "object) is required"));
    }
    fn["parameters"] = *schema;
    out.push_back(json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

std::string tool_choice(const json& v) {
  const auto* type = v.is_object() ? &v : nullptr;
  auto t = type ? v.find("type") : v.end();
  if (type == nullptr || t == v.end() || !t->is_string()) {
    refuse("tool_choice", invalid_argument("'tool_choice' must be an object with a 'type'"));
  }
  only_keys(v, {"type", "name", "disable_parallel_tool_use"}, "tool_choice", "tool_choice");
  if (auto d = v.find("disable_parallel_tool_use"); d != v.end() && !d->is_null()) {
    if (!d->is_boolean()) {
      refuse("tool_choice.disable_parallel_tool_use", invalid_argument("must be a boolean"));
    }
    if (d->get<bool>()) {
      refuse("tool_choice.disable_parallel_tool_use",
             not_supported("limiting a reply to one tool call is not supported: the model may "
                           "call several; leave it out or set it to false"));
    }
  }
  if (*t == "auto") return "auto";
  if (*t == "none") return "none";
  refuse("tool_choice.type",
         not_supported("tool_choice {} is not supported: \"auto\" and \"none\" are (forcing a tool "
                       "needs constrained decoding, which cellm does not implement yet)",
                       t->dump()));
}

double number_in(const json& body, const char* key, double lo, double hi) {
  const json& v = body[key];
  if (!v.is_number()) refuse(key, invalid_argument("'{}' must be a number", key));
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi)) {
    refuse(key, invalid_argument("'{}' must be between {} and {}", key, lo, hi));
  }
  return d;
}

AnthropicRequest translate(const json& body) {
  only_keys(body,
            {"model", "max_tokens", "messages", "system", "temperature", "top_p", "top_k",
             "stop_sequences", "stream", "metadata", "tools", "tool_choice", "thinking"},
            "", "a /v1/messages request");
  AnthropicRequest out;
  json& chat = out.chat;
  chat = json::object();

  auto model = body.find("model");
  if (model == body.end() || !model->is_string()) {
    refuse("model", invalid_argument("'model' (a string) is required"));
  }
  chat["model"] = *model;

  auto max_tokens = body.find("max_tokens");
  if (max_tokens == body.end()) {
    refuse("max_tokens", invalid_argument("'max_tokens' is required: the most tokens to "
                                          "generate, an integer of at least 1"));
  }
  if (!max_tokens->is_number_integer() || max_tokens->get<std::int64_t>() < 1 ||
      max_tokens->get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
    refuse("max_tokens", invalid_argument("'max_tokens' must be an integer of at least 1"));
  }
  chat["max_tokens"] = *max_tokens;

  json messages = json::array();
  if (auto system = body.find("system"); system != body.end()) {
    std::string text = system_text(*system);
    if (!text.empty()) messages.push_back(json{{"role", "system"}, {"content", std::move(text)}});
  }
  auto turns = body.find("messages");
  if (turns == body.end() || !turns->is_array() || turns->empty()) {
    refuse("messages", invalid_argument("'messages' must be a non-empty list of turns"));
  }
  std::map<std::string, std::string> tool_names;  // tool_use id → name, for tool messages
  for (std::size_t i = 0; i < turns->size(); ++i) add_turn((*turns)[i], i, &tool_names, &messages);
  // Anthropic continues a final assistant turn (prefill); the chat path
  // would close it and open a new one, so it is refused rather than misread.
  if (messages.back().value("role", "") == "assistant") {
    refuse(fmt::format("messages[{}]", turns->size() - 1),
           not_supported("a final assistant turn (prefilling the answer) is not supported yet; "
                         "end the conversation with a user turn"));
  }
  chat["messages"] = std::move(messages);

  // Anthropic's ranges: temperature 0..1 (the chat path allows up to 2).
  if (body.contains("temperature")) chat["temperature"] = number_in(body, "temperature", 0, 1);
  if (body.contains("top_p")) chat["top_p"] = number_in(body, "top_p", 0, 1);
  if (auto k = body.find("top_k"); k != body.end()) {
    if (!k->is_number_integer() || k->get<std::int64_t>() < 0 ||
        k->get<std::int64_t>() > std::numeric_limits<std::int32_t>::max()) {
      refuse("top_k", invalid_argument("'top_k' must be a non-negative integer"));
    }
    chat["top_k"] = *k;
  }
  if (auto s = body.find("stop_sequences"); s != body.end()) {
    if (!s->is_array()) {
      refuse("stop_sequences", invalid_argument("'stop_sequences' must be a list of strings"));
    }
    for (const json& x : *s) {
      if (!x.is_string()) {
        refuse("stop_sequences", invalid_argument("'stop_sequences' entries must be strings"));
      }
      out.stop_sequences.push_back(x.get<std::string>());
    }
    if (!out.stop_sequences.empty()) chat["stop"] = *s;
  }
  if (auto s = body.find("stream"); s != body.end()) {
    if (!s->is_boolean()) refuse("stream", invalid_argument("'stream' must be a boolean"));
    out.stream = s->get<bool>();
  }
  chat["stream"] = out.stream;
  // The final usage chunk feeds message_delta's output_tokens.
  if (out.stream) chat["stream_options"] = json{{"include_usage", true}};
  // Extended thinking is accepted only switched off (its neutral value).
  if (auto t = body.find("thinking"); t != body.end() && !t->is_null()) {
    if (!t->is_object() || t->value("type", "") != "disabled") {
      refuse("thinking", not_supported("extended thinking is not supported; leave 'thinking' out "
                                       "or send {{\"type\": \"disabled\"}}"));
    }
  }
  if (auto m = body.find("metadata"); m != body.end() && !m->is_object() && !m->is_null()) {
    refuse("metadata", invalid_argument("'metadata' must be an object"));
  }
  if (auto t = body.find("tools"); t != body.end()) {
    json tools = tools_json(*t);
    if (!tools.empty()) chat["tools"] = std::move(tools);
  }
  if (auto c = body.find("tool_choice"); c != body.end()) {
    const std::string choice = tool_choice(*c);
    if (chat.contains("tools")) chat["tool_choice"] = choice;
  }
  return out;
}

}  // namespace

std::optional<AnthropicRequest> parse_anthropic_request(std::string_view body,
                                                        RequestError* error) {
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    error->param.clear();
    error->status = doc.is_discarded() ? invalid_argument("the request body is not valid JSON")
                                       : invalid_argument("the request body must be a JSON object");
    return std::nullopt;
  }
  try {
    return translate(doc);
  } catch (Refusal& r) {
    error->param = std::move(r.param);
    error->status = std::move(r.status);
    return std::nullopt;
  }
}

std::string anthropic_param_name(std::string_view openai_param) {
  if (openai_param == "stop") return "stop_sequences";
  if (openai_param == "max_completion_tokens") return "max_tokens";
  return std::string(openai_param);
}

}  // namespace cellm::server
