// Leveled logging. CELLM_LOG_INFO("cache: {} cells free", n) checks the level
// before formatting, so a disabled level costs one comparison. Messages start
// with a component tag. The sink is replaceable (tests capture lines); the
// default writes one line per message to stderr, either as text
// ("[12:03:04.512 warn] message", colored only when stderr is a terminal) or
// as JSON ({"time":..., "level":..., "message":...} per line) for log
// collectors.
//
// Thread-safety: logging is safe from any thread; set_log_level,
// set_log_format and set_log_sink are meant for start-up and tests.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "cellm/status.h"

namespace cellm {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };
enum class LogFormat : int { kText = 0, kJson };

using LogSink = std::function<void(LogLevel, std::string_view)>;

void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_format(LogFormat format);
LogFormat log_format();
// Replaces the sink; an empty function restores the default stderr sink.
void set_log_sink(LogSink sink);
// "trace", "debug", "info", "warn", "error", "off".
Result<LogLevel> parse_log_level(std::string_view name);
// "text" or "json".
Result<LogFormat> parse_log_format(std::string_view name);
// "trace", "debug", "info", "warn", "error" ("off" for kOff).
std::string_view log_level_name(LogLevel level);

// One line of the default sink, newline included. Text: local time, level
// (wrapped in ANSI color codes only when `color`), message with control
// characters other than newline and tab written as \xNN so a message cannot
// smuggle terminal escapes. JSON: UTC time in ISO 8601 with milliseconds,
// level name, message (invalid UTF-8 replaced by U+FFFD).
std::string format_log_line(LogFormat format, LogLevel level, std::string_view message,
                            std::chrono::system_clock::time_point time, bool color);

// Writes `message` through the sink at `level` whatever the log level: for
// the few status lines a command always prints (a server's address, a
// start-up error), so they follow --log-format too.
void log_always(LogLevel level, std::string_view message);

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
