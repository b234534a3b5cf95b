#include "server/chat_page.h"

// The page's bytes, generated at build time from src/server/page/ by
// page/embed_page.cmake (see src/server/CMakeLists.txt).
#include "server/chat_page_data.inc"

namespace cellm::server {

std::string_view chat_page_html() {
  // Character access to the bytes of an unsigned char array is allowed.
  return {reinterpret_cast<const char*>(page::kChatPage), sizeof(page::kChatPage)};
}

}  // namespace cellm::server
