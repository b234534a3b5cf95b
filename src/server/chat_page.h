// The chat page served at "/": one self-contained HTML document (inline CSS
// and JavaScript, no outside resources) with settings, streaming with stop,
// Markdown answers, a context gauge that trims old turns to fit, an error
// banner and a fallback to plain completions for models without a chat
// template. Its sources are src/server/page/*, inlined and embedded at build
// time.
//
// Thread-safety: returns a view of constant data, valid for the program's life.
#pragma once

#include <string_view>

namespace cellm::server {

std::string_view chat_page_html();

}  // namespace cellm::server
