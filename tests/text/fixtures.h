// Shared access to the fixture tokenizers (loaded once per test binary, since
// the 262k-token Gemma vocabulary takes seconds) and to the golden lines.
//
// Thread-safety: the loader is guarded by a function-local static mutex.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/testdata.h"
#include "text/tokenizer.h"

namespace cellm::text::testing {

inline const Tokenizer& fixture_tokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, Tokenizer> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(name);
  if (it == cache.end()) {
    auto tok = Tokenizer::from_dir(cellm::testing::testdata_dir() / "tokenizers" / name);
    if (!tok.ok()) {
      ADD_FAILURE() << tok.status().to_string();
      std::abort();
    }
    it = cache.emplace(name, std::move(tok).value()).first;
  }
  return it->second;
}

inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names = {"llama3", "qwen3", "gemma3", "llama2"};
  return names;
}

}  // namespace cellm::text::testing
