// A bump arena over one pre-allocated region (device memory at run time, any
// memory in tests) from which kernels lease scratch space. Leases are scoped,
// non-copyable and must be released in reverse order (a stack), so nothing is
// allocated in the step loop or during graph capture. ArenaPlan is the
// counting pass that sizes the region from every family's *_workspace_bytes.
//
// Thread-safety: not thread-safe; one arena per stream / engine thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cellm/status.h"

namespace cellm::cuda {

inline constexpr std::size_t kArenaAlignment = 256;

inline std::size_t align_up(std::size_t bytes, std::size_t alignment = kArenaAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

// Sums aligned requests so the arena can be allocated once, up front.
class ArenaPlan {
 public:
  void add(std::size_t bytes) { total_ += align_up(bytes); }
  // Several leases alive at once cost their sum; disjoint phases their max.
  void add_max_of(std::size_t a, std::size_t b) { add(a > b ? a : b); }
  std::size_t total() const { return total_; }

 private:
  std::size_t total_ = 0;
};

class Arena;

class ArenaLease {
 public:
  ArenaLease() = default;
  ArenaLease(const ArenaLease&) = delete;
  ArenaLease& operator=(const ArenaLease&) = delete;
  ArenaLease(ArenaLease&& other) noexcept;
  ArenaLease& operator=(ArenaLease&& other) noexcept;
  ~ArenaLease();

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  friend class Arena;
  ArenaLease(Arena* arena, void* data, std::size_t offset, std::size_t bytes)
      : arena_(arena), data_(data), offset_(offset), bytes_(bytes) {}
  void release();

  Arena* arena_ = nullptr;
  void* data_ = nullptr;
  std::size_t offset_ = 0;
  std::size_t bytes_ = 0;
};

class Arena {
 public:
  // `base` must be kArenaAlignment-aligned and outlive the arena.
  Arena(void* base, std::size_t capacity);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  // A lease of `bytes` (rounded up to the alignment); OutOfResources when the
  // arena is too small, which means the counting pass missed a request.
  Result<ArenaLease> lease(std::size_t bytes);

  std::size_t capacity() const { return capacity_; }
  std::size_t used() const { return top_; }
  std::size_t high_water() const { return high_water_; }

 private:
  friend class ArenaLease;
  void release(std::size_t offset, std::size_t bytes);

  std::byte* base_;
  std::size_t capacity_;
  std::size_t top_ = 0;
  std::size_t high_water_ = 0;
};

}  // namespace cellm::cuda
