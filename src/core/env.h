// The one place that reads process environment variables, so configuration
// has a single, greppable entry point (no getenv elsewhere).
//
// Thread-safety: safe as long as nobody calls setenv concurrently.
#pragma once

#include <optional>
#include <string>

namespace cellm {

// The variable's value, or nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);

}  // namespace cellm
