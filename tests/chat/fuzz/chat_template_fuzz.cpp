// Fuzz target: any bytes as a chat template. Parsing must never crash; a
// template that parses is rendered with a small fixed conversation under
// tight limits, which must not crash either.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  auto tmpl = cellm::chat::ChatTemplate::parse(source);
  if (!tmpl.ok()) return 0;
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi <tool_response>x</tool_response>"},
                 {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello",
                  "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
                 {"role": "tool", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "enable_thinking": false})");
  cellm::chat::RenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_steps = 20000;
  limits.max_call_depth = 16;
  auto out = tmpl->render(context, limits);
  (void)out;
  return 0;
}
