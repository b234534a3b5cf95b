// Unicode Normalization Form C (canonical decomposition, canonical ordering,
// canonical composition) for the NFC normalizer of tokenizer.json (Qwen).
// Tables come from gen_nfc_tables.py (Unicode 14); Hangul is algorithmic.
//
// Thread-safety: pure function; the tables are built once, thread-safely.
#pragma once

#include <string>
#include <string_view>

namespace cellm::text {

// NFC of valid UTF-8 `s` (invalid bytes must have been repaired before).
std::string nfc_normalize(std::string_view s);

}  // namespace cellm::text
