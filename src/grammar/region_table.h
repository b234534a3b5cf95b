// Region tables: the context-independent part of a token mask, after
// XGrammar's adaptive token-mask cache, precomputed per vocabulary.
//
// A region is a set of "simple" grammar nodes (no calls, not final: the
// next-node table alone decides each byte) reached from a start node within
// kRegionHorizon bytes by moves that are not literals (TokenGrammar decides:
// moves within a cycle, byte classes, moves into a UTF-8 character or an
// escape), such as the body of a JSON string. From a region's start node, a token whose bytes all
// step inside the region is allowed whatever the stack and whatever follows the region; a token
// that steps to no node is refused; only a token that leaves the region (the closing quote, and the
// bytes after it) depends on the rest of the grammar. A RegionTable holds the first set as a mask
// and the trie nodes where the third kind leaves, so a mask costs a copy plus a walk of those
// subtrees instead of a walk of the whole trie (most of Gemma 3's 600k nodes inside a string).
//
// A region is described by a key that names no grammar node (its nodes are
// numbered from the start node in breadth-first order, each with 256 moves:
// a region node, kDead or kLeave), so every string field of every schema
// shares one table per vocabulary.
//
// Building a table steps every trie node once (about 0.7-1.5 ms for Gemma
// 3's 600k nodes on the 2-core machine; the first miss at a new region
// shape pays it, later grammars find it in the cache).
//
// Thread-safety: a RegionTable is immutable; RegionCache is guarded by its
// mutex and shared by every TokenGrammar over one vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/token_vocab.h"

namespace cellm::grammar {

// A region's moves: moves[s * 256 + byte] is the next region node, or:
inline constexpr std::int16_t kRegionDead = -1;   // no node takes the byte
inline constexpr std::int16_t kRegionLeave = -2;  // the byte leaves the region
// Regions larger than this get no table (the key is 512 bytes a node).
inline constexpr std::size_t kMaxRegionNodes = 512;
// A region holds the nodes within this many bytes of its start; a token
// that goes further leaves it there and its subtree is walked. Longer tokens
// are rare, and the bound makes the positions of a bounded string (maxLength
// 120: a chain of nodes, no cycle) share one table while more than this many
// characters remain.
inline constexpr std::uint32_t kRegionHorizon = 16;

struct RegionTable {
  // Tokens whose bytes stay inside the region, as mask words.
  std::vector<std::uint32_t> inside;
  // Where tokens leave: (trie node whose byte leaves, region node of its
  // parent). The trie node's whole subtree is left to the walk.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> leaves;

  std::size_t bytes() const { return inside.size() * 4 + leaves.size() * 8; }
  // One walk of the trie under the region's moves (the key's bytes).
  static RegionTable build(const TokenVocabulary& vocab, const std::vector<std::int16_t>& moves);
};

class RegionCache {
 public:
  // At most this many bytes of tables per vocabulary; past it the cache is
  // emptied and starts again (tables in use stay alive through their
  // owners' shared_ptr).
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;

  // The table of a region given as runs of its moves (pairs: a move, how
  // many bytes in a row take it; runs stay within a node's 256), built on
  // first use (outside the lock: two threads may both build one table; the
  // first stored wins). Runs make the key (hashed and compared on every
  // plan) about a tenth of the moves' size.
  std::shared_ptr<const RegionTable> get(const TokenVocabulary& vocab,
                                         const std::vector<std::int16_t>& runs);

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const RegionTable>> tables_;
  std::size_t bytes_ = 0;
};

}  // namespace cellm::grammar
