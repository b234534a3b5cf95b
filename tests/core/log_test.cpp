#include "core/log.h"

#include <gtest/gtest.h>

#include "core/check.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace cellm {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_log_sink([this](LogLevel level, std::string_view msg) {
      lines.emplace_back(std::to_string(static_cast<int>(level)) + " " + std::string(msg));
    });
  }
  void TearDown() override {
    set_log_sink({});
    set_log_level(LogLevel::kInfo);
  }
  std::vector<std::string> lines;
};

TEST_F(LogTest, LevelFiltersBeforeFormatting) {
  set_log_level(LogLevel::kWarn);
  int formatted = 0;
  auto count = [&] { return ++formatted; };
  CELLM_LOG_INFO("cache: {}", count());
  EXPECT_EQ(formatted, 0);
  CELLM_LOG_ERROR("cache: {}", count());
  EXPECT_EQ(formatted, 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "4 cache: 1");
}

TEST_F(LogTest, ParsesLevelNames) {
  EXPECT_EQ(*parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(*parse_log_level("warning"), LogLevel::kWarn);
  Result<LogLevel> bad = parse_log_level("loud");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("loud"), std::string_view::npos);
}

TEST_F(LogTest, ParsesFormatNames) {
  EXPECT_EQ(*parse_log_format("text"), LogFormat::kText);
  EXPECT_EQ(*parse_log_format("json"), LogFormat::kJson);
  Result<LogFormat> bad = parse_log_format("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'xml'"), std::string_view::npos);
  EXPECT_NE(bad.status().message().find("text"), std::string_view::npos);
  EXPECT_FALSE(parse_log_format("").ok());
  EXPECT_FALSE(parse_log_format("JSON ").ok());
}

// 2026-01-02T03:04:05.678Z
std::chrono::system_clock::time_point fixed_time() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 2;
  tm.tm_hour = 3;
  tm.tm_min = 4;
  tm.tm_sec = 5;
  return std::chrono::system_clock::from_time_t(timegm(&tm)) + std::chrono::milliseconds(678);
}

TEST(LogFormatTest, TextHasEscapeCodesOnlyWhenColored) {
  const auto t = std::chrono::system_clock::now();
  const std::string plain = format_log_line(LogFormat::kText, LogLevel::kWarn, "server: hi", t,
                                            /*color=*/false);
  EXPECT_EQ(plain.find('\x1b'), std::string::npos) << plain;
  EXPECT_NE(plain.find(" warn] server: hi\n"), std::string::npos) << plain;
  EXPECT_EQ(plain.back(), '\n');
  const std::string colored = format_log_line(LogFormat::kText, LogLevel::kWarn, "server: hi", t,
                                              /*color=*/true);
  EXPECT_NE(colored.find('\x1b'), std::string::npos) << colored;
  EXPECT_NE(colored.find("server: hi"), std::string::npos) << colored;
}

TEST(LogFormatTest, TextMessageCannotCarryTerminalEscapes) {
  const std::string line =
      format_log_line(LogFormat::kText, LogLevel::kInfo, "name \x1b[31mred\x07 a\tb",
                      std::chrono::system_clock::now(), /*color=*/false);
  EXPECT_EQ(line.find('\x1b'), std::string::npos) << line;
  EXPECT_EQ(line.find('\x07'), std::string::npos) << line;
  EXPECT_NE(line.find("name \\x1b[31mred\\x07 a\tb"), std::string::npos) << line;
}

TEST(LogFormatTest, JsonIsOneObjectPerLineWithTimeLevelAndMessage) {
  const std::string line = format_log_line(LogFormat::kJson, LogLevel::kError,
                                           "say \"hi\"\nback\\slash \x01 caf\xc3\xa9 bad\xff",
                                           fixed_time(), /*color=*/true);
  ASSERT_FALSE(line.empty());
  EXPECT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line: " << line;
  EXPECT_EQ(line.find('\x1b'), std::string::npos) << "JSON is never colored: " << line;
  EXPECT_EQ(line,
            "{\"time\":\"2026-01-02T03:04:05.678Z\",\"level\":\"error\",\"message\":"
            "\"say \\\"hi\\\"\\nback\\\\slash \\u0001 caf\xc3\xa9 bad\xef\xbf\xbd\"}\n");
}

TEST(LogFormatTest, LevelNames) {
  EXPECT_EQ(log_level_name(LogLevel::kTrace), "trace");
  EXPECT_EQ(log_level_name(LogLevel::kDebug), "debug");
  EXPECT_EQ(log_level_name(LogLevel::kInfo), "info");
  EXPECT_EQ(log_level_name(LogLevel::kWarn), "warn");
  EXPECT_EQ(log_level_name(LogLevel::kError), "error");
}

// Runs `fn` with stderr redirected to a temporary file (not a terminal) and
// returns what it wrote.
template <class Fn>
std::string capture_stderr(Fn fn) {
  char path[] = "/tmp/cellm_log_test_XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fd, STDERR_FILENO);
  fn();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::string out;
  ::lseek(fd, 0, SEEK_SET);
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  ::unlink(path);
  return out;
}

TEST(LogDefaultSinkTest, PipedStderrGetsPlainTextOrJson) {
  set_log_sink({});
  set_log_level(LogLevel::kInfo);
  const std::string text = capture_stderr([] {
    set_log_format(LogFormat::kText);
    CELLM_LOG_WARN("server: {} is odd", "this");
  });
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_NE(text.find("warn] server: this is odd\n"), std::string::npos) << text;
  const std::string json = capture_stderr([] {
    set_log_format(LogFormat::kJson);
    CELLM_LOG_INFO("server: ready");
    log_always(LogLevel::kInfo, "server: listening");
    set_log_level(LogLevel::kOff);
    log_always(LogLevel::kError, "server: printed whatever the level");
    CELLM_LOG_ERROR("server: filtered");
  });
  set_log_format(LogFormat::kText);
  set_log_level(LogLevel::kInfo);
  EXPECT_EQ(json.find('\x1b'), std::string::npos) << json;
  EXPECT_NE(json.find("\"level\":\"info\",\"message\":\"server: ready\"}\n"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"message\":\"server: listening\"}\n"), std::string::npos) << json;
  EXPECT_NE(json.find("\"level\":\"error\",\"message\":\"server: printed whatever the level\"}\n"),
            std::string::npos)
      << json;
  EXPECT_EQ(json.find("filtered"), std::string::npos) << json;
  std::size_t lines = 0;
  for (std::size_t pos = 0; (pos = json.find('\n', pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_EQ(lines, 3u) << json;
}

TEST(CheckDeathTest, FailedCheckNamesTheExpressionAndMessage) {
  EXPECT_DEATH(CELLM_CHECK(1 + 1 == 3, "arithmetic is {}", "broken"),
               "1 \\+ 1 == 3: arithmetic is broken");
}

}  // namespace
}  // namespace cellm
