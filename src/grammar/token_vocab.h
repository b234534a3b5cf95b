// TokenVocabulary: the byte string each token id stands for in generated
// text, arranged as a trie so that a token mask can walk every token that
// shares a prefix once. Special and control tokens (and ids without text)
// have no bytes and are never allowed by a grammar.
//
// The trie is stored in preorder: node i's subtree is [i, end); a walk that
// rejects node i skips to `end`.
//
// Thread-safety: immutable after create() but for region_cache(), which
// guards itself with a mutex; share freely.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cellm/types.h"

namespace cellm::grammar {

class RegionCache;

class TokenVocabulary {
 public:
  struct TrieNode {
    std::uint8_t byte = 0;
    std::uint32_t depth = 0;        // bytes from the root (the root is 0)
    std::uint32_t end = 0;          // one past the subtree
    std::uint32_t first_token = 0;  // into trie_tokens()
    std::uint32_t token_count = 0;  // tokens whose bytes end here
  };

  // token_bytes[id]: the id's bytes; empty: never allowed.
  static std::shared_ptr<const TokenVocabulary> create(std::vector<std::string> token_bytes);

  std::int64_t size() const { return static_cast<std::int64_t>(bytes_.size()); }
  // Empty for ids without text (and ids outside the vocabulary).
  const std::string& bytes(Token id) const {
    static const std::string kNone;
    return id < bytes_.size() ? bytes_[static_cast<std::size_t>(id)] : kNone;
  }
  std::span<const TrieNode> trie() const { return trie_; }
  std::span<const std::uint32_t> trie_tokens() const { return tokens_; }
  std::uint32_t max_depth() const { return max_depth_; }
  // 32-bit words a mask over this vocabulary takes.
  std::size_t mask_words() const { return (bytes_.size() + 31) / 32; }
  // The trie again in level order (every node after its parent), for walks
  // that step every node at once (RegionTable::build): per node its
  // parent's level index, its byte and its preorder index; per token id the
  // level index of its node (kNoNode for ids without bytes). 13 bytes a node
  // and 4 a token: about 9 MiB for Gemma 3.
  static constexpr std::uint32_t kNoNode = ~std::uint32_t{0};
  std::span<const std::uint32_t> level_parent() const { return level_parent_; }
  std::span<const std::uint8_t> level_byte() const { return level_byte_; }
  std::span<const std::uint32_t> level_preorder() const { return level_pre_; }
  std::span<const std::uint32_t> token_level_node() const { return token_node_; }
  // Tables of token masks inside grammar regions (region_table.h), shared by
  // every grammar over this vocabulary.
  RegionCache& region_cache() const { return *regions_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<TrieNode> trie_;
  std::vector<std::uint32_t> tokens_;
  std::uint32_t max_depth_ = 0;
  std::vector<std::uint32_t> level_parent_, level_pre_, token_node_;
  std::vector<std::uint8_t> level_byte_;
  std::shared_ptr<RegionCache> regions_;
};

}  // namespace cellm::grammar
