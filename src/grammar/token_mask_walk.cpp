// TokenGrammar::walk_mask: the fast walk of the vocabulary trie (see
// token_grammar.h). It visits the trie in the same preorder as
// compute_mask() and keeps, per depth, either one item (the common case in
// JSON: the grammar is deterministic) or an item list; only the list case
// and non-simple nodes go through Matcher::step, whose result the one-item
// shortcut reproduces exactly (Matcher::step takes the same shortcut).
#include <algorithm>

#include "grammar/token_grammar.h"

namespace cellm::grammar {
namespace {

// The items at one depth of the walk: `one` alone, or the list `many`.
struct Level {
  Item one;
  bool single = false;
  std::vector<Item> many;
};

struct Walk {
  const Grammar& g;
  std::span<const TokenVocabulary::TrieNode> trie;
  std::span<const std::uint32_t> tokens;
  Matcher& matcher;
  std::vector<Level>& levels;
  std::uint32_t* words;
  std::size_t nwords;

  void allow(std::uint32_t id) const {
    if (id / 32 < nwords) words[id / 32] |= 1u << (id % 32);
  }

  // Trie nodes [i, end), a whole subtree or the root's children, from the
  // level above the first one.
  void run(std::size_t i, const std::size_t end) const {
    while (i < end) {
      const TokenVocabulary::TrieNode& node = trie[i];
      const Level& up = levels[node.depth - 1];
      Level& here = levels[node.depth];
      std::span<const Item> from;
      if (up.single) {
        if (g.node(up.one.node).simple) {
          const std::int32_t t = g.next(up.one.node, node.byte);
          if (t == kNoByte) {
            i = node.end;
            continue;
          }
          if (t >= 0) {
            here.one = Item{static_cast<NodeId>(t), up.one.frame};
            here.single = true;
            for (std::uint32_t k = 0; k < node.token_count; ++k)
              allow(tokens[node.first_token + k]);
            ++i;
            continue;
          }
        }
        from = std::span<const Item>(&up.one, 1);
      } else {
        from = up.many;
      }
      matcher.step(from, node.byte, here.many);
      if (here.many.empty()) {
        i = node.end;
        continue;
      }
      here.single = here.many.size() == 1;
      if (here.single) here.one = here.many[0];
      for (std::uint32_t k = 0; k < node.token_count; ++k) allow(tokens[node.first_token + k]);
      ++i;
    }
  }
};

}  // namespace

void TokenGrammar::walk_mask(Matcher& matcher, std::span<std::uint32_t> words) const {
  const TokenVocabulary& vocab = *vocab_;
  // One level per depth, reused across calls of this thread (no allocation
  // once the lists have grown).
  thread_local std::vector<Level> levels;
  if (levels.size() < vocab.max_depth() + 1) levels.resize(vocab.max_depth() + 1);
  const Walk walk{*grammar_, vocab.trie(), vocab.trie_tokens(), matcher,
                  levels,    words.data(), words.size()};
  const std::vector<Item>& start = matcher.items();
  if (start.size() == 1 && grammar_->node(start[0].node).simple) {
    if (const std::shared_ptr<const RegionPlan> p = plan(start[0].node)) {
      // Inside the region: the table. Where tokens leave it: the walk, from
      // the item the table says the leaving byte's parent is at.
      const std::vector<std::uint32_t>& inside = p->table->inside;
      const std::size_t n = std::min(inside.size(), words.size());
      std::copy_n(inside.begin(), n, words.begin());
      std::fill(words.begin() + static_cast<std::ptrdiff_t>(n), words.end(), 0u);
      const std::span<const TokenVocabulary::TrieNode> trie = vocab.trie();
      for (const auto& [x, s] : p->table->leaves) {
        Level& up = levels[trie[x].depth - 1];
        up.one = Item{p->nodes[s], start[0].frame};
        up.single = true;
        walk.run(x, trie[x].end);
      }
      return;
    }
  }
  std::fill(words.begin(), words.end(), 0u);
  if (start.size() == 1) {
    levels[0].one = start[0];
    levels[0].single = true;
  } else {
    levels[0].many.assign(start.begin(), start.end());
    levels[0].single = false;
  }
  walk.run(1, vocab.trie().size());
}

}  // namespace cellm::grammar
