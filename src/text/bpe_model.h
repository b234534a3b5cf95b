// The BPE model of a tokenizer: vocabulary, merge ranks, byte fallback and
// unknown-token handling, and the per-word cache that makes repeated words
// cheap. Both tokenizer.json merges lists and SentencePiece scores (GGUF
// `llama`) are turned into one table of ranked pair merges, so there is a
// single merge loop (lowest rank first, then leftmost, as HF does).
//
// Thread-safety: immutable after build(); encode_word is safe from many
// threads (the cache is sharded behind mutexes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cellm/status.h"
#include "text/word_cache.h"

namespace cellm::text {

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;  // a word found whole in the vocabulary skips merging
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
};

class BpeModel {
 public:
  // `tokens[id]` is the token text (empty string for an unused id).
  // `merges` are pairs of token texts in rank order.
  static Result<std::unique_ptr<BpeModel>> from_merges(
      std::vector<std::string> tokens,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);
  // SentencePiece BPE: a pair merges when its concatenation is a token; the
  // higher the merged token's score, the earlier. Only tokens whose
  // `mergeable` entry is true (normal text pieces) can result from a merge;
  // an empty `mergeable` means all.
  static Result<std::unique_ptr<BpeModel>> from_scores(std::vector<std::string> tokens,
                                                       const std::vector<float>& scores,
                                                       const std::vector<bool>& mergeable,
                                                       BpeOptions options);

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  BpeModel(std::vector<std::string> tokens, BpeOptions options);
  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const;
  void encode_uncached(std::string_view word, std::vector<std::int32_t>& out) const;
  void encode_part(std::string_view part, std::vector<std::int32_t>& out) const;
  void find_spanning_tokens();
  bool can_cut_before(std::string_view word, std::size_t p) const;
  std::int32_t byte_token(unsigned char b) const { return byte_tokens_[b]; }

  struct Merge {
    std::uint32_t rank;
    std::int32_t new_id;
  };
  struct StringHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };

  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>> vocab_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  BpeOptions options_;
  std::int32_t unk_id_ = -1;
  std::int32_t byte_tokens_[256];  // <0xXX> ids for byte fallback, -1 if absent
  // Tokens with a ▁ after another character, with that ▁'s offset: words
  // may be cut before a ▁ unless one of these spans the cut.
  std::vector<std::pair<std::string, std::size_t>> spanning_;
  bool cut_at_bar_ = false;

  static constexpr std::size_t kCacheMaxWord = WordCache::kMaxWordBytes;
  WordCache cache_;
};

}  // namespace cellm::text
