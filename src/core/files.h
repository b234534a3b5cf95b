// Whole-file reads for the small text inputs the loaders parse (config.json,
// safetensors index files), so every loader reports a missing file the same way.
//
// Thread-safety: pure functions (they only read the filesystem).
#pragma once

#include <filesystem>
#include <string>

#include "cellm/status.h"

namespace cellm {

// The file's bytes. NotFound, naming the path, when it cannot be opened.
Result<std::string> read_file(const std::filesystem::path& path);

}  // namespace cellm
