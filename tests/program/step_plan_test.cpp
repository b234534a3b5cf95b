#include "program/step_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace cellm::program {
namespace {

const std::vector<ForwardMethod> kDense = {{"forward_1", 1, true},
                                           {"forward_2", 2, true},
                                           {"forward_4", 4, true},
                                           {"forward_8", 8, true},
                                           {"forward_others", 32, false}};
const std::vector<ForwardMethod> kSparse = {
    {"forward_1", 1, true}, {"forward_4", 4, true}, {"forward_others", 32, false}};
const std::vector<ForwardMethod> kStaticOnly = {{"forward_1", 1, true}, {"forward_8", 8, true}};

// (method name, real tokens, width) per slice, checking contiguity and cover.
struct Expect {
  std::string method;
  std::int64_t length;
  std::int64_t width;
};

void expect_plan(std::int64_t total, const std::vector<ForwardMethod>& methods,
                 const std::vector<Expect>& expected) {
  SCOPED_TRACE(testing::Message() << "total " << total);
  const std::vector<StepSlice> slices = plan_slices(total, methods);
  ASSERT_EQ(slices.size(), expected.size());
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < slices.size(); ++i) {
    EXPECT_EQ(slices[i].offset, offset) << "slice " << i;
    ASSERT_LT(slices[i].method, methods.size());
    EXPECT_EQ(methods[slices[i].method].name, expected[i].method) << "slice " << i;
    EXPECT_EQ(slices[i].length, expected[i].length) << "slice " << i;
    EXPECT_EQ(slices[i].width, expected[i].width) << "slice " << i;
    offset += slices[i].length;
  }
  EXPECT_EQ(offset, total);
}

TEST(StepPlanTest, ExactWidthsRunTheirStaticMethod) {
  expect_plan(1, kDense, {{"forward_1", 1, 1}});
  expect_plan(2, kDense, {{"forward_2", 2, 2}});
  expect_plan(4, kDense, {{"forward_4", 4, 4}});
  expect_plan(8, kDense, {{"forward_8", 8, 8}});
}

TEST(StepPlanTest, WidthsBetweenStaticMethodsPadToTheNextOne) {
  expect_plan(3, kDense, {{"forward_4", 3, 4}});
  expect_plan(5, kDense, {{"forward_8", 5, 8}});
  expect_plan(7, kDense, {{"forward_8", 7, 8}});
}

TEST(StepPlanTest, WiderThanEveryStaticMethodRunsDynamicUnpadded) {
  expect_plan(9, kDense, {{"forward_others", 9, 9}});
  expect_plan(32, kDense, {{"forward_others", 32, 32}});
}

TEST(StepPlanTest, WiderThanTheWidestMethodSlicesAndRoutesTheRest) {
  expect_plan(33, kDense, {{"forward_others", 32, 32}, {"forward_1", 1, 1}});
  expect_plan(38, kDense, {{"forward_others", 32, 32}, {"forward_8", 6, 8}});
  expect_plan(75, kDense,
              {{"forward_others", 32, 32}, {"forward_others", 32, 32}, {"forward_others", 11, 11}});
}

TEST(StepPlanTest, SparseStaticMethodsPadAcrossGaps) {
  expect_plan(2, kSparse, {{"forward_4", 2, 4}});
  expect_plan(4, kSparse, {{"forward_4", 4, 4}});
  expect_plan(5, kSparse, {{"forward_others", 5, 5}});
}

TEST(StepPlanTest, StaticOnlyProgramsSliceAtTheirWidest) {
  expect_plan(11, kStaticOnly, {{"forward_8", 8, 8}, {"forward_8", 3, 8}});
  expect_plan(17, kStaticOnly, {{"forward_8", 8, 8}, {"forward_8", 8, 8}, {"forward_1", 1, 1}});
}

TEST(StepPlanTest, EmptyBatchPlansNothing) {
  EXPECT_TRUE(plan_slices(0, kDense).empty());
  EXPECT_TRUE(plan_slices(5, std::vector<ForwardMethod>{}).empty());
}

TEST(StepPlanDeathTest, NonPositiveWidestMethodIsRejected) {
  const std::vector<ForwardMethod> zero = {{"forward_0", 0, true}};
  const std::vector<ForwardMethod> negative = {{"forward_1", 1, true},
                                               {"forward_others", -1, false}};
  EXPECT_DEATH(plan_slices(3, zero), "widest method");
  EXPECT_DEATH(plan_slices(3, negative), "widest method");
}

}  // namespace
}  // namespace cellm::program
