#include "executor/session_table.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace cellm::executor {
namespace {

using cache::CellCache;
using cache::CellCacheConfig;

Input tokens_input(SessionId sid, std::vector<Token> tokens, Position position, bool output,
                   std::size_t offset = 0, std::size_t size = 0) {
  Input in;
  in.sid = sid;
  in.produce_output = output;
  in.offset = offset;
  in.size = size == 0 ? tokens.size() - offset : size;
  in.payload = std::make_shared<const std::vector<Token>>(std::move(tokens));
  in.position = position;
  return in;
}

BatchInput batch_of(std::vector<Input> inputs) {
  return BatchInput{std::move(inputs)};
}

// Everything a refused pack must leave alone.
struct CacheState {
  std::vector<std::vector<cache::CellId>> tables;
  cache::CellCacheMetrics metrics;
  bool operator==(const CacheState&) const = default;
};

class SessionTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = CellCache::create(CellCacheConfig{64, 4, 32});
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    cache_ = std::move(made).value();
    table_ = std::make_unique<SessionTable>(*cache_, 3, 16, 8);
  }

  // Commits `n` tokens to a session directly, as a forward would.
  void place(SessionId sid, int n) {
    const cache::SeqId seq = *table_->sequence(sid);
    std::vector<cache::SeqId> ids(static_cast<std::size_t>(n), seq);
    std::vector<std::int32_t> positions;
    for (int i = 0; i < n; ++i) positions.push_back(cache_->pos(seq) + i);
    ASSERT_TRUE(cache_->place_step(ids, positions).ok());
  }

  // Packs and places, as an executor does.
  void pack_and_place(const BatchInput& batch) {
    auto step = table_->pack(batch);
    ASSERT_TRUE(step.ok()) << step.status().to_string();
    std::vector<std::int32_t> positions(step->positions.begin(), step->positions.end());
    ASSERT_TRUE(cache_->place_step(step->seq_ids, positions).ok());
  }

  CacheState state() const {
    CacheState s;
    for (cache::SeqId seq = 0; seq < 4; ++seq) {
      auto t = cache_->cell_table(seq);
      s.tables.emplace_back(t.begin(), t.end());
    }
    s.metrics = cache_->metrics();
    return s;
  }

  // Expects a refusal with `code` whose message mentions every fragment, and
  // no change to the cache.
  void expect_refused(const BatchInput& batch, StatusCode code,
                      const std::vector<std::string>& fragments) {
    const CacheState before = state();
    auto step = table_->pack(batch);
    ASSERT_FALSE(step.ok());
    EXPECT_EQ(step.status().code(), code) << step.status().to_string();
    for (const std::string& f : fragments) {
      EXPECT_NE(step.status().message().find(f), std::string_view::npos)
          << "'" << f << "' missing from: " << step.status().message();
    }
    EXPECT_EQ(state(), before);
  }

  std::unique_ptr<CellCache> cache_;
  std::unique_ptr<SessionTable> table_;
};

TEST_F(SessionTableTest, PacksInputsInOrderWithTheirRows) {
  const SessionId a = *table_->open();
  const SessionId b = *table_->open();
  auto step =
      table_->pack(batch_of({tokens_input(a, {1, 2, 3}, 0, true), tokens_input(b, {7}, 0, false)}));
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  EXPECT_EQ(step->tokens, (std::vector<std::int64_t>{1, 2, 3, 7}));
  EXPECT_EQ(step->positions, (std::vector<std::int64_t>{0, 1, 2, 0}));
  EXPECT_EQ(step->seq_ids[0], step->seq_ids[1]);
  EXPECT_EQ(step->seq_ids[1], step->seq_ids[2]);
  EXPECT_NE(step->seq_ids[2], step->seq_ids[3]);
  EXPECT_EQ(step->seq_ids[0], *table_->sequence(a));
  EXPECT_EQ(step->seq_ids[3], *table_->sequence(b));
  EXPECT_EQ(step->logit_indices, (std::vector<std::int64_t>{2, -1}));
}

TEST_F(SessionTableTest, ConsecutiveChunksOfOnePromptAbut) {
  const SessionId a = *table_->open();
  std::vector<Token> prompt = {1, 2, 3, 4, 5};
  auto step = table_->pack(
      batch_of({tokens_input(a, prompt, 0, false, 0, 2), tokens_input(a, prompt, 0, true, 2, 3)}));
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  EXPECT_EQ(step->positions, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(step->tokens, (std::vector<std::int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(step->logit_indices, (std::vector<std::int64_t>{-1, 4}));
}

TEST_F(SessionTableTest, RewindsOnlyAfterEveryInputChecks) {
  const SessionId a = *table_->open();
  const SessionId b = *table_->open();
  place(a, 4);
  place(b, 2);
  const cache::SeqId seq_a = *table_->sequence(a);
  // a would rewind to 2, but b leaves a gap: nothing may change.
  expect_refused(batch_of({tokens_input(a, {5}, 2, true), tokens_input(b, {6}, 5, true)}),
                 StatusCode::kInvalidArgument,
                 {"session " + std::to_string(b), "position 5", "gap"});
  EXPECT_EQ(cache_->pos(seq_a), 4);

  auto step = table_->pack(batch_of({tokens_input(a, {5}, 2, true)}));
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  EXPECT_EQ(cache_->pos(seq_a), 2);
  EXPECT_EQ(step->positions, (std::vector<std::int64_t>{2}));
}

TEST_F(SessionTableTest, RefusesOverlapsRestartsAndOverruns) {
  const SessionId a = *table_->open();
  place(a, 3);
  const std::string sa = "session " + std::to_string(a);
  // The second input overlaps the first one of the same batch.
  expect_refused(batch_of({tokens_input(a, {1, 2}, 3, false), tokens_input(a, {3}, 4, true)}),
                 StatusCode::kInvalidArgument, {sa, "position 4", "overlaps"});
  // A rewind to 0 reopens the session.
  expect_refused(batch_of({tokens_input(a, {1}, 0, true)}), StatusCode::kInvalidArgument,
                 {sa, "position 0", "start"});
  // 14 tokens at 3 end at 17 > 16.
  expect_refused(batch_of({tokens_input(a, std::vector<Token>(14, 1), 3, true)}),
                 StatusCode::kOutOfResources, {sa, "position 3", "17", "16"});
  expect_refused(batch_of({tokens_input(a + 100, {1}, 3, true)}), StatusCode::kInvalidArgument,
                 {"session " + std::to_string(a + 100), "position 3", "not open"});
  EXPECT_EQ(cache_->pos(*table_->sequence(a)), 3);
}

TEST_F(SessionTableTest, RefusesMalformedPayloads) {
  const SessionId a = *table_->open();
  place(a, 2);
  const std::string sa = "session " + std::to_string(a);
  // A later valid-looking rewind must not happen when any input is bad.
  const Input rewind = tokens_input(a, {1}, 1, false);
  Input null_payload = tokens_input(a, {1}, 2, true);
  null_payload.payload = TokenInputPtr();
  expect_refused(batch_of({rewind, null_payload}), StatusCode::kInvalidArgument,
                 {sa, "position 2", "null"});
  Input empty = tokens_input(a, {1}, 2, true);
  empty.payload = std::make_shared<const std::vector<Token>>();
  expect_refused(batch_of({empty}), StatusCode::kInvalidArgument, {sa, "position 2", "0 tokens"});
  Input zero_size = tokens_input(a, {1, 2}, 2, true);
  zero_size.size = 0;
  expect_refused(batch_of({zero_size}), StatusCode::kInvalidArgument, {sa, "empty"});
  expect_refused(batch_of({tokens_input(a, {1, 2, 3}, 0, true, 2, 2)}),
                 StatusCode::kInvalidArgument, {sa, "outside its payload of 3"});
  Input past = tokens_input(a, {1, 2, 3}, 0, true, 1, 1);
  past.offset = 4;
  expect_refused(batch_of({past}), StatusCode::kInvalidArgument, {sa, "outside"});
  expect_refused(batch_of({tokens_input(a, {1, 8}, 2, true)}), StatusCode::kInvalidArgument,
                 {sa, "position 3", "token 8", "vocabulary"});
  expect_refused(batch_of({tokens_input(a, {1}, -5, true)}), StatusCode::kInvalidArgument, {sa});
  Input prepared = tokens_input(a, {1}, 2, true);
  prepared.payload = PreparedInputPtr();
  expect_refused(batch_of({prepared}), StatusCode::kInvalidArgument, {sa, "prepared"});
  EXPECT_EQ(cache_->pos(*table_->sequence(a)), 2);
}

TEST_F(SessionTableTest, SessionsAreBoundedAndIdsNeverReused) {
  const SessionId a = *table_->open();
  const SessionId b = *table_->open();
  const SessionId c = *table_->open();
  EXPECT_FALSE(table_->open().has_value());
  const cache::SeqId b_seq = *table_->sequence(b);
  table_->close(b);
  table_->close(b);  // harmless
  EXPECT_FALSE(cache_->is_live(b_seq));
  const std::optional<SessionId> d = table_->open();
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(*d, a);
  EXPECT_NE(*d, b);
  EXPECT_NE(*d, c);
  EXPECT_EQ(*table_->sequence(*d), b_seq);  // the cache slot is reused
  EXPECT_EQ(table_->size(), 3u);
  EXPECT_FALSE(table_->sequence(b).has_value());
}

TEST_F(SessionTableTest, MaximumIdPublishesOnceThenExhausts) {
  constexpr SessionId kLast = std::numeric_limits<SessionId>::max();
  SessionTable table(*cache_, 3, 16, 8, kLast - 1);
  const SessionId a = *table.open();
  const SessionId b = *table.open();
  EXPECT_EQ(a, kLast - 1);
  EXPECT_EQ(b, kLast);
  const auto live_before = cache_->metrics();
  // Out of ids: open and clone refuse without taking a sequence, even though
  // the table still has room for a third session.
  EXPECT_FALSE(table.open().has_value());
  EXPECT_FALSE(table.clone(a, 0).has_value());
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(cache_->metrics().sequences, live_before.sequences);
  // Closing frees capacity, not ids: they are never reused.
  table.close(a);
  EXPECT_FALSE(table.open().has_value());
  EXPECT_TRUE(table.sequence(b).has_value());
}

TEST_F(SessionTableTest, CloneSharesTheSourcePrefix) {
  const SessionId a = *table_->open();
  place(a, 4);
  const std::optional<SessionId> c = table_->clone(a, 3);
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(table_->clone(a, 5).has_value());  // past the source
  EXPECT_FALSE(table_->clone(a, -1).has_value());
  EXPECT_FALSE(table_->clone(a + 50, 1).has_value());
  const cache::SeqId cseq = *table_->sequence(*c);
  auto shared = cache_->cell_table(cseq);
  auto source = cache_->cell_table(*table_->sequence(a));
  ASSERT_EQ(shared.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(shared[i], source[i]);
  EXPECT_TRUE(table_->greedy(*c));  // no policy yet: nothing to sample with
  const Tensor logits = Tensor::empty(DType::kF32, {1, 8});
  EXPECT_FALSE(table_->sample(*c, logits, 0).has_value());

  // The clone continues at 3, independently of the source.
  pack_and_place(batch_of({tokens_input(*c, {6}, 3, true)}));
  EXPECT_EQ(cache_->pos(cseq), 4);
  EXPECT_EQ(cache_->pos(*table_->sequence(a)), 4);
  EXPECT_NE(cache_->cell_table(cseq)[3], cache_->cell_table(*table_->sequence(a))[3]);
  // The table is full now (a, clone, and one more).
  ASSERT_TRUE(table_->open().has_value());
  EXPECT_FALSE(table_->clone(a, 1).has_value());
}

TEST_F(SessionTableTest, SamplesEachSessionsRowWithItsOwnPolicy) {
  const SessionId a = *table_->open();
  const SessionId b = *table_->open();
  table_->set_sampling(a, SamplingParams{}, 0);
  Tensor logits = Tensor::empty(DType::kF32, {2, 8});
  logits.data_as<float>()[3] = 5.0f;      // row 0 -> 3
  logits.data_as<float>()[8 + 6] = 4.0f;  // row 1 -> 6
  EXPECT_EQ(table_->sample(a, logits, 1), Token{6});
  EXPECT_EQ(table_->sample(a, logits, 0), Token{3});
  EXPECT_FALSE(table_->sample(b, logits, 0).has_value());  // no policy
  EXPECT_FALSE(table_->sample(a, logits, 2).has_value());  // row out of range
  EXPECT_FALSE(table_->sample(a, logits, -1).has_value());
  EXPECT_FALSE(table_->sample(a, Tensor::empty(DType::kF32, {2, 7}), 0).has_value());
  EXPECT_TRUE(table_->greedy(a));
  EXPECT_FALSE(table_->greedy(a + 100));
}

TEST_F(SessionTableTest, DeviceCoinsEqualTheHostSamplersCoins) {
  const SessionId a = *table_->open();
  const SessionId g = *table_->open();
  const SamplingParams hot{0.9f, 0.8f, 5};
  table_->set_sampling(a, hot, 1234);
  table_->set_sampling(g, SamplingParams{-2.0f, 0.5f, 3}, 1234);
  sampling::Xorshift64Star reference(1234);
  for (int i = 0; i < 20; ++i) {
    auto row = table_->device_sampling(a);
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->temperature, 0.9f);
    EXPECT_EQ(row->top_p, 0.8f);
    EXPECT_EQ(row->top_k, 5.0f);
    EXPECT_EQ(row->coin, reference.next_f32());
    // Greedy rows clamp the temperature and draw no coin.
    auto greedy = table_->device_sampling(g);
    ASSERT_TRUE(greedy.has_value());
    EXPECT_EQ(greedy->temperature, 0.0f);
    EXPECT_EQ(greedy->coin, 0.0f);
  }
  // A host sampler seeded alike draws with the same coins.
  const SessionId h = *table_->open();
  table_->set_sampling(h, hot, 1234);
  Tensor logits = Tensor::empty(DType::kF32, {1, 8});
  for (int v = 0; v < 8; ++v) logits.data_as<float>()[v] = 0.3f * static_cast<float>(v % 5);
  sampling::Xorshift64Star coins(1234);
  const std::vector<float> row(logits.data_as<float>(), logits.data_as<float>() + 8);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(table_->sample(h, logits, 0),
              static_cast<Token>(sampling::sample_row(row, 0.9f, 0.8f, 5, coins.next_f32())));
  }
  EXPECT_FALSE(table_->device_sampling(h + 100).has_value());
}

TEST_F(SessionTableTest, SetSamplingOnUnknownSessionIsIgnored) {
  const SessionId a = *table_->open();
  table_->set_sampling(a + 7, SamplingParams{1.0f, 1.0f, 0}, 3);
  EXPECT_EQ(table_->size(), 1u);
  EXPECT_FALSE(table_->device_sampling(a + 7).has_value());
  EXPECT_FALSE(table_->device_sampling(a).has_value());
  table_->set_sampling(a, SamplingParams{1.0f, 1.0f, 0}, std::nullopt);
  EXPECT_TRUE(table_->device_sampling(a).has_value());
  EXPECT_FALSE(table_->greedy(a));
}

TEST(SelectRowsTest, KeepsOnlyTheSlicesWantedRows) {
  PackedStep step;
  step.logit_indices = {2, -1, 5, 9};
  SliceRows first = select_rows(step, 0, 6);
  EXPECT_EQ(first.selector, (std::vector<std::int64_t>{2, 5}));
  EXPECT_EQ(first.inputs, (std::vector<std::size_t>{0, 2}));
  SliceRows second = select_rows(step, 6, 4);
  EXPECT_EQ(second.selector, (std::vector<std::int64_t>{3}));
  EXPECT_EQ(second.inputs, (std::vector<std::size_t>{3}));
  SliceRows third = select_rows(step, 10, 3);
  EXPECT_EQ(third.selector, (std::vector<std::int64_t>{2}));
  EXPECT_TRUE(third.inputs.empty());
}

}  // namespace
}  // namespace cellm::executor
