#include "backend/cuda/arena.h"

#include <utility>

#include "core/check.h"

namespace cellm::cuda {

ArenaLease::ArenaLease(ArenaLease&& other) noexcept
    : arena_(std::exchange(other.arena_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      offset_(other.offset_),
      bytes_(std::exchange(other.bytes_, 0)) {}

ArenaLease& ArenaLease::operator=(ArenaLease&& other) noexcept {
  if (this != &other) {
    release();
    arena_ = std::exchange(other.arena_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    offset_ = other.offset_;
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

ArenaLease::~ArenaLease() {
  release();
}

void ArenaLease::release() {
  if (arena_ != nullptr) {
    arena_->release(offset_, bytes_);
    arena_ = nullptr;
    data_ = nullptr;
  }
}

Arena::Arena(void* base, std::size_t capacity)
    : base_(static_cast<std::byte*>(base)), capacity_(capacity) {
  CELLM_CHECK(reinterpret_cast<std::uintptr_t>(base) % kArenaAlignment == 0,
              "arena base must be {}-byte aligned", kArenaAlignment);
}

Arena::~Arena() {
  CELLM_CHECK(top_ == 0, "arena destroyed with {} bytes still leased", top_);
}

Result<ArenaLease> Arena::lease(std::size_t bytes) {
  const std::size_t rounded = align_up(bytes);
  if (rounded > capacity_ - top_) {
    return out_of_resources(
        "cuda: workspace arena exhausted: lease of {} bytes with {} of {} in use; size the arena "
        "with ArenaPlan from every *_workspace_bytes",
        bytes, top_, capacity_);
  }
  const std::size_t offset = top_;
  top_ += rounded;
  if (top_ > high_water_) {
    high_water_ = top_;
  }
  return ArenaLease(this, base_ + offset, offset, rounded);
}

void Arena::release(std::size_t offset, std::size_t bytes) {
  CELLM_CHECK(offset + bytes == top_, "arena leases must be released in reverse order");
  top_ = offset;
}

}  // namespace cellm::cuda
