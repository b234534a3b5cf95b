// The parts a Tokenizer is assembled from, shared by the tokenizer.json and
// GGUF loaders. Internal to src/text.
//
// Thread-safety: built once by a loader, then read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/added_vocab.h"
#include "text/bpe_model.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer.h"
#include "text/word_cache.h"

namespace cellm::text {

struct TokenizerState {
  std::unique_ptr<Normalizer> normalizer;       // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // may be null
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added;
  std::vector<std::int32_t> prefix;  // post-processor, single sequence
  std::vector<std::int32_t> suffix;
  DecoderChain decoder;
  std::optional<std::int32_t> bos;
  std::optional<std::int32_t> eos;
  // Set when the pre-tokenizer is exactly "split with this regex (isolated),
  // then byte-level map" (Llama 3, Qwen, GPT-2): encode then skips building
  // word strings and caches ids by the raw word. pre_tokenizer stays set.
  std::optional<Regex> byte_level_split;
  std::unique_ptr<WordCache> raw_word_cache = std::make_unique<WordCache>();

  // Filled by make_tokenizer.
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized=true
  std::vector<std::string> id_text;      // id → token string ("" if unused)
  std::vector<std::uint8_t> id_flags;    // kAdded | kSpecial
  std::unordered_map<std::string, std::int32_t> added_ids;
};

inline constexpr std::uint8_t kFlagAdded = 1;
inline constexpr std::uint8_t kFlagSpecial = 2;

// Checks the parts, builds the matchers and id tables.
Result<Tokenizer> make_tokenizer(std::unique_ptr<TokenizerState> state);

}  // namespace cellm::text
