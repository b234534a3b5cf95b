// Where tests find their fixtures: $CELLM_TESTDATA, else ../shared/testdata
// beside the checkout, else .testdata inside it (the copy carried to the GPU
// machine). Tests that need a fixture that is absent fail with a message
// saying where they looked.
//
// Thread-safety: pure lookups.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace cellm::testing {

// The fixture root; fails the calling test (ADD_FAILURE) if none exists.
std::filesystem::path testdata_dir();
// A path from an environment variable, if set.
std::optional<std::filesystem::path> env_path(const char* name);
// The repository root (for scripts and sample files).
std::filesystem::path source_dir();

}  // namespace cellm::testing
