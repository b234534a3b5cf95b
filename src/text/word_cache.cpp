#include "text/word_cache.h"

#include <cstring>

namespace cellm::text {
namespace {

constexpr int kShards = 16;
constexpr std::size_t kSlots = 1 << 14;          // per shard, power of two
constexpr std::size_t kMaxEntries = kSlots / 2;  // keep probes short

struct Slot {
  std::uint64_t hash = 0;  // 0: empty
  std::uint32_t key_offset = 0;
  std::uint32_t ids_offset = 0;
  std::uint16_t key_len = 0;
  std::uint16_t ids_len = 0;
};

}  // namespace

struct WordCache::Shard {
  std::mutex mu;
  std::vector<Slot> slots = std::vector<Slot>(kSlots);
  std::string keys;
  std::vector<std::int32_t> ids;
  std::size_t entries = 0;

  void clear() {
    std::fill(slots.begin(), slots.end(), Slot{});
    keys.clear();
    ids.clear();
    entries = 0;
  }
};

WordCache::WordCache() : shards_(new Shard[kShards]) {}
WordCache::~WordCache() = default;

std::uint64_t WordCache::hash(std::string_view word) {
  // FNV-1a, then a final mix; never 0 (the empty marker).
  std::uint64_t h = 1469598103934665603ull;
  for (char c : word) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return h | 1;
}

bool WordCache::lookup(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.size() > kMaxWordBytes) return false;
  const std::uint64_t h = hash(word);
  Shard& s = shards_[h >> 60];
  std::lock_guard<std::mutex> lock(s.mu);
  for (std::size_t i = h & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
    const Slot& slot = s.slots[i];
    if (slot.hash == 0) return false;
    if (slot.hash == h && slot.key_len == word.size() &&
        std::memcmp(s.keys.data() + slot.key_offset, word.data(), word.size()) == 0) {
      out.insert(out.end(), s.ids.begin() + slot.ids_offset,
                 s.ids.begin() + slot.ids_offset + slot.ids_len);
      return true;
    }
  }
}

void WordCache::insert(std::string_view word, const std::int32_t* ids, std::size_t n) const {
  if (word.size() > kMaxWordBytes || n > 0xFFFF) return;
  const std::uint64_t h = hash(word);
  Shard& s = shards_[h >> 60];
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.entries >= kMaxEntries || s.keys.size() + word.size() > 0xFFFFFFFFu) s.clear();
  std::size_t i = h & (kSlots - 1);
  for (;; i = (i + 1) & (kSlots - 1)) {
    const Slot& slot = s.slots[i];
    if (slot.hash == 0) break;
    if (slot.hash == h && slot.key_len == word.size() &&
        std::memcmp(s.keys.data() + slot.key_offset, word.data(), word.size()) == 0) {
      return;  // another thread got here first
    }
  }
  Slot& slot = s.slots[i];
  slot.hash = h;
  slot.key_offset = static_cast<std::uint32_t>(s.keys.size());
  slot.key_len = static_cast<std::uint16_t>(word.size());
  slot.ids_offset = static_cast<std::uint32_t>(s.ids.size());
  slot.ids_len = static_cast<std::uint16_t>(n);
  s.keys.append(word);
  s.ids.insert(s.ids.end(), ids, ids + n);
  ++s.entries;
}

}  // namespace cellm::text
