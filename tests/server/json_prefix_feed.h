// Test helper shared by the JSON-prefix and tool-stream suites: feeds a text
// to a JsonPrefixScanner byte by byte.
//
// Thread-safety: test code, one thread.
#pragma once

#include <cstddef>
#include <string>

#include "server/json_prefix.h"

namespace cellm::server {

// Feeds `text`; the number of bytes accepted before the first refusal.
inline std::size_t accepted(const std::string& text, JsonPrefixScanner* scanner) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (!scanner->push(text[i]).ok) return i;
  }
  return text.size();
}

}  // namespace cellm::server
