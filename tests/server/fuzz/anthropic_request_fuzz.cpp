// Fuzz target: arbitrary bytes as /v1/messages bodies. The translation must
// accept or refuse with a message, never crash or hang, and what it accepts
// goes through the chat parser as the endpoint does (which may still refuse,
// but must say why).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/anthropic_request.h"
#include "server/anthropic_response.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  cellm::server::RequestError error;
  auto translated = cellm::server::parse_anthropic_request(body, &error);
  if (!translated) {
    if (error.status.is_ok()) __builtin_trap();  // a refusal must say why
    (void)cellm::server::anthropic_error(error.status, error.param);
    return 0;
  }
  const std::string chat = translated->chat.dump();
  cellm::server::RequestError chat_error;
  auto req = cellm::server::parse_request(cellm::server::RequestKind::kChat, chat,
                                          cellm::server::RequestLimits{}, &chat_error);
  if (!req && chat_error.status.is_ok()) __builtin_trap();
  return 0;
}
