// Leveled logging. CELLM_LOG_INFO("cache: {} cells free", n) checks the level
// before formatting, so a disabled level costs one comparison. Messages start
// with a component tag. The sink is replaceable (the server routes logs, tests
// capture them); the default writes to stderr through spdlog.
//
// Thread-safety: logging is safe from any thread; set_log_level/set_log_sink
// are meant for start-up and tests.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "cellm/status.h"

namespace cellm {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

using LogSink = std::function<void(LogLevel, std::string_view)>;

void set_log_level(LogLevel level);
LogLevel log_level();
// Replaces the sink; an empty function restores the default stderr sink.
void set_log_sink(LogSink sink);
// "trace", "debug", "info", "warn", "error", "off".
Result<LogLevel> parse_log_level(std::string_view name);

namespace detail {
bool log_enabled(LogLevel level);
void log_write(LogLevel level, std::string_view message);
}  // namespace detail

}  // namespace cellm

#define CELLM_LOG_AT(level, ...)                                     \
  do {                                                               \
    if (::cellm::detail::log_enabled(level)) {                       \
      ::cellm::detail::log_write(level, ::fmt::format(__VA_ARGS__)); \
    }                                                                \
  } while (false)
#define CELLM_LOG_TRACE(...) CELLM_LOG_AT(::cellm::LogLevel::kTrace, __VA_ARGS__)
#define CELLM_LOG_DEBUG(...) CELLM_LOG_AT(::cellm::LogLevel::kDebug, __VA_ARGS__)
#define CELLM_LOG_INFO(...) CELLM_LOG_AT(::cellm::LogLevel::kInfo, __VA_ARGS__)
#define CELLM_LOG_WARN(...) CELLM_LOG_AT(::cellm::LogLevel::kWarn, __VA_ARGS__)
#define CELLM_LOG_ERROR(...) CELLM_LOG_AT(::cellm::LogLevel::kError, __VA_ARGS__)
