#include "grammar/region_table.h"

#include <cstring>

namespace cellm::grammar {

RegionTable RegionTable::build(const TokenVocabulary& vocab,
                               const std::vector<std::int16_t>& moves) {
  RegionTable t;
  t.inside.assign(vocab.mask_words(), 0u);
  const std::span<const TokenVocabulary::TrieNode> trie = vocab.trie();
  const std::span<const std::uint32_t> tokens = vocab.trie_tokens();
  std::vector<std::int16_t> state(vocab.max_depth() + 1, 0);  // per depth; the root is node 0
  std::size_t i = 1;
  while (i < trie.size()) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const std::int16_t from = state[node.depth - 1];
    const std::int16_t to = moves[static_cast<std::size_t>(from) * 256 + node.byte];
    if (to == kRegionDead) {
      i = node.end;
      continue;
    }
    if (to == kRegionLeave) {
      t.leaves.emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(from));
      i = node.end;
      continue;
    }
    state[node.depth] = to;
    for (std::uint32_t k = 0; k < node.token_count; ++k) {
      const std::uint32_t id = tokens[node.first_token + k];
      t.inside[id / 32] |= 1u << (id % 32);
    }
    ++i;
  }
  return t;
}

std::shared_ptr<const RegionTable> RegionCache::get(const TokenVocabulary& vocab,
                                                    const std::vector<std::int16_t>& moves) {
  std::string key(moves.size() * sizeof(std::int16_t), '\0');
  std::memcpy(key.data(), moves.data(), key.size());
  {
    std::lock_guard lock(mu_);
    auto it = tables_.find(key);
    if (it != tables_.end()) return it->second;
  }
  auto table = std::make_shared<const RegionTable>(RegionTable::build(vocab, moves));
  std::lock_guard lock(mu_);
  auto [it, fresh] = tables_.try_emplace(std::move(key), table);
  if (!fresh) return it->second;
  bytes_ += table->bytes() + it->first.size();
  if (bytes_ > kMaxBytes) {
    tables_.clear();
    bytes_ = 0;
  }
  return table;
}

}  // namespace cellm::grammar
