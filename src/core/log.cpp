#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <unistd.h>

#include "core/utf8.h"

namespace cellm {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_format{static_cast<int>(LogFormat::kText)};

struct SinkHolder {
  std::mutex mu;
  LogSink sink;  // empty: the default stderr sink
};

SinkHolder& holder() {
  static SinkHolder h;
  return h;
}

std::string_view level_color(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "\x1b[37m";
    case LogLevel::kDebug: return "\x1b[36m";
    case LogLevel::kInfo: return "\x1b[32m";
    case LogLevel::kWarn: return "\x1b[33;1m";
    case LogLevel::kError: return "\x1b[31;1m";
    case LogLevel::kOff: break;
  }
  return "";
}

// Milliseconds within the second and the broken-down time (UTC or local).
std::pair<std::tm, int> split_time(std::chrono::system_clock::time_point time, bool utc) {
  const auto since = time.time_since_epoch();
  const auto secs = std::chrono::floor<std::chrono::seconds>(since);
  const int ms =
      static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(since - secs).count());
  const std::time_t t = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  if (utc) {
    gmtime_r(&t, &tm);
  } else {
    localtime_r(&t, &tm);
  }
  return {tm, ms};
}

void append_text_message(std::string& out, std::string_view message) {
  for (const char ch : message) {
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && ch != '\n' && ch != '\t') || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += ch;
    }
  }
}

void append_json_string(std::string& out, std::string_view s) {
  const std::string valid = utf8::is_valid(s) ? std::string(s) : utf8::repair(s);
  out += '"';
  for (const char ch : valid) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(ch));
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void write_default(LogLevel level, std::string_view message) {
  // Decided per line: stderr may be redirected after start-up (tests do).
  const bool color = ::isatty(STDERR_FILENO) == 1;
  const std::string line = format_log_line(static_cast<LogFormat>(g_format.load()), level,
                                           message, std::chrono::system_clock::now(), color);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace

void set_log_level(LogLevel level) {
  g_level.store(static_cast<int>(level));
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load());
}
void set_log_format(LogFormat format) {
  g_format.store(static_cast<int>(format));
}
LogFormat log_format() {
  return static_cast<LogFormat>(g_format.load());
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

Result<LogFormat> parse_log_format(std::string_view name) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return invalid_argument(
      "unknown log format '{}': use text (one readable line per message) or json (one object "
      "per line)",
      name);
}

std::string_view log_level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "trace";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
    case LogLevel::kOff: return "off";
  }
  return "info";
}

std::string format_log_line(LogFormat format, LogLevel level, std::string_view message,
                            std::chrono::system_clock::time_point time, bool color) {
  std::string out;
  out.reserve(message.size() + 64);
  if (format == LogFormat::kJson) {
    const auto [tm, ms] = split_time(time, /*utc=*/true);
    out += fmt::format(R"({{"time":"{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:03d}Z","level":")",
                       tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                       tm.tm_sec, ms);
    out += log_level_name(level);
    out += R"(","message":)";
    append_json_string(out, message);
    out += "}\n";
    return out;
  }
  const auto [tm, ms] = split_time(time, /*utc=*/false);
  out += fmt::format("[{:02d}:{:02d}:{:02d}.{:03d} ", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  if (color) out += level_color(level);
  out += log_level_name(level);
  if (color) out += "\x1b[0m";
  out += "] ";
  append_text_message(out, message);
  out += '\n';
  return out;
}

void log_always(LogLevel level, std::string_view message) {
  detail::log_write(level == LogLevel::kOff ? LogLevel::kInfo : level, message);
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
  write_default(level, message);
}

}  // namespace detail
}  // namespace cellm
