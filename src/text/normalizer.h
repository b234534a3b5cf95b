// Normalizers of the tokenizer.json pipeline (NFC, Replace, Prepend, Strip,
// Sequence): they rewrite the text of one segment between added tokens before
// pre-tokenization. Offsets are not tracked; cellm needs ids, not alignments.
//
// Thread-safety: immutable after construction; normalize() is const and
// safe from many threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/regex.h"

namespace cellm::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

std::unique_ptr<Normalizer> make_nfc_normalizer();
// Replaces every occurrence of `literal` (or every match of `regex` when set).
std::unique_ptr<Normalizer> make_replace_normalizer(std::string literal, std::optional<Regex> regex,
                                                    std::string content);
// Puts `prefix` before non-empty text.
std::unique_ptr<Normalizer> make_prepend_normalizer(std::string prefix);
// Removes Unicode whitespace from the left and/or right end.
std::unique_ptr<Normalizer> make_strip_normalizer(bool left, bool right);
std::unique_ptr<Normalizer> make_sequence_normalizer(
    std::vector<std::unique_ptr<Normalizer>> steps);

// Shared by normalizers, pre-tokenizers and decoders: every non-overlapping
// occurrence of `from` in `s` replaced by `to` (empty `from`: no change).
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);
// Unicode White_Space.
bool is_unicode_space(char32_t cp);

}  // namespace cellm::text
