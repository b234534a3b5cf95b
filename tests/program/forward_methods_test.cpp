// ForwardMethods' signatures as every backend reports them: the sample
// method declares its suppressed ids as an optional third input, the other
// methods have no optional inputs.
#include "program/forward_methods.h"

#include <utility>

#include <gtest/gtest.h>

#include "cache/cell_cache.h"
#include "cellm/types.h"

namespace cellm::program {
namespace {

ProgramOptions small_options() {
  ProgramOptions o;
  o.static_widths = {1, 4};
  o.max_step = 16;
  return o;
}

TEST(ForwardMethodsTest, SampleDeclaresItsSuppressedIdsAsAnOptionalThirdInput) {
  Result<ForwardMethods> m = ForwardMethods::build(small_options(), "test");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Result<MethodMeta> sample = m->meta(kSampleMethod, 50, 8, Device::kCuda);
  ASSERT_TRUE(sample.ok()) << sample.status().to_string();
  ASSERT_EQ(sample->inputs.size(), 3u);
  EXPECT_EQ(sample->inputs[0].shape, (Shape{16, 50}));
  EXPECT_EQ(sample->inputs[0].device, Device::kCuda);
  EXPECT_EQ(sample->inputs[1].shape, (Shape{16, 4}));
  EXPECT_EQ(sample->inputs[2].dtype, DType::kI64);
  EXPECT_EQ(sample->inputs[2].device, Device::kCpu);
  EXPECT_EQ(sample->inputs[2].shape, (Shape{16, static_cast<std::int64_t>(kMaxSuppressedTokens)}));
  EXPECT_EQ(sample->optional_inputs, 1);
  ASSERT_EQ(sample->outputs.size(), 1u);
  EXPECT_EQ(sample->outputs[0].dtype, DType::kI64);

  for (std::string_view name :
       {kArgmaxMethod, std::string_view("forward_4"), kDynamicMethod, kModuleMethod}) {
    Result<MethodMeta> other = m->meta(name, 50, 8, Device::kCuda);
    ASSERT_TRUE(other.ok()) << name << ": " << other.status().to_string();
    EXPECT_EQ(other->optional_inputs, 0) << name;
  }
  EXPECT_EQ(m->meta(kArgmaxMethod, 50, 8, Device::kCuda)->inputs.size(), 1u);
}

TEST(ForwardMethodsTest, NarrowestStaticHoldsTheRowsOrIsNull) {
  ProgramOptions o = small_options();
  o.static_widths = {8, 1, 4};
  Result<ForwardMethods> m = ForwardMethods::build(o, "test");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  for (auto [rows, width] : {std::pair{1, 1}, {2, 4}, {4, 4}, {5, 8}, {8, 8}}) {
    const MethodEntry* e = m->narrowest_static(rows);
    ASSERT_NE(e, nullptr) << rows << " rows";
    EXPECT_EQ(e->kind, MethodKind::kStatic);
    EXPECT_EQ(e->width, width) << rows << " rows";
  }
  // The dynamic method (max_step 16) is not a static one.
  EXPECT_EQ(m->narrowest_static(9), nullptr);
}

TEST(ForwardMethodsTest, WithoutDeviceSamplingThereIsNoSampleMethod) {
  ProgramOptions o = small_options();
  o.device_sampling = false;
  Result<ForwardMethods> m = ForwardMethods::build(o, "test");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->find(kSampleMethod), nullptr);
  EXPECT_EQ(m->meta(kSampleMethod, 50, 8, Device::kCpu).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace cellm::program
