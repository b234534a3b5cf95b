#include "cellm/status.h"

#include <gtest/gtest.h>

#include <string>

namespace cellm {
namespace {

TEST(StatusTest, DefaultIsOkAndCarriesNoMessage) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "ok");
}

TEST(StatusTest, FactoriesFormatTheirMessage) {
  Status s = invalid_argument("session {} position {} leaves a gap", 3, 7);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "session 3 position 7 leaves a gap");
  EXPECT_EQ(s.to_string(), "invalid_argument: session 3 position 7 leaves a gap");
}

TEST(StatusTest, CodesMapToHttpStatuses) {
  EXPECT_EQ(http_status(StatusCode::kOk), 200);
  EXPECT_EQ(http_status(StatusCode::kInvalidArgument), 400);
  EXPECT_EQ(http_status(StatusCode::kNotFound), 404);
  EXPECT_EQ(http_status(StatusCode::kOutOfResources), 429);
  EXPECT_EQ(http_status(StatusCode::kCancelled), 499);
  EXPECT_EQ(http_status(StatusCode::kInternal), 500);
  EXPECT_EQ(http_status(StatusCode::kNotSupported), 501);
  EXPECT_EQ(http_status(StatusCode::kUnavailable), 503);
  EXPECT_EQ(http_status(StatusCode::kDeadlineExceeded), 504);
}

TEST(StatusTest, CopiesAreIndependentAndEqual) {
  Status a = not_found("file {}", "x.gguf");
  Status b = a;
  EXPECT_EQ(a, b);
  b = Status::ok();
  EXPECT_FALSE(a.is_ok());
  EXPECT_TRUE(b.is_ok());
}

TEST(StatusTest, ContextPrefixesTheMessageAndKeepsTheCode) {
  Status s = data_loss("header ends past the file").with_context("model.safetensors");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "model.safetensors: header ends past the file");
  EXPECT_TRUE(Status::ok().with_context("x").is_ok());
}

Result<int> half_of(int v) {
  if (v % 2 != 0) return invalid_argument("{} is odd", v);
  return v / 2;
}

Status quarter_into(int v, int* out) {
  CELLM_ASSIGN_OR_RETURN(int h, half_of(v));
  CELLM_ASSIGN_OR_RETURN(*out, half_of(h));
  return Status::ok();
}

TEST(ResultTest, HoldsAValueOrAStatus) {
  Result<int> r = half_of(8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4);
  Result<int> e = half_of(3);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "3 is odd");
  EXPECT_EQ(e.value_or(-1), -1);
}

TEST(ResultTest, AnOkStatusWithoutValueBecomesInternal) {
  Result<int> r{Status::ok()};
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultTest, MacrosPropagateTheFirstError) {
  int out = 0;
  EXPECT_TRUE(quarter_into(8, &out).is_ok());
  EXPECT_EQ(out, 2);
  Status s = quarter_into(6, &out);
  EXPECT_EQ(s.message(), "3 is odd");
}

Status fails_then_stops(int* calls) {
  CELLM_RETURN_IF_ERROR(invalid_argument("first"));
  ++*calls;
  return Status::ok();
}

TEST(ResultTest, ReturnIfErrorStopsAtTheFailure) {
  int calls = 0;
  EXPECT_EQ(fails_then_stops(&calls).message(), "first");
  EXPECT_EQ(calls, 0);
}

TEST(ResultTest, MoveOnlyValuesAreSupported) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

}  // namespace
}  // namespace cellm
