#include "support/testdata.h"

#include <gtest/gtest.h>

#include "core/env.h"

namespace cellm::testing {

std::filesystem::path source_dir() {
  return std::filesystem::path(CELLMDEV_SOURCE_DIR);
}

std::optional<std::filesystem::path> env_path(const char* name) {
  if (auto v = env_string(name)) return std::filesystem::path(*v);
  return std::nullopt;
}

std::filesystem::path testdata_dir() {
  if (auto p = env_path("CELLM_TESTDATA")) return *p;
  const std::filesystem::path candidates[] = {
      source_dir().parent_path() / "shared" / "testdata",
      source_dir() / ".testdata",
  };
  for (const auto& c : candidates) {
    if (std::filesystem::is_directory(c)) return c;
  }
  ADD_FAILURE() << "no test fixtures: set CELLM_TESTDATA or provide " << candidates[0];
  return candidates[0];
}

}  // namespace cellm::testing
