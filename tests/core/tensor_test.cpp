#include "core/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <gtest/gtest.h>

namespace cellm {
namespace {

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_name(DType::kF16), "f16");
  EXPECT_EQ(*parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_FALSE(parse_dtype("q4").ok());
}

TEST(DTypeTest, Fp8IsOneByteNamedFp8) {
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "fp8");
  EXPECT_EQ(*parse_dtype("fp8"), DType::kF8E4M3);
  EXPECT_EQ(*parse_dtype("float8_e4m3fn"), DType::kF8E4M3);
}

TEST(DTypeTest, KvDtypesAreBf16Fp8AndF32) {
  EXPECT_EQ(*parse_kv_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(*parse_kv_dtype("fp8"), DType::kF8E4M3);
  EXPECT_EQ(*parse_kv_dtype("f8e4m3"), DType::kF8E4M3);
  EXPECT_EQ(*parse_kv_dtype("f32"), DType::kF32);
  for (const char* name : {"int8", "f16", "fp8_e5m2", ""}) {
    const auto refused = parse_kv_dtype(name);
    ASSERT_FALSE(refused.ok()) << name;
    // The refusal names what is accepted.
    const std::string message(refused.status().message());
    for (const char* accepted : {"bf16", "fp8", "f32"}) {
      EXPECT_NE(message.find(accepted), std::string::npos) << message;
    }
  }
}

// E4M3FN codes read as their values: bias 7, subnormals m x 2^-9, one NaN.
TEST(DTypeTest, Fp8ElementsReadAsTheirE4m3Values) {
  const std::uint8_t codes[] = {0x00, 0x80, 0x01, 0x07, 0x08, 0x38, 0x3c, 0xc0, 0x7e, 0xfe, 0x7f};
  const float want[] = {0.0f, -0.0f, 0x1p-9f, 7 * 0x1p-9f, 0x1p-6f, 1.0f,
                        1.5f, -2.0f, 448.0f,  -448.0f,     0.0f};
  Tensor t = Tensor::empty(DType::kF8E4M3, {11});
  std::memcpy(t.data(), codes, sizeof(codes));
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(element_as_f32(t, i), want[i]) << "code " << int{codes[i]};
    EXPECT_EQ(std::signbit(element_as_f32(t, i)), std::signbit(want[i])) << int{codes[i]};
  }
  EXPECT_TRUE(std::isnan(element_as_f32(t, 10)));
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to even.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(-std::numeric_limits<float>::infinity())),
            -std::numeric_limits<float>::infinity());
}

TEST(DTypeTest, F16RoundTripsEveryFiniteValue) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = f16_to_f32(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "bits " << bits;
  }
}

TEST(DTypeTest, F16ConvertsKnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);  // below half the smallest subnormal
}

TEST(TensorTest, EmptyIsZeroedAndOwned) {
  Tensor t = Tensor::empty(DType::kF32, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  for (float v : t.span<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(t.describe(), "f32[2, 3]");
}

TEST(TensorTest, CopiesShareStorageAndCloneCopiesBytes) {
  Tensor a = Tensor::empty(DType::kI32, {4});
  Tensor b = a;
  Tensor c = a.clone();
  a.span<std::int32_t>()[1] = 7;
  EXPECT_EQ(b.span<std::int32_t>()[1], 7);
  EXPECT_EQ(c.span<std::int32_t>()[1], 0);
}

TEST(TensorTest, SliceRowsAndReshapeShareStorage) {
  Tensor t = Tensor::empty(DType::kF32, {3, 2});
  for (int i = 0; i < 6; ++i) t.span<float>()[i] = static_cast<float>(i);
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.span<float>()[0], 2.0f);
  Tensor flat = t.reshape({6});
  EXPECT_EQ(flat.span<float>()[5], 5.0f);
}

TEST(TensorTest, ViewsBorrowAndConvertElements) {
  std::uint16_t data[2] = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f)};
  Tensor v = Tensor::view(data, DType::kBF16, {2});
  EXPECT_EQ(element_as_f32(v, 0), 1.5f);
  EXPECT_EQ(element_as_f32(v, 1), -2.0f);
}

TEST(TensorDeathTest, ReshapeToAnotherSizeAborts) {
  Tensor t = Tensor::empty(DType::kF32, {2, 2});
  EXPECT_DEATH((void)t.reshape({5}), "reshape");
}

}  // namespace
}  // namespace cellm
