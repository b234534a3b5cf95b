// PrefixCache: a caller-owned LRU of idle snapshot sessions keyed by their
// exact token history. lookup() clones the snapshot sharing the longest prefix
// with a request, so only the rest has to be prefilled. PromptCapture takes
// such a snapshot of a prompt while its generation runs.
//
// Thread-safety: none; calls must be serialized by the caller. lookup() and
// PromptCapture::collect() wait on clones, so never call them from a runner
// callback. Keep the cache outside the Runner (its sessions keep runner
// internals alive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <list>
#include <memory>
#include <optional>
#include <vector>

#include "cellm/runner.h"

namespace cellm {

struct PrefixMatch {
  Session session;  // a fresh clone holding the first matched_tokens tokens
  std::size_t matched_tokens = 0;
};

class PromptCapture;

class PrefixCache {
 public:
  explicit PrefixCache(std::size_t max_entries);  // 0 disables the cache
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Takes ownership of `snapshot` whose committed history is `tokens`. False
  // (and the snapshot released) when disabled, tokens empty or too long, the
  // snapshot invalid, or its position differs from tokens.size(). Identical
  // tokens refresh the existing entry and drop the new snapshot.
  bool insert(std::vector<Token> tokens, Session snapshot);
  // A clone of the best snapshot for `request`, leaving at least its last
  // token unmatched; nullopt on a miss (or when every candidate refused).
  std::optional<PrefixMatch> lookup(const std::vector<Token>& request);
  void clear();
  std::size_t size() const { return entries_.size(); }
  bool enabled() const { return max_entries_ > 0; }

  // A capture that snapshots `source` at tokens.size() when its generation
  // delivers its first token; `tokens` is the full history at that point.
  PromptCapture capture_prompt(const Session& source, std::vector<Token> tokens);

 private:
  struct Entry {
    std::vector<Token> tokens;
    Session snapshot;
  };
  std::size_t max_entries_;
  std::list<Entry> entries_;  // front = most recently used
};

class PromptCapture {
 public:
  PromptCapture() = default;
  PromptCapture(PromptCapture&&) noexcept = default;
  PromptCapture& operator=(PromptCapture&&) noexcept = default;
  PromptCapture(const PromptCapture&) = delete;
  PromptCapture& operator=(const PromptCapture&) = delete;

  bool active() const { return state_ != nullptr; }
  // A callback that requests the snapshot on the first update carrying tokens
  // and forwards every update to `cb` (its exceptions included). An inactive
  // capture returns `cb` itself.
  GenerationCallback wrap(GenerationCallback cb = {}) const;
  // After the generation is done: waits for the snapshot and inserts it.
  // False when nothing was requested, the clone was refused, the insert
  // failed, or it was collected already.
  bool collect();

 private:
  friend class PrefixCache;
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace cellm
