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

TEST(ForwardMethodsTest, DecodeGreedyIsExportedWhereTheBackendRunsItWithTheSamplers) {
  Result<ForwardMethods> plain = ForwardMethods::build(small_options(), "test");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->find(kDecodeGreedyMethod), nullptr);
  Result<ForwardMethods> m = ForwardMethods::build(small_options(), "test", true);
  ASSERT_TRUE(m.ok());
  Result<MethodMeta> meta = m->meta(kDecodeGreedyMethod, 50, 8, Device::kCuda);
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  ASSERT_EQ(meta->inputs.size(), 2u);
  EXPECT_EQ(meta->inputs[0].shape, (Shape{1, 4}));
  EXPECT_EQ(meta->inputs[1].shape, (Shape{kDecodeGreedyMaxSteps, 4}));
  EXPECT_EQ(meta->outputs[0].shape, (Shape{kDecodeGreedyMaxSteps, 4}));
  EXPECT_EQ(m->decode_greedy_width(), 4);
  ProgramOptions o = small_options();
  o.device_sampling = false;
  Result<ForwardMethods> no_samplers = ForwardMethods::build(o, "test", true);
  ASSERT_TRUE(no_samplers.ok());
  EXPECT_EQ(no_samplers->find(kDecodeGreedyMethod), nullptr);
}

// Two sequences at lengths 3 and 5, three steps placed step-major.
struct ChainFixture {
  std::unique_ptr<cache::CellCache> cache;
  cache::SeqId a = -1, b = -1;
  Tensor tokens = Tensor::empty(DType::kI64, {1, 2});
  Tensor positions = Tensor::empty(DType::kI64, {3, 2});

  ChainFixture() {
    cache::CellCacheConfig c;
    c.max_cells = 64;
    c.max_sequences = 4;
    c.max_seq_len = 16;
    cache = std::move(cache::CellCache::create(c)).value();
    a = *cache->seq_new();
    b = *cache->seq_new();
    std::vector<cache::SeqId> ids = {a, a, a, b, b, b, b, b};
    std::vector<std::int32_t> pos = {0, 1, 2, 0, 1, 2, 3, 4};
    EXPECT_TRUE(cache->place_step(ids, pos).ok());
    tokens.data_as<std::int64_t>()[0] = 7;
    tokens.data_as<std::int64_t>()[1] = 9;
    for (std::int64_t s = 0; s < 3; ++s) {
      positions.data_as<std::int64_t>()[2 * s] = 3 + s;
      positions.data_as<std::int64_t>()[2 * s + 1] = 5 + s;
    }
  }
  Status place(std::vector<cache::SeqId> ids, std::vector<std::int32_t> pos) {
    return cache->place_step(ids, pos).status();
  }
};

TEST(ForwardMethodsTest, DecodeGreedyChecksItsPlacementStepByStep) {
  Result<ForwardMethods> m = ForwardMethods::build(small_options(), "test", true);
  ASSERT_TRUE(m.ok());
  ChainFixture f;
  ASSERT_TRUE(f.place({f.a, f.b, f.a, f.b, f.a, f.b}, {3, 5, 4, 6, 5, 7}).is_ok());
  const std::vector<Tensor> inputs = {f.tokens, f.positions};
  Result<DecodeGreedyCall> call = m->check_decode_greedy(inputs, 50, *f.cache);
  ASSERT_TRUE(call.ok()) << call.status().to_string();
  EXPECT_EQ(call->steps, 3);
  EXPECT_EQ(call->width, 2);
  ASSERT_EQ(call->rows.size(), 6u);
  EXPECT_EQ(call->rows[4].seq, f.a);
  EXPECT_EQ(call->rows[4].position, 5);
  EXPECT_EQ(call->rows[5].seq, f.b);
  EXPECT_EQ(call->rows[5].position, 7);
  EXPECT_EQ(call->rows[5].cell, f.cache->cell_table(f.b)[7]);

  // Positions that disagree with the placement, and tokens outside the vocabulary.
  Tensor moved = f.positions.clone();
  moved.data_as<std::int64_t>()[3] = 9;
  EXPECT_EQ(
      m->check_decode_greedy(std::vector<Tensor>{f.tokens, moved}, 50, *f.cache).status().code(),
      StatusCode::kInvalidArgument);
  Tensor big = f.tokens.clone();
  big.data_as<std::int64_t>()[1] = 50;
  EXPECT_FALSE(m->check_decode_greedy(std::vector<Tensor>{big, f.positions}, 50, *f.cache).ok());
  // Wider than forward_4, or no steps.
  Tensor wide = Tensor::empty(DType::kI64, {1, 5});
  Tensor wide_pos = Tensor::empty(DType::kI64, {1, 5});
  EXPECT_FALSE(m->check_decode_greedy(std::vector<Tensor>{wide, wide_pos}, 50, *f.cache).ok());
  Tensor none = Tensor::empty(DType::kI64, {0, 2});
  EXPECT_FALSE(m->check_decode_greedy(std::vector<Tensor>{f.tokens, none}, 50, *f.cache).ok());
}

TEST(ForwardMethodsTest, DecodeGreedyRefusesAPlacementThatIsNotStepMajor) {
  Result<ForwardMethods> m = ForwardMethods::build(small_options(), "test", true);
  ASSERT_TRUE(m.ok());
  const std::vector<std::string> why = {"sequence-major", "one sequence twice"};
  for (std::size_t c = 0; c < why.size(); ++c) {
    ChainFixture f;
    if (c == 0) {
      ASSERT_TRUE(f.place({f.a, f.a, f.a, f.b, f.b, f.b}, {3, 4, 5, 5, 6, 7}).is_ok());
    } else {
      ASSERT_TRUE(f.place({f.a, f.a, f.a, f.a, f.a, f.a}, {3, 4, 5, 6, 7, 8}).is_ok());
      for (std::int64_t s = 0; s < 3; ++s) {
        f.positions.data_as<std::int64_t>()[2 * s] = 3 + 2 * s;
        f.positions.data_as<std::int64_t>()[2 * s + 1] = 4 + 2 * s;
      }
    }
    Result<DecodeGreedyCall> call =
        m->check_decode_greedy(std::vector<Tensor>{f.tokens, f.positions}, 50, *f.cache);
    EXPECT_EQ(call.status().code(), StatusCode::kInvalidArgument) << why[c];
  }
}

}  // namespace
}  // namespace cellm::program
