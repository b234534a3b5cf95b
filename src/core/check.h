// CELLM_CHECK / CELLM_DCHECK: abort on a broken invariant, with file, line,
// the failed expression and a formatted explanation. Use them for programmer
// errors only; anything a user or a file can cause returns a Status instead.
//
// Thread-safety: safe from any thread (the failure path writes one line to
// stderr and aborts).
#pragma once

#include <string>

#include <fmt/format.h>

namespace cellm::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr,
                               const std::string& message);
}  // namespace cellm::detail

// CELLM_CHECK(cond) or CELLM_CHECK(cond, "fmt {}", args...).
#define CELLM_CHECK(cond, ...)                                                    \
  do {                                                                            \
    if (!(cond)) [[unlikely]] {                                                   \
      ::cellm::detail::check_failed(__FILE__, __LINE__, #cond,                    \
                                    ::cellm::detail::check_message(__VA_ARGS__)); \
    }                                                                             \
  } while (false)

#ifdef NDEBUG
#define CELLM_DCHECK(cond, ...) \
  do {                          \
    (void)sizeof(cond);         \
  } while (false)
#else
#define CELLM_DCHECK(cond, ...) CELLM_CHECK(cond, __VA_ARGS__)
#endif

namespace cellm::detail {
inline std::string check_message() {
  return {};
}
template <typename... Args>
std::string check_message(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}
}  // namespace cellm::detail
