// TokenGrammar: a Grammar bound to a TokenVocabulary, the TokenConstraint the
// engine drives (include/cellm/token_constraint.h). A state's mask comes from
// a walk of the vocabulary trie against the matcher: a trie node is stepped
// with its byte from its parent's item set, a refused node skips its whole
// subtree, and every token ending at an accepted node is allowed.
//
// Masks are cached per matcher state (the items with their whole stacks, not
// frame ids), shared by every generation of the grammar: the states of JSON
// generation repeat (inside a string, after each comma of an array ...), so
// most steps are a lookup. The cache is bounded by bytes and evicts the least
// recently used mask.
//
// A miss takes walk_mask(), which gives the same mask as compute_mask() (the
// plain walk, kept as the reference) for less: (1) where the state is one
// item at a simple node that starts a region (region_table.h: the body of
// a string, bounded or not, or of a number), the mask starts from the region's precomputed table
// (tokens that stay inside the region whatever the stack) and only the trie
// subtrees where tokens leave the region are walked; (2) the walk itself
// steps a one-item state at a simple node with one lookup in the grammar's
// next-node table instead of through Matcher::step's item lists.
//
// Thread-safety: TokenGrammar is shared; its cache and its region plans are
// guarded by a mutex (a plan is built outside it, on the first miss at its
// node; the table behind it is shared per vocabulary, RegionCache). The
// node regions (region_, wide_) are computed in create() and read-only after.
// Memory: the mask cache is bounded by kCacheBytes, the region plans (the
// grammar node of each region node) by kPlanBytes, per grammar; the tables
// by RegionCache::kMaxBytes per vocabulary, shared by its grammars.
// Each state belongs to one generation (one thread at a time).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "cellm/token_constraint.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/region_table.h"
#include "grammar/token_vocab.h"

namespace cellm::grammar {

class TokenGrammar final : public TokenConstraint,
                           public std::enable_shared_from_this<TokenGrammar> {
 public:
  // Cached masks take at most this many bytes per grammar.
  static constexpr std::size_t kCacheBytes = std::size_t{16} << 20;
  // Region plans take at most this many bytes per grammar.
  static constexpr std::size_t kPlanBytes = std::size_t{4} << 20;

  static std::shared_ptr<const TokenGrammar> create(std::shared_ptr<const Grammar> grammar,
                                                    std::shared_ptr<const TokenVocabulary> vocab);

  std::unique_ptr<TokenConstraintState> start() const override;
  std::int64_t vocab_size() const override { return vocab_->size(); }

  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocab_; }

  // The mask of `matcher`'s state through the cache.
  void fill_mask(Matcher& matcher, std::span<std::uint32_t> words) const;
  // The same without the cache: the plain walk, the reference (tests and
  // benchmarks).
  void compute_mask(Matcher& matcher, std::span<std::uint32_t> words) const;
  // The same mask as compute_mask(), by the fast walk above (what a miss
  // runs; token_mask_walk.cpp).
  void walk_mask(Matcher& matcher, std::span<std::uint32_t> words) const;

  struct CacheStats {
    std::uint64_t hits = 0;
    std::uint64_t misses = 0;
    std::size_t entries = 0;
  };
  CacheStats cache_stats() const;

 private:
  TokenGrammar(std::shared_ptr<const Grammar> grammar,
               std::shared_ptr<const TokenVocabulary> vocab);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::size_t max_entries_;
  // region_[n]: the strongly connected component of simple node n under
  // byte moves between simple nodes, or -1 (not simple, or alone without a
  // move to itself).
  std::vector<std::int32_t> region_;
  // wide_[n]: simple node n takes two bytes to one node (a byte class).
  std::vector<std::uint8_t> wide_;
  // A region's table from one start node, with the grammar node of each of
  // the table's region nodes.
  struct RegionPlan {
    std::shared_ptr<const RegionTable> table;
    std::vector<NodeId> nodes;
  };
  // The plan of start node n; null when n has none (built on first use).
  std::shared_ptr<const RegionPlan> plan(NodeId n) const;
  std::shared_ptr<const RegionPlan> build_plan(NodeId n) const;
  mutable std::vector<std::shared_ptr<const RegionPlan>> plans_;
  mutable std::vector<std::uint8_t> planned_;
  mutable std::size_t plan_bytes_ = 0;
  mutable std::mutex mu_;
  mutable std::list<std::pair<std::string, std::vector<std::uint32_t>>> lru_;  // front: newest
  mutable std::unordered_map<std::string, decltype(lru_)::iterator> cache_;
  mutable CacheStats stats_;
};

}  // namespace cellm::grammar
