#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace cellm::detail {

void check_failed(const char* file, int line, const char* expr, const std::string& message) {
  std::fprintf(stderr, "cellm: check failed at %s:%d: %s%s%s\n", file, line, expr,
               message.empty() ? "" : ": ", message.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace cellm::detail
