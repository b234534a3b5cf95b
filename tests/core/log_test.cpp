#include "core/log.h"

#include <gtest/gtest.h>

#include "core/check.h"

#include <string>
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

TEST(CheckDeathTest, FailedCheckNamesTheExpressionAndMessage) {
  EXPECT_DEATH(CELLM_CHECK(1 + 1 == 3, "arithmetic is {}", "broken"),
               "1 \\+ 1 == 3: arithmetic is broken");
}

}  // namespace
}  // namespace cellm
