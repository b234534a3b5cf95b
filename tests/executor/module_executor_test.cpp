#include "executor/module_executor.h"

#include <gtest/gtest.h>

#include "driver.h"
#include "toy_program.h"

namespace cellm::executor::testing {
namespace {

const std::vector<std::int64_t> kLong = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                         11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
const std::vector<std::int64_t> kShort = {5, 9, 1};

ToyConfig module_config(bool selects_rows) {
  ToyConfig c;
  c.module_width = 8;
  c.module_selects_rows = selects_rows;
  return c;
}

class ModuleExecutorTest : public ::testing::TestWithParam<bool> {};

TEST_P(ModuleExecutorTest, SlicesAtTheMethodWidthAndMatchesGreedy) {
  const ToyConfig config = module_config(GetParam());
  auto program = std::make_shared<ToyProgram>(config);
  auto made = ModuleExecutor::create(program, 3, 40);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  ModuleExecutor& ex = **made;
  EXPECT_EQ(ex.preferred_batch_tokens(), 8u);
  ASSERT_TRUE(ex.initialize());
  Gen a = start(ex, kLong), b = start(ex, kShort), c = start(ex, kShort);
  // 20 + 3 + 3 = 26 tokens: slices of 8, 8, 8 and 2, unpadded.
  ASSERT_TRUE(run(ex, {{&a, prefill(a, 20)}, {&b, prefill(b, 3)}, {&c, prefill(c, 3)}}));
  ASSERT_EQ(program->calls.size(), 4u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(program->calls[i].width, 8);
  EXPECT_EQ(program->calls[3].width, 2);
  EXPECT_EQ(ex.forward_calls(), 4u);
  ASSERT_TRUE(decode_all(ex, {&a, &b, &c}, 6));
  EXPECT_EQ(a.generated, toy_greedy(kLong, 6, config.windows, config.vocab));
  EXPECT_EQ(b.generated, toy_greedy(kShort, 6, config.windows, config.vocab));
  EXPECT_EQ(c.generated, b.generated);
  EXPECT_EQ(ex.kv_metrics().cells_used, 26 + 3 * 5);
}

INSTANTIATE_TEST_SUITE_P(Modes, ModuleExecutorTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Selected" : "AllRows"; });

TEST(ModuleExecutorCreateTest, RefusesWhatItCannotRun) {
  auto program = std::make_shared<ToyProgram>(module_config(true));
  const auto refused = [&](Result<std::unique_ptr<ModuleExecutor>> r, StatusCode code,
                           std::string_view fragment) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(fragment), std::string_view::npos) << r.status().message();
  };
  refused(ModuleExecutor::create(nullptr, 1, 1), StatusCode::kInvalidArgument, "null");
  refused(ModuleExecutor::create(program, 0, 8), StatusCode::kInvalidArgument, "positive");
  refused(ModuleExecutor::create(program, 1, 65), StatusCode::kInvalidArgument, "context");
  refused(ModuleExecutor::create(program, 8, 64), StatusCode::kInvalidArgument, "pool");
  refused(ModuleExecutor::create(program, 1, 8, "decode"), StatusCode::kInvalidProgram, "decode");
  refused(ModuleExecutor::create(program, 1, 8, "forward_4"), StatusCode::kInvalidProgram,
          "dynamic");
  program->metas["forward"].outputs[0].shape = {8, 30};
  refused(ModuleExecutor::create(program, 1, 8), StatusCode::kInvalidProgram, "get_vocab_size");
  // Without a published pool the pool is sized to the sessions.
  auto unbounded = std::make_shared<ToyProgram>(module_config(true));
  unbounded->constants.erase("get_offgraph_kv_max_cells");
  auto made = ModuleExecutor::create(unbounded, 8, 64);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  EXPECT_EQ((*made)->kv_metrics().flat_capacity, 8 * 64 + 1);
}

TEST(ModuleExecutorCreateTest, DeviceLogitsFailTheBatch) {
  ToyConfig config = module_config(true);
  config.device_logits = true;
  auto program = std::make_shared<ToyProgram>(config);
  auto made = ModuleExecutor::create(program, 1, 16);
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE((*made)->initialize());
  Gen a = start(**made, kShort);
  EXPECT_FALSE(run(**made, {{&a, prefill(a, 3)}}));
}

// The test double itself must notice the mistakes the executor tests rely on.
TEST(ToyProgramTest, DetectsBadPaddingAndMissingPlacements) {
  auto program = std::make_shared<ToyProgram>(ToyConfig{});
  auto cache = cache::CellCache::create(cache::CellCacheConfig{64, 2, 16});
  ASSERT_TRUE(cache.ok());
  std::shared_ptr<cache::CellCache> shared(std::move(cache).value());
  ASSERT_TRUE(program->bind_cache(shared).is_ok());
  ASSERT_TRUE(program->load_method("forward_4").is_ok());
  const cache::SeqId seq = *shared->seq_new();
  Tensor tokens = Tensor::empty(DType::kI64, {1, 4});
  Tensor positions = Tensor::empty(DType::kI64, {4});
  Tensor selector = Tensor::empty(DType::kI64, {4});
  tokens.data_as<std::int64_t>()[0] = 7;
  const std::vector<Tensor> inputs = {tokens, positions, selector};
  EXPECT_FALSE(program->execute("forward_4", inputs).ok());  // nothing placed
  const std::vector<cache::SeqId> ids = {seq};
  const std::vector<std::int32_t> at = {0};
  ASSERT_TRUE(shared->place_step(ids, at).ok());
  tokens.data_as<std::int64_t>()[2] = 3;  // a padding row with a real token
  EXPECT_FALSE(program->execute("forward_4", inputs).ok());
  tokens.data_as<std::int64_t>()[2] = 0;
  tokens.data_as<std::int64_t>()[0] = 9;
  ASSERT_TRUE(program->execute("forward_4", inputs).ok());
  const std::vector<std::int32_t> at2 = {1};
  ASSERT_TRUE(shared->place_step(ids, at2).ok());
  EXPECT_FALSE(program->execute("forward_4", inputs).ok());  // position 0 is not the placed 1
  positions.data_as<std::int64_t>()[0] = 1;
  tokens.data_as<std::int64_t>()[0] = 7;
  auto out = program->execute("forward_4", inputs);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  std::vector<float> row((*out)[0].data_as<float>(), (*out)[0].data_as<float>() + 32);
  const auto best = std::max_element(row.begin(), row.end()) - row.begin();
  const std::vector<std::int64_t> history = {9, 7};
  EXPECT_EQ(best, toy_next_token(history, {0, 4}, 32));
}

}  // namespace
}  // namespace cellm::executor::testing
