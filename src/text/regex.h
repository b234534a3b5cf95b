// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) that
// enumerates the non-overlapping matches in a string, as the Split
// pre-tokenizer and Replace normalizer of tokenizer.json need.
//
// Thread-safety: a Regex is immutable after create(); find_all may be called
// from many threads at once (match data is per call / per thread).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cellm/status.h"

namespace cellm::text {

class Regex {
 public:
  // Fails with InvalidArgument naming the pattern and PCRE2's message.
  static Result<Regex> create(std::string_view pattern);

  // [begin, end) byte ranges of the successive leftmost matches in valid
  // UTF-8 `s`. Empty matches are skipped over by one character. If PCRE2
  // gives up (resource limits) the rest of `s` counts as one match, so the
  // text is never lost.
  void find_all(std::string_view s, std::vector<std::pair<std::size_t, std::size_t>>& out) const;

  const std::string& pattern() const;

 private:
  struct Impl;
  explicit Regex(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace cellm::text
