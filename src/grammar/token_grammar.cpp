#include "grammar/token_grammar.h"

#include <algorithm>
#include <array>
#include <utility>

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

// The simple nodes a simple node moves to, each once.
std::vector<NodeId> simple_moves(const Grammar& g, NodeId n) {
  std::vector<NodeId> out;
  for (int b = 0; b < 256; ++b) {
    const std::int32_t t = g.next(n, static_cast<std::uint8_t>(b));
    if (t < 0 || !g.node(static_cast<NodeId>(t)).simple) continue;
    if (std::find(out.begin(), out.end(), static_cast<NodeId>(t)) == out.end())
      out.push_back(static_cast<NodeId>(t));
  }
  return out;
}

// Whether two bytes take simple node `n` to one node: a character class
// (the rest of a UTF-8 character, the byte after a backslash), not a
// literal. Bytes of one target are mostly adjacent, so the scan keeps the
// last target and looks further back only on a change.
bool wide_out(const Grammar& g, NodeId n) {
  std::vector<std::int32_t> seen;
  std::int32_t last = kNoByte;
  for (int b = 0; b < 256; ++b) {
    const std::int32_t t = g.next(n, static_cast<std::uint8_t>(b));
    if (t < 0) continue;
    if (t == last || std::find(seen.begin(), seen.end(), t) != seen.end()) return true;
    seen.push_back(t);
    last = t;
  }
  return false;
}

// Tarjan's strongly connected components over simple nodes and their
// byte moves, iterative (a long literal would nest deeply). A component of
// one node counts only with a move to itself.
std::vector<std::int32_t> simple_regions(const Grammar& g) {
  const std::size_t n = g.nodes().size();
  std::vector<std::int32_t> comp(n, -1), index(n, -1), low(n, 0);
  std::vector<std::uint8_t> on_stack(n, 0);
  std::vector<NodeId> stack;
  std::vector<std::vector<NodeId>> moves(n);
  std::int32_t next_index = 0, next_comp = 0;
  struct Frame {
    NodeId v;
    std::size_t k;
  };
  std::vector<Frame> calls;
  for (NodeId root = 0; root < n; ++root) {
    if (!g.node(root).simple || index[root] >= 0) continue;
    calls.push_back({root, 0});
    while (!calls.empty()) {
      Frame& f = calls.back();
      const NodeId v = f.v;
      if (f.k == 0 && index[v] < 0) {
        index[v] = low[v] = next_index++;
        stack.push_back(v);
        on_stack[v] = 1;
        moves[v] = simple_moves(g, v);
      }
      if (f.k < moves[v].size()) {
        const NodeId w = moves[v][f.k++];
        if (index[w] < 0) {
          calls.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        std::vector<NodeId> members;
        NodeId w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = 0;
          members.push_back(w);
        } while (w != v);
        const bool loops =
            members.size() > 1 || std::find(moves[v].begin(), moves[v].end(), v) != moves[v].end();
        if (loops) {
          for (NodeId m : members) comp[m] = next_comp;
          ++next_comp;
        }
      }
      calls.pop_back();
      if (!calls.empty()) low[calls.back().v] = std::min(low[calls.back().v], low[v]);
    }
  }
  return comp;
}

}  // namespace

std::shared_ptr<const TokenGrammar::RegionPlan> TokenGrammar::plan(NodeId n) const {
  {
    std::lock_guard lock(mu_);
    if (planned_[n]) return plans_[n];
  }
  std::shared_ptr<const RegionPlan> p = build_plan(n);
  std::lock_guard lock(mu_);
  if (!planned_[n]) {
    planned_[n] = 1;
    // Past the budget a node gets no plan (its misses take the walk).
    const std::size_t bytes = p ? p->nodes.size() * sizeof(NodeId) : 0;
    if (plan_bytes_ + bytes <= kPlanBytes) {
      plan_bytes_ += bytes;
      plans_[n] = std::move(p);
    }
  }
  return plans_[n];
}

std::shared_ptr<const TokenGrammar::RegionPlan> TokenGrammar::build_plan(NodeId n) const {
  const Grammar& g = *grammar_;
  if (!g.node(n).simple) return nullptr;
  // The region: simple nodes reached from n by moves that stay in a cycle
  // of simple nodes (a string body), that several bytes take (a character
  // class: the next position of a bounded string) or that reach a node
  // several bytes leave alike (the middle of a UTF-8 character, an escape),
  // up to kRegionHorizon bytes away. Any other move leaves (a literal byte:
  // a closing quote, a key); so does every move of a node at the horizon
  // (a longer token is walked from there). Which
  // moves leave decides only what is shared and what is walked, never the
  // mask. Numbered breadth-first from n, moves in byte order, the key
  // depends on the region's shape alone.
  auto plan = std::make_shared<RegionPlan>();
  std::vector<NodeId>& nodes = plan->nodes;
  std::vector<std::uint32_t> dist{0};
  std::vector<std::int16_t> local(g.nodes().size(), -1);  // region number of a grammar node
  local[n] = 0;
  nodes.push_back(n);
  std::vector<std::int16_t> runs;  // the key: (move, bytes in a row) pairs
  bool internal = false;
  const std::uint32_t horizon = std::min(vocab_->max_depth(), kRegionHorizon);
  // Per node: its distinct targets in order of their first byte (a few,
  // and bytes of one target mostly adjacent), each with its byte count and
  // then its move; the 256 moves are filled from those.
  struct Target {
    std::int32_t t;
    int bytes;
    std::int16_t move;
  };
  std::vector<Target> targets;
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const NodeId u = nodes[k];
    targets.clear();
    std::array<std::uint8_t, 256> which{};  // index into targets
    for (int b = 0; b < 256; ++b) {
      const std::int32_t t = g.next(u, static_cast<std::uint8_t>(b));
      std::size_t j = b > 0 && targets[which[b - 1]].t == t ? which[b - 1] : 0;
      if (b == 0 || targets[j].t != t) {
        j = 0;
        while (j < targets.size() && targets[j].t != t) ++j;
        if (j == targets.size()) targets.push_back({t, 0, kRegionLeave});
      }
      ++targets[j].bytes;
      which[b] = static_cast<std::uint8_t>(j);
    }
    for (Target& x : targets) {
      const std::int32_t t = x.t;
      if (t == kNoByte) {
        x.move = kRegionDead;  // a simple node has no other way to take a byte
      } else if (t >= 0 && dist[k] < horizon && g.node(static_cast<NodeId>(t)).simple) {
        const bool cycle = region_[u] >= 0 && region_[u] == region_[static_cast<std::size_t>(t)];
        if (cycle || x.bytes >= 2 || wide_[static_cast<std::size_t>(t)]) {
          std::int16_t& id = local[static_cast<std::size_t>(t)];
          if (id < 0) {
            if (nodes.size() >= kMaxRegionNodes) return nullptr;
            id = static_cast<std::int16_t>(nodes.size());
            nodes.push_back(static_cast<NodeId>(t));
            dist.push_back(dist[k] + 1);
          }
          x.move = id;
          internal = true;
        }
      }
    }
    for (int b = 0; b < 256; ++b) {
      const std::int16_t m = targets[which[b]].move;
      if (b > 0 && runs.back() < 256 && runs[runs.size() - 2] == m) {
        ++runs.back();
      } else {
        runs.push_back(m);
        runs.push_back(1);
      }
    }
  }
  if (!internal) return nullptr;
  plan->table = vocab_->region_cache().get(*vocab_, runs);
  return plan;
}

TokenGrammar::TokenGrammar(std::shared_ptr<const Grammar> grammar,
                           std::shared_ptr<const TokenVocabulary> vocab)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  const std::size_t mask_bytes = std::max<std::size_t>(1, vocab_->mask_words() * 4);
  max_entries_ = std::max<std::size_t>(16, kCacheBytes / mask_bytes);
  region_ = simple_regions(*grammar_);
  wide_.assign(grammar_->nodes().size(), 0);
  for (NodeId n = 0; n < grammar_->nodes().size(); ++n)
    wide_[n] = grammar_->node(n).simple && wide_out(*grammar_, n) ? 1 : 0;
  plans_.resize(grammar_->nodes().size());
  planned_.assign(grammar_->nodes().size(), 0);
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
  walk_mask(matcher, words);
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
