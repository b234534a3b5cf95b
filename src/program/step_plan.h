// Step plan: how one packed batch of tokens is cut into forwards over a
// program's methods (batching_spec §4.4). Each slice takes as many tokens as
// the widest method allows and runs on the narrowest method that holds it;
// static methods pad up to their width, the dynamic method runs unpadded.
//
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cellm::program {

struct ForwardMethod {
  std::string name;
  std::int32_t max_tokens = 0;  // exact width if static, upper bound if dynamic
  bool is_static = true;
  friend bool operator==(const ForwardMethod&, const ForwardMethod&) = default;
};

struct StepSlice {
  std::int64_t offset = 0;  // first token of the batch in this slice
  std::int64_t length = 0;  // real tokens
  std::size_t method = 0;   // index into the method list
  std::int64_t width = 0;   // tokens the method runs: its width if static, else length
  friend bool operator==(const StepSlice&, const StepSlice&) = default;
};

// Slices for `total` tokens over `methods`, sorted by max_tokens ascending
// (a dynamic method, if any, is the widest). No methods or total <= 0: no
// slices. Precondition (checked): the widest method takes at least one token.
std::vector<StepSlice> plan_slices(std::int64_t total, std::span<const ForwardMethod> methods);

}  // namespace cellm::program
