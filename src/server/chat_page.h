// The chat page served at "/": one self-contained HTML document (inline CSS
// and JavaScript, no build step) that streams answers from
// /v1/chat/completions with fetch and parses the server-sent events itself.
//
// Thread-safety: returns a constant.
#pragma once

#include <string_view>

namespace cellm::server {

std::string_view chat_page_html();

}  // namespace cellm::server
