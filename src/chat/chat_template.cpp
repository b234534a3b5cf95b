#include "chat/chat_template.h"

#include "chat/json_value.h"
#include "chat/lexer.h"
#include "chat/parser.h"

namespace cellm::chat {
namespace {

template <typename Json>
Result<std::vector<std::pair<std::string, Value>>> context_vars(const Json& context) {
  if (!context.is_object()) {
    return invalid_argument("chat template context must be a JSON object, got {}",
                            context.type_name());
  }
  std::vector<std::pair<std::string, Value>> vars;
  for (auto it = context.begin(); it != context.end(); ++it) {
    CELLM_ASSIGN_OR_RETURN(Value v, value_from_json(it.value(), it.key()));
    vars.emplace_back(it.key(), std::move(v));
  }
  return vars;
}

constexpr std::string_view kReasoningFields[] = {"reasoning_content", "thinking", "reasoning"};

// One message as transformers hands it to the template.
Result<nlohmann::ordered_json> normalize_message(const nlohmann::ordered_json& m,
                                                 std::size_t index) {
  if (!m.is_object()) {
    return invalid_argument("messages[{}] must be an object, got {}", index, m.type_name());
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it.value().is_null()) out[it.key()] = it.value();
  }
  const nlohmann::ordered_json* reasoning = nullptr;
  for (std::string_view field : kReasoningFields) {
    auto it = out.find(std::string(field));
    if (it != out.end()) {
      reasoning = &*it;
      break;
    }
  }
  if (reasoning == nullptr) return out;
  const nlohmann::ordered_json r = *reasoning;
  nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
  aliased["thinking"] = r;
  for (auto it = out.begin(); it != out.end(); ++it) aliased[it.key()] = it.value();
  aliased["reasoning_content"] = r;
  return aliased;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  CELLM_ASSIGN_OR_RETURN(std::vector<Token> tokens, lex_template(source));
  CELLM_ASSIGN_OR_RETURN(Body body, parse_template(std::move(tokens)));
  ChatTemplate t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context,
                                         const RenderLimits& limits) const {
  CELLM_ASSIGN_OR_RETURN(auto vars, context_vars(context));
  Renderer renderer(limits, std::move(vars));
  return renderer.render(*body_);
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         const RenderLimits& limits) const {
  CELLM_ASSIGN_OR_RETURN(auto vars, context_vars(context));
  Renderer renderer(limits, std::move(vars));
  return renderer.render(*body_);
}

Result<std::string> apply_chat_template(const ChatTemplate& tmpl,
                                        const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra,
                                        const nlohmann::ordered_json& special_tokens,
                                        const RenderLimits& limits) {
  if (!messages.is_array()) return invalid_argument("messages must be a JSON array");
  if (!extra.is_null() && !extra.is_object())
    return invalid_argument("extra template variables must be a JSON object");
  if (!special_tokens.is_null() && !special_tokens.is_object()) {
    return invalid_argument("special tokens must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  nlohmann::ordered_json chat = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    CELLM_ASSIGN_OR_RETURN(nlohmann::ordered_json m, normalize_message(messages[i], i));
    chat.push_back(std::move(m));
  }
  context["messages"] = std::move(chat);
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  if (special_tokens.is_object()) {
    for (auto it = special_tokens.begin(); it != special_tokens.end(); ++it) {
      if (!it.value().is_null()) context[it.key()] = it.value();
    }
  }
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() == "messages" || it.key() == "add_generation_prompt") {
        return invalid_argument("'{}' cannot be passed as an extra template variable", it.key());
      }
      if (it.key() == "tools" && !it.value().is_null()) {
        if (!it.value().is_array())
          return invalid_argument("tools must be a JSON array of tool schemas");
        for (const auto& tool : it.value()) {
          if (!tool.is_object()) return invalid_argument("each tool must be a JSON schema object");
        }
      }
      context[it.key()] = it.value();
    }
  }
  return tmpl.render(context, limits);
}

}  // namespace cellm::chat
