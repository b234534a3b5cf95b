// Safetensors reader: valid files (fixtures and files written here), and a
// refusal with a clear message for every kind of corruption, derived from a
// valid small file. ASan/UBSan builds check that no refusal over-reads.
#include <gtest/gtest.h>

#include <cstring>

#include "format/safetensors.h"
#include "format/test_writers.h"
#include "support/testdata.h"

namespace cellm::format {
namespace {

using testing::Bytes;
using testing::SafetensorsBuilder;

Result<SafetensorsFile> parse(const Bytes& b) {
  return SafetensorsFile::parse(MappedFile::from_bytes(b, "test.safetensors"));
}

SafetensorsBuilder small() {
  SafetensorsBuilder b;
  b.add_f32("a", {2, 3}, {1, 2, 3, 4, 5, 6});
  b.add("b", "BF16", {2}, {0x80, 0x3f, 0x00, 0x40});  // 1.0, 2.0
  b.add("c", "I64", {1}, testing::bytes_of(std::vector<std::int64_t>{-7}));
  return b;
}

void expect_refused(const Bytes& b, std::string_view needle) {
  auto r = parse(b);
  ASSERT_FALSE(r.ok()) << "accepted a corrupt file; expected an error mentioning " << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("test.safetensors"), std::string::npos);
}

TEST(Safetensors, ReadsAValidFile) {
  auto r = parse(small().build());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->entries().size(), 3u);
  EXPECT_EQ(r->metadata().at("format"), "pt");
  auto a = r->tensor("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->shape(), (Shape{2, 3}));
  EXPECT_EQ(a->span<float>()[5], 6.0f);
  auto b = r->tensor("b");
  EXPECT_EQ(element_as_f32(*b, 1), 2.0f);
  EXPECT_EQ(r->tensor("c")->span<std::int64_t>()[0], -7);
  EXPECT_EQ(r->tensor("zzz").status().code(), StatusCode::kNotFound);
}

TEST(Safetensors, TensorsKeepTheBytesAliveAfterTheFileObjectDies) {
  Tensor a;
  {
    auto r = parse(small().build());
    ASSERT_TRUE(r.ok());
    a = *r->tensor("a");
  }
  EXPECT_EQ(a.span<float>()[4], 5.0f);
}

TEST(Safetensors, UnalignedDataIsCopiedNotMisread) {
  // A header whose length is not a multiple of 4 leaves f32 data unaligned.
  auto s = small();
  std::string h = s.header() + " ";
  while ((8 + h.size()) % 4 != 1) h += ' ';
  Bytes b;
  testing::put<std::uint64_t>(b, h.size());
  b.insert(b.end(), h.begin(), h.end());
  const Bytes d = s.data();
  b.insert(b.end(), d.begin(), d.end());
  auto r = parse(b);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto a = r->tensor("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a->data()) % 4, 0u);
  EXPECT_EQ(a->span<float>()[2], 3.0f);
}

TEST(Safetensors, ReadsTheFixtureExpectations) {
  auto r = SafetensorsFile::open(testing::testdata_dir() / "hf_models/llama/expected.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto prompt = r->tensor("prompt_1");
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(prompt->dtype(), DType::kI64);
  EXPECT_EQ(prompt->shape(), (Shape{7}));
  auto logits = r->tensor("logits_1");
  ASSERT_TRUE(logits.ok());
  EXPECT_EQ(logits->dtype(), DType::kF32);
  EXPECT_EQ(logits->shape(), (Shape{22, 384}));
  for (std::int64_t id : prompt->span<std::int64_t>()) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 384);
  }
}

TEST(Safetensors, EveryTruncationIsRefused) {
  const Bytes full = small().build();
  for (std::size_t n = 0; n < full.size(); ++n) {
    auto r = parse(Bytes(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
    EXPECT_FALSE(r.ok()) << "accepted a file cut at " << n << " of " << full.size();
  }
}

TEST(Safetensors, HeaderLengthPastTheEnd) {
  Bytes b = small().build();
  b[0] = 0xff;
  b[1] = 0xff;
  expect_refused(b, "past the end");
  Bytes huge = small().build();
  for (int i = 0; i < 8; ++i) huge[static_cast<std::size_t>(i)] = 0xff;
  expect_refused(huge, "past the end");
}

TEST(Safetensors, HeaderThatIsNotJson) {
  expect_refused(SafetensorsBuilder::assemble("{\"a\": [", {}), "not valid JSON");
  expect_refused(SafetensorsBuilder::assemble("[1, 2]", {}), "not a JSON object");
}

TEST(Safetensors, OverlappingOffsets) {
  auto s = small();
  std::string h = s.header();
  const std::string from = "\"data_offsets\":[24,28]";
  ASSERT_NE(h.find(from), std::string::npos) << h;
  h.replace(h.find(from), from.size(), "\"data_offsets\":[20,24]");
  expect_refused(SafetensorsBuilder::assemble(h, s.data()), "overlap");
}

TEST(Safetensors, OffsetsOutsideTheDataArea) {
  auto s = small();
  std::string h = s.header();
  const std::string from = "\"data_offsets\":[28,36]";
  ASSERT_NE(h.find(from), std::string::npos) << h;
  h.replace(h.find(from), from.size(), "\"data_offsets\":[36,44]");
  expect_refused(SafetensorsBuilder::assemble(h, s.data()), "outside the data area");
  std::string backwards = s.header();
  backwards.replace(backwards.find(from), from.size(), "\"data_offsets\":[36,28]");
  expect_refused(SafetensorsBuilder::assemble(backwards, s.data()), "outside the data area");
}

TEST(Safetensors, ByteSizeMustMatchShapeTimesDtype) {
  SafetensorsBuilder b;
  b.add("a", "F32", {2, 3}, Bytes(20, 0));
  expect_refused(b.build(), "expected 24");
}

TEST(Safetensors, UnknownAndUnsupportedDtypes) {
  SafetensorsBuilder b;
  b.add("a", "Q9", {1}, Bytes(4, 0));
  expect_refused(b.build(), "unknown dtype 'Q9'");
  SafetensorsBuilder f64;
  f64.add("a", "F64", {1}, Bytes(8, 0));
  auto r = parse(f64.build());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported);
  EXPECT_NE(r.status().message().find("F64"), std::string::npos);
}

TEST(Safetensors, AbsurdAndMalformedShapes) {
  SafetensorsBuilder huge;
  huge.add("a", "F32", {1LL << 40, 1LL << 40}, Bytes(4, 0));
  expect_refused(huge.build(), "absurd shape");
  SafetensorsBuilder negative;
  negative.add("a", "F32", {-1}, Bytes(4, 0));
  expect_refused(negative.build(), "shape entry");
  SafetensorsBuilder deep;
  deep.add("a", "F32", {1, 1, 1, 1, 1, 1, 1, 1, 1}, Bytes(4, 0));
  expect_refused(deep.build(), "rank 9");
  expect_refused(SafetensorsBuilder::assemble(R"({"a":{"dtype":"F32","shape":[1]}})", Bytes(4, 0)),
                 "data_offsets");
  expect_refused(SafetensorsBuilder::assemble(R"({"a":7})", {}), "not an object");
}

TEST(Safetensors, MissingFileIsNotFound) {
  auto r = SafetensorsFile::open("/nonexistent/cellm.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace cellm::format
