// Fuzz target: arbitrary bytes as completion and chat request bodies. The
// parser must accept or refuse with a message, never crash or hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  cellm::server::RequestLimits limits;
  cellm::server::RequestError error;
  for (auto kind : {cellm::server::RequestKind::kCompletion, cellm::server::RequestKind::kChat}) {
    auto req = cellm::server::parse_request(kind, body, limits, &error);
    if (!req && error.status.is_ok()) __builtin_trap();  // a refusal must say why
  }
  return 0;
}
