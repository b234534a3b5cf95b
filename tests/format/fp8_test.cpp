// FP8 E4M3: the decoder against an independent round-to-nearest-even encoder
// (fp8_reference.h) on all 256 codes and against values the OCP FP8 spec
// lists; dequantization with per-tensor, per-row and 2-D block scale grids
// (partial edge blocks included); and the safetensors reader handing out
// F8_E4M3 / F8_E5M2 tensors as raw u8 codes tagged with their encoding.
#include "format/fp8.h"

#include <cmath>
#include <cstring>

#include <gtest/gtest.h>

#include "format/fp8_reference.h"
#include "format/safetensors.h"
#include "format/test_writers.h"

namespace cellm::format {
namespace {

using testing::Bytes;
using testing::encode_e4m3;

TEST(Fp8Encoder, KnowsTheSpecValues) {
  // OCP 8-bit floating point specification, E4M3 column.
  EXPECT_EQ(encode_e4m3(448.0).code, 0x7E);  // largest normal
  EXPECT_EQ(encode_e4m3(-448.0).code, 0xFE);
  EXPECT_EQ(encode_e4m3(std::ldexp(1.0, -6)).code, 0x08);  // smallest normal
  EXPECT_EQ(encode_e4m3(std::ldexp(7.0, -9)).code, 0x07);  // largest subnormal, 0.875 × 2^-6
  EXPECT_EQ(encode_e4m3(std::ldexp(1.0, -9)).code, 0x01);  // smallest subnormal
  EXPECT_EQ(encode_e4m3(1.0).code, 0x38);
  EXPECT_EQ(encode_e4m3(-2.0).code, 0xC0);
  EXPECT_EQ(encode_e4m3(0.0).code, 0x00);
  EXPECT_EQ(encode_e4m3(-0.0).code, 0x80);
  EXPECT_EQ(encode_e4m3(std::nan("")).code, 0x7F);
  // Ties go to the even mantissa: 464 (halfway 448 / 480) rounds to 448; above it is NaN.
  EXPECT_EQ(encode_e4m3(1.0625).code, 0x38);  // halfway 1 / 1.125
  EXPECT_EQ(encode_e4m3(1.1875).code, 0x3A);  // halfway 1.125 / 1.25
  EXPECT_EQ(encode_e4m3(std::ldexp(1.5, -9)).code, 0x02);
  EXPECT_EQ(encode_e4m3(std::ldexp(0.5, -9)).code, 0x00);
  EXPECT_EQ(encode_e4m3(std::ldexp(15.5, -10)).code, 0x08);  // rounds up out of the subnormals
  EXPECT_EQ(encode_e4m3(463.0).code, 0x7E);
  EXPECT_EQ(encode_e4m3(464.0).code, 0x7E);
  EXPECT_EQ(encode_e4m3(464.5).code, 0x7F);
  EXPECT_EQ(encode_e4m3(-1e9).code, 0xFF);
  EXPECT_EQ(encode_e4m3(1.3).value, 1.25);
}

TEST(Fp8Decoder, AgreesWithTheEncoderOnEveryCode) {
  int nans = 0;
  for (int code = 0; code < 256; ++code) {
    const float v = e4m3_to_f32(static_cast<std::uint8_t>(code));
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << "code " << code;
      ++nans;
      continue;
    }
    ASSERT_TRUE(std::isfinite(v)) << "code " << code;  // E4M3FN has no infinities
    const auto back = encode_e4m3(v);
    EXPECT_EQ(back.code, code) << "value " << v;
    EXPECT_EQ(static_cast<double>(v), back.value) << "code " << code;
    EXPECT_EQ(std::signbit(v), (code & 0x80) != 0) << "code " << code;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(e4m3_to_f32(0x77), 240.0f);
  for (int code = 1; code < 0x7F; ++code) {  // strictly increasing over the positive codes
    EXPECT_LT(e4m3_to_f32(static_cast<std::uint8_t>(code - 1)),
              e4m3_to_f32(static_cast<std::uint8_t>(code)));
  }
}

// Codes [rows, cols] and a scale grid; the expectation is computed from the
// encoder's values, not from the decoder.
struct Grid {
  std::int64_t rows, cols, br, bc;
};

class Fp8Dequantize : public ::testing::TestWithParam<Grid> {};

TEST_P(Fp8Dequantize, MultipliesEachCodeByItsBlockScale) {
  const Grid g = GetParam();
  const std::int64_t gr = (g.rows + g.br - 1) / g.br;
  const std::int64_t gc = (g.cols + g.bc - 1) / g.bc;
  Tensor codes = Tensor::empty(DType::kU8, {g.rows, g.cols});
  std::vector<double> values(static_cast<std::size_t>(g.rows * g.cols));
  auto* c = codes.data_as<std::uint8_t>();
  for (std::int64_t i = 0; i < g.rows * g.cols; ++i) {
    // A spread of magnitudes and signs, including subnormals and 448.
    const double x = std::ldexp((i % 2 ? -1.0 : 1.0) * (1.0 + 0.37 * static_cast<double>(i % 11)),
                                static_cast<int>(i % 17) - 9);
    const auto e = encode_e4m3(std::fmin(std::fmax(x, -448.0), 448.0));
    c[i] = e.code;
    values[static_cast<std::size_t>(i)] = e.value;
  }
  Tensor scales = Tensor::empty(DType::kF32, {gr, gc});
  for (std::int64_t i = 0; i < gr * gc; ++i) {
    scales.data_as<float>()[i] = 0.001f * static_cast<float>(i + 3);
  }
  auto out = dequantize_e4m3(codes, scales, g.br, g.bc, DType::kF32, "w");
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  auto bf = dequantize_e4m3(codes, scales, g.br, g.bc, DType::kBF16, "w");
  ASSERT_TRUE(bf.ok()) << bf.status().to_string();
  for (std::int64_t r = 0; r < g.rows; ++r) {
    for (std::int64_t col = 0; col < g.cols; ++col) {
      const std::int64_t i = r * g.cols + col;
      const float s = scales.data_as<float>()[(r / g.br) * gc + col / g.bc];
      const float want = static_cast<float>(values[static_cast<std::size_t>(i)]) * s;
      ASSERT_EQ(out->data_as<float>()[i], want) << "row " << r << " col " << col;
      ASSERT_EQ(bf->data_as<std::uint16_t>()[i], f32_to_bf16(want));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, Fp8Dequantize,
                         ::testing::Values(Grid{5, 7, 5, 7},         // per tensor
                                           Grid{5, 7, 1, 7},         // per row
                                           Grid{160, 64, 128, 128},  // one partial block row
                                           Grid{33, 20, 8, 6},       // partial edges both ways
                                           Grid{1, 1, 128, 128}));

TEST(Fp8Dequantize, BfloatAndHalfScalesAreRead) {
  Tensor codes = Tensor::empty(DType::kU8, {1, 2});
  codes.data_as<std::uint8_t>()[0] = encode_e4m3(3.0).code;
  codes.data_as<std::uint8_t>()[1] = encode_e4m3(-0.5).code;
  Tensor bf = Tensor::empty(DType::kBF16, {1});
  bf.data_as<std::uint16_t>()[0] = f32_to_bf16(0.25f);
  Tensor half = Tensor::empty(DType::kF16, {1});
  half.data_as<std::uint16_t>()[0] = f32_to_f16(0.25f);
  for (const Tensor& s : {bf, half}) {
    auto out = dequantize_e4m3(codes, s, 1, 2, DType::kF32, "w");
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(out->data_as<float>()[0], 0.75f);
    EXPECT_EQ(out->data_as<float>()[1], -0.125f);
  }
}

TEST(Fp8Dequantize, RefusesMismatchedInputsNamingTheTensor) {
  Tensor codes = Tensor::empty(DType::kU8, {4, 4});
  Tensor two = Tensor::empty(DType::kF32, {2});
  auto r = dequantize_e4m3(codes, two, 4, 4, DType::kF32, "layers.0.q");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("layers.0.q"), std::string::npos);
  EXPECT_NE(r.status().message().find("2 scales"), std::string::npos) << r.status().to_string();
  EXPECT_FALSE(
      dequantize_e4m3(codes, Tensor::empty(DType::kI32, {1}), 4, 4, DType::kF32, "w").ok());
  EXPECT_FALSE(
      dequantize_e4m3(Tensor::empty(DType::kF32, {4, 4}), two, 4, 2, DType::kF32, "w").ok());
  EXPECT_FALSE(
      dequantize_e4m3(codes, Tensor::empty(DType::kF32, {1}), 4, 4, DType::kF16, "w").ok());
  EXPECT_FALSE(
      dequantize_e4m3(codes, Tensor::empty(DType::kF32, {1}), 0, 4, DType::kF32, "w").ok());
}

TEST(Fp8Safetensors, CodesComeOutAsTaggedBytes) {
  testing::SafetensorsBuilder b;
  b.add("w", "F8_E4M3", {2, 3}, Bytes{0x38, 0x7E, 0x01, 0x80, 0xC0, 0x7F});
  b.add("v", "F8_E5M2", {1, 2}, Bytes{0x3C, 0x40});
  b.add_f32("s", {1}, {0.5f});
  auto f = SafetensorsFile::parse(MappedFile::from_bytes(b.build(), "fp8.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const SafetensorsEntry* w = f->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kU8);
  EXPECT_EQ(w->encoding, Encoding::kF8E4M3);
  EXPECT_EQ(f->find("v")->encoding, Encoding::kF8E5M2);
  EXPECT_EQ(f->find("s")->encoding, Encoding::kPlain);
  EXPECT_EQ(encoding_name(Encoding::kF8E4M3), "F8_E4M3");
  auto t = f->tensor("w");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape(), (Shape{2, 3}));
  EXPECT_EQ(t->data_as<std::uint8_t>()[1], 0x7E);
  // Bytes must still match shape × 1.
  testing::SafetensorsBuilder bad;
  bad.add("w", "F8_E4M3", {2, 3}, Bytes(5, 0));
  auto r = SafetensorsFile::parse(MappedFile::from_bytes(bad.build(), "bad.safetensors"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected 6"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace cellm::format
