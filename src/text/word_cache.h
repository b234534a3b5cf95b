// A bounded cache from a word (bytes) to its token ids: open addressing in
// flat arrays, sharded behind mutexes. It replaces node-based hash maps on
// the encode hot path, where almost every word of real text is a hit.
// When a shard fills up it is cleared (cheap, and keeps memory bounded).
//
// Thread-safety: lookup/insert may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::text {

class WordCache {
 public:
  static constexpr std::size_t kMaxWordBytes = 64;

  WordCache();
  ~WordCache();
  WordCache(const WordCache&) = delete;
  WordCache& operator=(const WordCache&) = delete;

  // Appends the cached ids of `word` to `out`; false on a miss.
  bool lookup(std::string_view word, std::vector<std::int32_t>& out) const;
  void insert(std::string_view word, const std::int32_t* ids, std::size_t n) const;

 private:
  struct Shard;
  static std::uint64_t hash(std::string_view word);
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace cellm::text
