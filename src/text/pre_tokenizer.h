// Pre-tokenizers of the tokenizer.json pipeline: they cut one normalized
// segment into the words the model encodes one at a time (Split with a regex
// or a literal, ByteLevel, Metaspace, Whitespace, WhitespaceSplit, Digits,
// Sequence).
//
// Thread-safety: immutable after construction; split() is const and safe from
// many threads.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/regex.h"

namespace cellm::text {

// What Split does with the matched delimiters (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Where Metaspace puts its replacement character in front of a segment.
enum class PrependScheme { kAlways, kFirst, kNever };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Rewrites `words` in place. `first_segment` is true for the text that
  // starts the input (Metaspace's "first" prepend scheme needs it).
  virtual void split(std::vector<std::string>& words, bool first_segment) const = 0;
};

std::unique_ptr<PreTokenizer> make_split_pre_tokenizer(std::string literal,
                                                       std::optional<Regex> regex,
                                                       SplitBehavior behavior, bool invert);
// Maps every byte to its printable stand-in (GPT-2 byte-to-unicode table);
// with `use_regex` first splits with the GPT-2 pattern.
Result<std::unique_ptr<PreTokenizer>> make_byte_level_pre_tokenizer(bool add_prefix_space,
                                                                    bool use_regex);
std::unique_ptr<PreTokenizer> make_metaspace_pre_tokenizer(std::string replacement,
                                                           PrependScheme scheme, bool split);
Result<std::unique_ptr<PreTokenizer>> make_whitespace_pre_tokenizer();
std::unique_ptr<PreTokenizer> make_whitespace_split_pre_tokenizer();
std::unique_ptr<PreTokenizer> make_digits_pre_tokenizer(bool individual);
std::unique_ptr<PreTokenizer> make_sequence_pre_tokenizer(
    std::vector<std::unique_ptr<PreTokenizer>> steps);

// The GPT-2 byte-to-unicode table: the UTF-8 text standing for byte b.
const std::string& byte_level_char(unsigned char b);
// Inverse of the table: the byte a code point stands for, or -1.
int byte_level_byte(char32_t cp);

// The regex GPT-2 (and the ByteLevel pre-tokenizer with use_regex) splits with.
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace cellm::text
