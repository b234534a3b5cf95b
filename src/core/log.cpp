#include "core/log.h"

#include <atomic>
#include <memory>
#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace cellm {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

struct SinkHolder {
  std::mutex mu;
  LogSink sink;  // empty: default spdlog sink
};

SinkHolder& holder() {
  static SinkHolder h;
  return h;
}

spdlog::logger& default_logger() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("cellm");
    l->set_pattern("[%H:%M:%S.%e %^%l%$] %v");
    l->set_level(spdlog::level::trace);  // filtering happens in log_enabled
    return l;
  }();
  return *logger;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return spdlog::level::trace;
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level));
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load());
}

void set_log_sink(LogSink sink) {
  std::lock_guard lock(holder().mu);
  holder().sink = std::move(sink);
}

Result<LogLevel> parse_log_level(std::string_view name) {
  if (name == "trace") return LogLevel::kTrace;
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  return invalid_argument("unknown log level '{}': use trace, debug, info, warn, error or off",
                          name);
}

namespace detail {

bool log_enabled(LogLevel level) {
  return level != LogLevel::kOff && static_cast<int>(level) >= g_level.load();
}

void log_write(LogLevel level, std::string_view message) {
  std::lock_guard lock(holder().mu);
  if (holder().sink) {
    holder().sink(level, message);
    return;
  }
  default_logger().log(to_spdlog(level), "{}", message);
}

}  // namespace detail
}  // namespace cellm
