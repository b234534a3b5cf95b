// Runtime-to-compile-time dispatch, in one place, over closed lists. Head
// dims are bucketed (64, 128, 256): a kernel is compiled for the bucket's
// maximum and takes the exact head dim at run time, so the fixtures' 16 or a
// model's 80/96 run on the generic path without more instantiations.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

namespace cellm::cuda {

inline constexpr int kMaxHeadDim = 256;

// The compiled bucket for `head_dim`, or 0 when none holds it.
constexpr int head_dim_bucket(std::int64_t head_dim) {
  if (head_dim <= 0 || head_dim % 8 != 0) {
    return 0;
  }
  if (head_dim <= 64) return 64;
  if (head_dim <= 128) return 128;
  if (head_dim <= 256) return 256;
  return 0;
}

// Calls fn.template operator()<kBucket>() for head_dim's bucket; returns false
// (calling nothing) when head_dim has none.
template <typename Fn>
bool dispatch_head_dim(std::int64_t head_dim, Fn&& fn) {
  switch (head_dim_bucket(head_dim)) {
    case 64: fn.template operator()<64>(); return true;
    case 128: fn.template operator()<128>(); return true;
    case 256: fn.template operator()<256>(); return true;
    default: return false;
  }
}

}  // namespace cellm::cuda
