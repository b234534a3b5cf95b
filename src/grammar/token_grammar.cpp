#include "grammar/token_grammar.h"

#include <algorithm>

namespace cellm::grammar {
namespace {

class GrammarState final : public TokenConstraintState {
 public:
  explicit GrammarState(std::shared_ptr<const TokenGrammar> owner)
      : owner_(std::move(owner)), matcher_(owner_->grammar_ptr()) {}

  void fill_mask(std::span<std::uint32_t> words) override { owner_->fill_mask(matcher_, words); }
  bool accepting() const override { return matcher_.accepting(); }
  bool advance(Token token) override {
    const std::string& bytes = owner_->vocabulary().bytes(token);
    return !bytes.empty() && matcher_.advance(bytes);
  }

 private:
  std::shared_ptr<const TokenGrammar> owner_;
  Matcher matcher_;
};

}  // namespace

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> grammar,
                           std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  const std::size_t mask_bytes = std::max<std::size_t>(1, vocab_->mask_words() * 4);
  max_entries_ = std::max<std::size_t>(16, kCacheBytes / mask_bytes);
}

std::shared_ptr<const TokenGrammar> TokenGrammar::create(
    std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocabulary> vocab) {
  return std::shared_ptr<const TokenGrammar>(
      new TokenGrammar(std::move(grammar), std::move(vocab)));
}

std::unique_ptr<TokenConstraintState> TokenGrammar::start() const {
  return std::make_unique<GrammarState>(shared_from_this());
}

void TokenGrammar::compute_mask(Matcher& matcher, std::span<std::uint32_t> words) const {
  std::fill(words.begin(), words.end(), 0u);
  const std::span<const TokenVocabulary::TrieNode> trie = vocab_->trie();
  const std::span<const std::uint32_t> tokens = vocab_->trie_tokens();
  // One item set per depth, reused across calls of this thread.
  thread_local std::vector<std::vector<Item>> sets;
  if (sets.size() < vocab_->max_depth() + 1) sets.resize(vocab_->max_depth() + 1);
  sets[0].assign(matcher.items().begin(), matcher.items().end());
  std::size_t i = 1;
  while (i < trie.size()) {
    const TokenVocabulary::TrieNode& node = trie[i];
    std::vector<Item>& here = sets[node.depth];
    matcher.step(sets[node.depth - 1], node.byte, here);
    if (here.empty()) {
      i = node.end;
      continue;
    }
    for (std::uint32_t k = 0; k < node.token_count; ++k) {
      const std::uint32_t id = tokens[node.first_token + k];
      if (id / 32 < words.size()) words[id / 32] |= 1u << (id % 32);
    }
    ++i;
  }
}

void TokenGrammar::fill_mask(Matcher& matcher, std::span<std::uint32_t> words) const {
  std::string key = matcher.state_key();
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++stats_.hits;
      lru_.splice(lru_.begin(), lru_, it->second);
      const std::vector<std::uint32_t>& m = it->second->second;
      std::fill(words.begin(), words.end(), 0u);
      std::copy_n(m.begin(), std::min(m.size(), words.size()), words.begin());
      return;
    }
    ++stats_.misses;
  }
  // Computed outside the lock; two threads may both compute one state.
  compute_mask(matcher, words);
  std::lock_guard lock(mu_);
  if (cache_.contains(key)) return;
  lru_.emplace_front(key, std::vector<std::uint32_t>(words.begin(), words.end()));
  cache_.emplace(std::move(key), lru_.begin());
  while (lru_.size() > max_entries_) {
    cache_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

TokenGrammar::CacheStats TokenGrammar::cache_stats() const {
  std::lock_guard lock(mu_);
  CacheStats s = stats_;
  s.entries = cache_.size();
  return s;
}

}  // namespace cellm::grammar
