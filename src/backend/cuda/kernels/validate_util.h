// Small checks shared by the kernel families' validate() (host-only, g++:
// nvcc's front end cannot evaluate fmt's compile-time format checks, so every
// Status-building function lives in a .cpp).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "backend/cuda/dispatch.h"
#include "cellm/status.h"

namespace cellm::cuda {

inline Status require_ptr(const void* ptr, const char* family, const char* name) {
  if (ptr == nullptr) {
    return invalid_argument("cuda {}: `{}` is null", family, name);
  }
  return Status::ok();
}

inline Status require_aligned16(const void* ptr, const char* family, const char* name) {
  if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) {
    return invalid_argument("cuda {}: `{}` is not 16-byte aligned", family, name);
  }
  return Status::ok();
}

inline Status check_head_dim(std::int64_t head_dim, const char* family) {
  if (head_dim_bucket(head_dim) == 0) {
    return not_supported("cuda {}: head_dim={} is not supported (need a multiple of 8 up to {})",
                         family, head_dim, kMaxHeadDim);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
