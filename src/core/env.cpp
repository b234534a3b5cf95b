#include "core/env.h"

#include <cstdlib>

namespace cellm {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);  // the only getenv in the project
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace cellm
