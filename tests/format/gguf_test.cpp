// GGUF reader: every metadata type (nested arrays too), versions 2 and 3,
// alignment, tensor access, and a clear refusal for each corruption of a
// valid small file written here (truncations, absurd counts, strings past
// the end, data past the end, misaligned or overlapping tensors, bad types).
#include "format/gguf.h"

#include <cstring>

#include <gtest/gtest.h>

#include "format/test_writers.h"

namespace cellm::format {
namespace {

using testing::Bytes;
using testing::GgufBuilder;

Result<GgufFile> parse(const Bytes& b) {
  return GgufFile::parse(MappedFile::from_bytes(b, "test.gguf"));
}

void expect_refused(const Bytes& b, std::string_view needle) {
  auto r = parse(b);
  ASSERT_FALSE(r.ok()) << "accepted a corrupt file; expected an error mentioning " << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
}

Bytes f32_bytes(std::vector<float> v) {
  return testing::bytes_of(v);
}

GgufBuilder small(std::uint32_t version = 3) {
  GgufBuilder g(version);
  g.kv_str("general.architecture", "llama")
      .kv_u32("llama.block_count", 2)
      .kv_f32("llama.rope.freq_base", 10000.0f)
      .kv_bool("tokenizer.ggml.add_bos_token", true)
      .kv_strs("tokenizer.ggml.tokens", {"<s>", "a", "bc"})
      .kv_f32s("tokenizer.ggml.scores", {0.0f, -1.5f, -2.0f})
      .kv_i32s("tokenizer.ggml.token_type", {3, 1, 1});
  Bytes i8;
  testing::put<std::int8_t>(i8, -5);
  g.kv_raw("x.i8", GgufBuilder::kI8, i8);
  Bytes u16;
  testing::put<std::uint16_t>(u16, 65535);
  g.kv_raw("x.u16", GgufBuilder::kU16, u16);
  Bytes i16;
  testing::put<std::int16_t>(i16, -300);
  g.kv_raw("x.i16", GgufBuilder::kI16, i16);
  Bytes i32;
  testing::put<std::int32_t>(i32, -70000);
  g.kv_raw("x.i32", GgufBuilder::kI32, i32);
  Bytes u64;
  testing::put<std::uint64_t>(u64, 1ULL << 40);
  g.kv_raw("x.u64", GgufBuilder::kU64, u64);
  Bytes i64;
  testing::put<std::int64_t>(i64, -(1LL << 40));
  g.kv_raw("x.i64", GgufBuilder::kI64, i64);
  Bytes f64;
  testing::put<double>(f64, 0.125);
  g.kv_raw("x.f64", GgufBuilder::kF64, f64);
  Bytes u8;
  testing::put<std::uint8_t>(u8, 200);
  g.kv_raw("x.u8", GgufBuilder::kU8, u8);
  // An array of two arrays of u8: [[1, 2], [3]].
  Bytes nested;
  testing::put<std::uint32_t>(nested, GgufBuilder::kArray);
  testing::put<std::uint64_t>(nested, 2);
  testing::put<std::uint32_t>(nested, GgufBuilder::kU8);
  testing::put<std::uint64_t>(nested, 2);
  nested.push_back(1);
  nested.push_back(2);
  testing::put<std::uint32_t>(nested, GgufBuilder::kU8);
  testing::put<std::uint64_t>(nested, 1);
  nested.push_back(3);
  g.kv_raw("x.nested", GgufBuilder::kArray, nested);
  g.tensor("w", {4, 2}, 0, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  g.tensor("h", {3}, 1, {0x00, 0x3c, 0x00, 0x40, 0x00, 0xc0});  // f16 1, 2, -2
  return g;
}

TEST(Gguf, ReadsEveryMetadataType) {
  auto r = parse(small().build());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->version(), 3u);
  EXPECT_EQ(*r->find("general.architecture")->as_string(), "llama");
  EXPECT_EQ(r->find("llama.block_count")->as_uint(), 2u);
  EXPECT_EQ(r->find("llama.rope.freq_base")->as_float(), 10000.0);
  EXPECT_EQ(r->find("tokenizer.ggml.add_bos_token")->as_bool(), true);
  EXPECT_EQ(r->find("tokenizer.ggml.tokens")->strings,
            (std::vector<std::string>{"<s>", "a", "bc"}));
  EXPECT_EQ(r->find("tokenizer.ggml.scores")->floats[1], -1.5);
  EXPECT_EQ(r->find("tokenizer.ggml.token_type")->ints, (std::vector<std::int64_t>{3, 1, 1}));
  EXPECT_EQ(r->find("x.i8")->as_int(), -5);
  EXPECT_FALSE(r->find("x.i8")->as_uint().has_value());
  EXPECT_EQ(r->find("x.u16")->as_uint(), 65535u);
  EXPECT_EQ(r->find("x.i16")->as_int(), -300);
  EXPECT_EQ(r->find("x.i32")->as_int(), -70000);
  EXPECT_EQ(r->find("x.u64")->as_uint(), 1ULL << 40);
  EXPECT_EQ(r->find("x.i64")->as_int(), -(1LL << 40));
  EXPECT_EQ(r->find("x.f64")->as_float(), 0.125);
  EXPECT_EQ(r->find("x.u8")->as_uint(), 200u);
  const GgufValue* nested = r->find("x.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arrays.size(), 2u);
  EXPECT_EQ(nested->arrays[0].ints, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(nested->arrays[1].ints, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(nested->array_size(), 2u);
  // Typed lookups name the key when the type is wrong.
  auto wrong = r->get_uint("general.architecture");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("general.architecture"), std::string::npos);
  EXPECT_FALSE(r->get_uint("absent.key")->has_value());
}

TEST(Gguf, TensorsViewAndDequantize) {
  auto r = parse(small().build());
  ASSERT_TRUE(r.ok());
  const GgufTensorInfo* w = r->find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape(), (Shape{2, 4}));  // ne reversed: rows of 4
  auto v = r->view(*w);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->span<float>()[6], 7.0f);
  const GgufTensorInfo* h = r->find_tensor("h");
  auto hf = r->dequantize(*h, DType::kF32);
  ASSERT_TRUE(hf.ok());
  EXPECT_EQ(hf->span<float>()[2], -2.0f);
  auto hb = r->dequantize(*h, DType::kBF16);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(element_as_f32(*hb, 1), 2.0f);
  EXPECT_EQ(r->tensor_bytes(*w).size(), 32u);
}

TEST(Gguf, Version2ReadsVersion1AndBigEndianDoNot) {
  EXPECT_TRUE(parse(small(2).build()).ok());
  auto v1 = parse(small(1).build());
  ASSERT_FALSE(v1.ok());
  EXPECT_EQ(v1.status().code(), StatusCode::kNotSupported);
  auto be = parse(small(0x03000000).build());
  ASSERT_FALSE(be.ok());
  EXPECT_NE(be.status().message().find("big-endian"), std::string::npos);
  Bytes bad = small().build();
  bad[0] = 'X';
  expect_refused(bad, "bad magic");
}

TEST(Gguf, HonoursGeneralAlignment) {
  auto g = small();
  g.alignment(64);
  auto r = parse(g.build());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->alignment(), 64u);
  EXPECT_EQ(r->find_tensor("h")->offset % 64, 0u);
  EXPECT_EQ(r->view(*r->find_tensor("w"))->span<float>()[0], 1.0f);
  auto bad = small();
  bad.kv_u32("general.alignment", 48);
  expect_refused(bad.build(), "power of two");
}

TEST(Gguf, EveryTruncationIsRefused) {
  const Bytes full = small().build();
  for (std::size_t n = 0; n < full.size(); ++n) {
    auto r = parse(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
    EXPECT_FALSE(r.ok()) << "accepted a file cut at " << n << " of " << full.size();
  }
}

// Offsets of header fields in a file with no metadata and one tensor.
TEST(Gguf, AbsurdCounts) {
  Bytes b = GgufBuilder().tensor("w", {2}, 0, f32_bytes({1, 2})).build();
  Bytes kv = b;
  std::uint64_t huge = 1ULL << 60;
  std::memcpy(kv.data() + 16, &huge, 8);
  expect_refused(kv, "metadata entries");
  Bytes tc = b;
  std::memcpy(tc.data() + 8, &huge, 8);
  expect_refused(tc, "tensors but only");
}

TEST(Gguf, StringAndArrayLengthsPastTheEnd) {
  Bytes b = GgufBuilder().kv_str("k", "value").build();
  // key "k": len at 24, byte at 32, type at 33, value length at 37.
  std::uint64_t huge = 1ULL << 40;
  Bytes key = b;
  std::memcpy(key.data() + 24, &huge, 8);
  expect_refused(key, "metadata key #0");
  Bytes val = b;
  std::memcpy(val.data() + 37, &huge, 8);
  expect_refused(val, "the string 'k'");
  Bytes arr = GgufBuilder().kv_f32s("k", {1, 2}).build();
  std::memcpy(arr.data() + 41, &huge, 8);  // after the element type
  expect_refused(arr, "claims 1099511627776 elements");
  // Arrays nested deeper than any real file are refused, not recursed into.
  Bytes deep;
  for (int i = 0; i < 20; ++i) {
    testing::put<std::uint32_t>(deep, GgufBuilder::kArray);
    testing::put<std::uint64_t>(deep, 1);
  }
  testing::put<std::uint32_t>(deep, GgufBuilder::kU8);
  testing::put<std::uint64_t>(deep, 0);
  expect_refused(GgufBuilder().kv_raw("d", GgufBuilder::kArray, deep).build(), "deeper");
}

TEST(Gguf, TensorDataPastTheEnd) {
  Bytes b = GgufBuilder().tensor("w", {4}, 0, f32_bytes({1, 2, 3, 4})).build();
  b.resize(b.size() - 4);
  expect_refused(b, "truncated");
}

TEST(Gguf, MisalignedAndOverlappingTensors) {
  Bytes b = GgufBuilder()
                .tensor("a", {8}, 0, f32_bytes(std::vector<float>(8, 1)))
                .tensor("b", {8}, 0, f32_bytes(std::vector<float>(8, 2)))
                .build();
  // Tensor "b" info: offset is its last 8 bytes, just before the padding.
  // Layout: 24 header + ("a": 8+1+4+8+4+8) + ("b": 8+1+4+8+4) then offset.
  const std::size_t b_offset_at = 24 + 33 + 25;
  std::uint64_t off = 0;
  std::memcpy(&off, b.data() + b_offset_at, 8);
  ASSERT_EQ(off, 32u);
  Bytes mis = b;
  off = 4;
  std::memcpy(mis.data() + b_offset_at, &off, 8);
  expect_refused(mis, "not a multiple of the alignment");
  Bytes over = b;
  off = 0;
  std::memcpy(over.data() + b_offset_at, &off, 8);
  expect_refused(over, "overlap");
}

TEST(Gguf, BadTensorDescriptions) {
  expect_refused(GgufBuilder().tensor("w", {2}, 99, Bytes(8, 0)).build(), "unknown GGML type 99");
  expect_refused(GgufBuilder().tensor("w", {16}, 8, Bytes(34, 0)).build(), "block size 32");
  expect_refused(GgufBuilder().tensor("w", {1, 1, 1, 1, 1}, 0, Bytes(4, 0)).build(), "rank 5");
  expect_refused(GgufBuilder().tensor("w", {1ULL << 40, 1ULL << 40}, 0, Bytes(4, 0)).build(),
                 "absurd dimension");
  expect_refused(GgufBuilder().tensor("w", {0}, 0, {}).build(), "absurd dimension");
  expect_refused(
      GgufBuilder().tensor("w", {1}, 0, Bytes(4, 0)).tensor("w", {1}, 0, Bytes(4, 0)).build(),
      "appears twice");
  expect_refused(GgufBuilder().kv_u32("k", 1).kv_u32("k", 2).build(), "appears twice");
  expect_refused(GgufBuilder().kv_raw("k", 77, {}).build(), "unknown type 77");
  Bytes flag;
  flag.push_back(2);
  expect_refused(GgufBuilder().kv_raw("k", GgufBuilder::kBool, flag).build(), "bool");
}

TEST(Gguf, QuantizedTensorsHaveNoDirectView) {
  auto r = parse(GgufBuilder().tensor("q", {32}, 8, Bytes(34, 0)).build());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto v = r->view(r->tensors()[0]);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kNotSupported);
  // Q8_K (an intermediate of llama.cpp's dot products) is never dequantized.
  auto unsupported = parse(GgufBuilder().tensor("q", {256}, 15, Bytes(292, 0)).build());
  ASSERT_TRUE(unsupported.ok());
  auto d = unsupported->dequantize(unsupported->tensors()[0], DType::kF32);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("Q8_K"), std::string::npos) << d.status().to_string();
}

}  // namespace
}  // namespace cellm::format
