#include "grammar/region_table.h"

#include <cstring>

namespace cellm::grammar {

namespace {

// A preorder walk that skips the subtree of a dead or leaving node: cheaper
// than stepping every node when the region refuses most first bytes (a
// number), slower per node (each step waits on its parent's).
RegionTable build_preorder(const TokenVocabulary& vocab, const std::vector<std::int16_t>& moves) {
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
    if (to < 0) {
      if (to == kRegionLeave)
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

}  // namespace

RegionTable RegionTable::build(const TokenVocabulary& vocab,
                               const std::vector<std::int16_t>& moves) {
  // The share of the trie below first bytes the region takes decides.
  const std::span<const TokenVocabulary::TrieNode> trie = vocab.trie();
  std::size_t below = 0;
  for (std::size_t i = 1; i < trie.size(); i = trie[i].end) {
    if (moves[trie[i].byte] >= 0) below += trie[i].end - i;
  }
  if (below * 4 < trie.size()) return build_preorder(vocab, moves);
  // Every trie node's region node at once, in level order: a node's state
  // depends on its parent's alone, so the loop has no chain from one node
  // to the next (a preorder walk waits on each step). Two extra rows: `sink`
  // (dead, or below a leaving node) and `left` (the node where a token
  // leaves the region).
  // 16-bit states (kMaxRegionNodes + 2 fit) keep the table and the states
  // in cache.
  const auto rows = static_cast<std::int16_t>(moves.size() / 256);
  const auto sink = static_cast<std::int16_t>(rows), left = static_cast<std::int16_t>(rows + 1);
  std::vector<std::int16_t> table(static_cast<std::size_t>(rows + 2) * 256, sink);
  for (std::size_t k = 0; k < moves.size(); ++k) {
    const std::int16_t m = moves[k];
    table[k] = m >= 0 ? m : m == kRegionLeave ? left : sink;
  }
  const std::span<const std::uint32_t> parent = vocab.level_parent();
  const std::span<const std::uint8_t> byte = vocab.level_byte();
  const std::size_t n = parent.size();
  std::vector<std::int16_t> state(n);
  state[0] = 0;
  RegionTable t;
  for (std::size_t k = 1; k < n; ++k) {
    const std::int16_t up = state[parent[k]];
    const std::int16_t s = table[static_cast<std::size_t>(up) * 256 + byte[k]];
    state[k] = s;
    if (s == left) {
      t.leaves.emplace_back(vocab.level_preorder()[k], static_cast<std::uint32_t>(up));
    }
  }
  const std::span<const std::uint32_t> node = vocab.token_level_node();
  t.inside.assign(vocab.mask_words(), 0u);
  for (std::size_t id = 0; id < node.size(); ++id) {
    if (node[id] != TokenVocabulary::kNoNode && state[node[id]] < rows)
      t.inside[id / 32] |= 1u << (id % 32);
  }
  return t;
}

std::shared_ptr<const RegionTable> RegionCache::get(const TokenVocabulary& vocab,
                                                    const std::vector<std::int16_t>& runs) {
  std::string key(runs.size() * sizeof(std::int16_t), '\0');
  std::memcpy(key.data(), runs.data(), key.size());
  {
    std::lock_guard lock(mu_);
    auto it = tables_.find(key);
    if (it != tables_.end()) return it->second;
  }
  std::vector<std::int16_t> moves;
  for (std::size_t k = 0; k + 1 < runs.size(); k += 2)
    moves.insert(moves.end(), runs[k + 1], runs[k]);
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
