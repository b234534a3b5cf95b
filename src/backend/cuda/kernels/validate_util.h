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

// A product's input rows `a` ([rows, lda] bf16, first k columns) and output
// rows `out` ([rows, ldc] of out_bytes-wide elements, first n) must not meet:
// every block reads all of `a` while others write `out`.
inline Status require_disjoint(const void* a, const void* out, std::int64_t rows, std::int64_t lda,
                               std::int64_t k, std::int64_t ldc, std::int64_t n,
                               std::int64_t out_bytes, const char* family) {
  const auto* a_begin = static_cast<const char*>(a);
  const auto* a_end = a_begin + ((rows - 1) * lda + k) * std::int64_t{2};
  const auto* o_begin = static_cast<const char*>(out);
  const auto* o_end = o_begin + ((rows - 1) * ldc + n) * out_bytes;
  if (a_begin < o_end && o_begin < a_end) {
    return invalid_argument("cuda {}: `a` and `out` overlap; give the product its own buffer",
                            family);
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
