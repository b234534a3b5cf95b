#include "grammar/token_vocab.h"

#include <algorithm>
#include <numeric>

#include "grammar/region_table.h"

namespace cellm::grammar {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::create(
    std::vector<std::string> token_bytes) {
  auto v = std::shared_ptr<TokenVocabulary>(new TokenVocabulary());
  v->bytes_ = std::move(token_bytes);
  v->regions_ = std::make_shared<RegionCache>();
  const std::vector<std::string>& b = v->bytes_;
  std::vector<std::uint32_t> ids;
  for (std::uint32_t id = 0; id < b.size(); ++id) {
    if (!b[id].empty()) ids.push_back(id);
  }
  // Sorted by bytes, ties by id: a preorder walk meets them in this order.
  std::sort(ids.begin(), ids.end(), [&](std::uint32_t x, std::uint32_t y) {
    const int c = b[x].compare(b[y]);
    return c != 0 ? c < 0 : x < y;
  });
  v->tokens_ = ids;
  std::vector<TrieNode>& trie = v->trie_;
  trie.push_back(TrieNode{});
  std::vector<std::uint32_t> path{0};  // path[d]: the node at depth d
  const std::string* prev = nullptr;
  for (std::uint32_t k = 0; k < ids.size(); ++k) {
    const std::string& s = b[ids[k]];
    std::size_t common = 0;
    if (prev != nullptr) {
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    }
    // Close the nodes below the shared prefix.
    while (path.size() > common + 1) {
      trie[path.back()].end = static_cast<std::uint32_t>(trie.size());
      path.pop_back();
    }
    for (std::size_t d = common; d < s.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<std::uint8_t>(s[d]);
      node.depth = static_cast<std::uint32_t>(d + 1);
      node.first_token = k;
      path.push_back(static_cast<std::uint32_t>(trie.size()));
      trie.push_back(node);
    }
    TrieNode& last = trie[path.back()];
    if (last.token_count == 0) last.first_token = k;
    ++last.token_count;
    v->max_depth_ = std::max(v->max_depth_, static_cast<std::uint32_t>(s.size()));
    prev = &s;
  }
  while (!path.empty()) {
    trie[path.back()].end = static_cast<std::uint32_t>(trie.size());
    path.pop_back();
  }
  // Level order: nodes by depth, preorder within a depth.
  const std::size_t n = trie.size();
  std::vector<std::uint32_t> pre_parent(n, 0), at_depth(v->max_depth_ + 2, 0), level_of(n, 0);
  for (std::uint32_t i = 1; i < n; ++i) {
    // The node before i is its parent or lies below an earlier sibling of i.
    std::uint32_t p = i - 1;
    while (trie[p].depth >= trie[i].depth) p = pre_parent[p];
    pre_parent[i] = p;
  }
  for (std::uint32_t i = 0; i < n; ++i) ++at_depth[trie[i].depth + 1];
  for (std::size_t d = 1; d < at_depth.size(); ++d) at_depth[d] += at_depth[d - 1];
  v->level_pre_.assign(n, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    level_of[i] = at_depth[trie[i].depth]++;
    v->level_pre_[level_of[i]] = i;
  }
  v->level_parent_.assign(n, 0);
  v->level_byte_.assign(n, 0);
  for (std::uint32_t i = 1; i < n; ++i) {
    v->level_parent_[level_of[i]] = level_of[pre_parent[i]];
    v->level_byte_[level_of[i]] = trie[i].byte;
  }
  v->token_node_.assign(b.size(), kNoNode);
  for (std::uint32_t i = 1; i < n; ++i) {
    for (std::uint32_t k = 0; k < trie[i].token_count; ++k)
      v->token_node_[v->tokens_[trie[i].first_token + k]] = level_of[i];
  }
  return v;
}

}  // namespace cellm::grammar
