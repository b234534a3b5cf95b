// Chat templates: the Jinja subset that model chat templates use (Llama 3,
// Qwen3 with tools and thinking, Gemma 3, SmolLM2, ...), rendered the way
// Hugging Face transformers' apply_chat_template does. Anything outside the
// subset is refused at parse time with its line:column, never mis-rendered.
//
// Thread-safety: a parsed ChatTemplate is immutable; render() may be called
// from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cellm/status.h"
#include "chat/renderer.h"

namespace cellm::chat {

class ChatTemplate {
 public:
  // Syntax errors and unsupported constructs name line:column.
  static Result<ChatTemplate> parse(std::string_view source);

  // Renders with the context's top-level keys as template variables
  // (messages, add_generation_prompt, tools, bos_token, ...). Object key
  // order is what the json type iterates: prefer ordered_json, since
  // `tojson` and `.items()` expose it as transformers would.
  Result<std::string> render(const nlohmann::json& context, const RenderLimits& limits = {}) const;
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const RenderLimits& limits = {}) const;

 private:
  ChatTemplate() = default;
  std::shared_ptr<const Body> body_;
};

// transformers' apply_chat_template(messages, add_generation_prompt=...,
// **extra) with the tokenizer's special tokens bound: messages lose their
// null-valued keys, reasoning is aliased under reasoning_content/thinking,
// `tools` and `documents` come from `extra` (none when absent), extra
// variables override special tokens. `continue_final_message` is not
// supported.
Result<std::string> apply_chat_template(const ChatTemplate& tmpl,
                                        const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra,
                                        const nlohmann::ordered_json& special_tokens,
                                        const RenderLimits& limits = {});

}  // namespace cellm::chat
