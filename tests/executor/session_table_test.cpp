#include "executor/session_table.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

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

// A greedy policy with a repetition penalty of 2 and a frequency penalty
// of 1 (so the table keeps counts).
SamplingParams penalising() {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 1.0f;
  return p;
}

// A one-row f32 logits tensor whose argmax is `best`.
Tensor one_hot_logits(int vocab, int best) {
  Tensor logits = Tensor::empty(DType::kF32, {1, vocab});
  for (int v = 0; v < vocab; ++v) logits.data_as<float>()[v] = v == best ? 4.0f : 0.5f;
  return logits;
}

TEST_F(SessionTableTest, HistorySplitsPromptAndOutput) {
  const SessionId a = *table_->open();
  table_->set_sampling(a, penalising(), 0);
  pack_and_place(batch_of({tokens_input(a, {1, 2, 3}, 0, true)}));
  ASSERT_TRUE(table_->history(a).has_value());
  EXPECT_EQ(std::vector<Token>(table_->history(a)->begin(), table_->history(a)->end()),
            (std::vector<Token>{1, 2, 3}));
  EXPECT_EQ(table_->output_start(a), 3u);
  EXPECT_EQ(table_->token_count(a, 2)->all, 1);
  EXPECT_EQ(table_->token_count(a, 2)->output, 0);

  // The draw, fed back alone at the next position, is output.
  const std::optional<Token> drawn = table_->sample(a, one_hot_logits(8, 5), 0);
  ASSERT_EQ(drawn, Token{5});
  pack_and_place(batch_of({tokens_input(a, {5}, 3, true)}));
  EXPECT_EQ(table_->output_start(a), 3u);
  EXPECT_EQ(table_->token_count(a, 5)->output, 1);
  EXPECT_EQ(table_->sample(a, one_hot_logits(8, 6), 0), Token{6});
  pack_and_place(batch_of({tokens_input(a, {6}, 4, true)}));
  EXPECT_EQ(table_->history(a)->size(), 5u);
  EXPECT_EQ(table_->token_count(a, 6)->output, 1);

  // A token that is not the last draw is prompt: a new turn, whose output
  // starts after it; earlier output becomes context (still counted as seen).
  pack_and_place(batch_of({tokens_input(a, {7, 7}, 5, true)}));
  EXPECT_EQ(table_->output_start(a), 7u);
  EXPECT_EQ(table_->token_count(a, 5)->output, 0);
  EXPECT_EQ(table_->token_count(a, 5)->all, 1);
  EXPECT_EQ(table_->token_count(a, 7)->all, 2);
}

TEST_F(SessionTableTest, RewindDropsHistoryAndItsCounts) {
  const SessionId a = *table_->open();
  table_->set_sampling(a, penalising(), 0);
  pack_and_place(batch_of({tokens_input(a, {1, 2, 3}, 0, true)}));
  ASSERT_EQ(table_->sample(a, one_hot_logits(8, 4), 0), Token{4});
  pack_and_place(batch_of({tokens_input(a, {4}, 3, true)}));
  ASSERT_EQ(table_->token_count(a, 4)->output, 1);
  // Rewind into the prompt: the output and token 3 are gone.
  pack_and_place(batch_of({tokens_input(a, {6}, 2, true)}));
  EXPECT_EQ(std::vector<Token>(table_->history(a)->begin(), table_->history(a)->end()),
            (std::vector<Token>{1, 2, 6}));
  EXPECT_EQ(table_->token_count(a, 4)->all, 0);
  EXPECT_EQ(table_->token_count(a, 3)->all, 0);
  EXPECT_EQ(table_->token_count(a, 6)->all, 1);
  EXPECT_EQ(table_->token_count(a, 6)->output, 0);
  EXPECT_EQ(table_->output_start(a), 3u);
  // A refused batch changes no history.
  auto refused = table_->pack(batch_of({tokens_input(a, {1}, 9, true)}));
  EXPECT_FALSE(refused.ok());
  EXPECT_EQ(table_->history(a)->size(), 3u);
}

TEST_F(SessionTableTest, CloneInheritsThePrefixAsPrompt) {
  const SessionId a = *table_->open();
  table_->set_sampling(a, penalising(), 0);
  pack_and_place(batch_of({tokens_input(a, {1, 2, 3}, 0, true)}));
  ASSERT_EQ(table_->sample(a, one_hot_logits(8, 4), 0), Token{4});
  pack_and_place(batch_of({tokens_input(a, {4}, 3, true)}));
  const SessionId c = *table_->clone(a, 4);
  EXPECT_EQ(std::vector<Token>(table_->history(c)->begin(), table_->history(c)->end()),
            (std::vector<Token>{1, 2, 3, 4}));
  EXPECT_EQ(table_->output_start(c), 4u);               // the clone's output starts empty
  EXPECT_FALSE(table_->token_count(c, 4).has_value());  // no policy, no counts
  table_->set_sampling(c, penalising(), 0);
  EXPECT_EQ(table_->token_count(c, 4)->all, 1);
  EXPECT_EQ(table_->token_count(c, 4)->output, 0);
  // The source keeps its own split.
  EXPECT_EQ(table_->token_count(a, 4)->output, 1);
  const SessionId d = *table_->clone(a, 2);
  EXPECT_EQ(table_->history(d)->size(), 2u);
}

TEST_F(SessionTableTest, ReinstallingAPolicyKeepsTheOutput) {
  // min_tokens re-installs the policy mid-generation: the output so far stays.
  const SessionId a = *table_->open();
  table_->set_sampling(a, penalising(), 0);
  pack_and_place(batch_of({tokens_input(a, {1}, 0, true)}));
  ASSERT_EQ(table_->sample(a, one_hot_logits(8, 4), 0), Token{4});
  pack_and_place(batch_of({tokens_input(a, {4}, 1, true)}));
  table_->set_sampling(a, penalising(), 5);
  EXPECT_EQ(table_->token_count(a, 4)->output, 1);
  EXPECT_EQ(table_->output_start(a), 1u);
}

TEST_F(SessionTableTest, HostDrawsApplyPenaltiesAndBias) {
  const SessionId a = *table_->open();
  pack_and_place(batch_of({tokens_input(a, {1}, 0, true)}));
  Tensor logits = Tensor::empty(DType::kF32, {1, 8});
  const std::vector<float> row = {0.0f, 3.0f, 2.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f};
  std::copy(row.begin(), row.end(), logits.data_as<float>());
  SamplingParams greedy;
  table_->set_sampling(a, greedy, 0);
  EXPECT_EQ(table_->sample(a, logits, 0), Token{1});
  // Token 1 was seen: 3 / 2 = 1.5 < 2.
  SamplingParams repeat;
  repeat.repetition_penalty = 2.0f;
  table_->set_sampling(a, repeat, 0);
  EXPECT_EQ(table_->sample(a, logits, 0), Token{2});
  // A bias of -100 on the greedy token removes it; +3 lifts id 3 above all.
  SamplingParams biased;
  biased.logit_bias = sampling::make_logit_bias({{1, -100.0f}});
  table_->set_sampling(a, biased, 0);
  EXPECT_EQ(table_->sample(a, logits, 0), Token{2});
  biased.logit_bias = sampling::make_logit_bias({{3, 3.0f}});
  table_->set_sampling(a, biased, 0);
  EXPECT_EQ(table_->sample(a, logits, 0), Token{3});
  // The logits themselves are left alone.
  EXPECT_EQ(logits.data_as<float>()[1], 3.0f);
}

// Constrained decoding on the host path: the mask the policy carries is read
// at every draw (the engine rewrites it between steps), greedy or sampled,
// and applies before the penalties; the logits are left alone.
TEST_F(SessionTableTest, HostDrawsFollowTheTokenMask) {
  const SessionId a = *table_->open();
  pack_and_place(batch_of({tokens_input(a, {1}, 0, true)}));
  Tensor logits = Tensor::empty(DType::kF32, {1, 8});
  const std::vector<float> row = {0.0f, 3.0f, 2.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f};
  std::copy(row.begin(), row.end(), logits.data_as<float>());
  auto mask = std::make_shared<TokenMask>();
  mask->words = {(1u << 2) | (1u << 3)};  // ids 2 and 3
  SamplingParams greedy;
  greedy.token_mask = mask;
  table_->set_sampling(a, greedy, 0);
  EXPECT_EQ(table_->sample(a, logits, 0), Token{2});
  mask->words = {1u << 5};  // the next step allows only id 5
  EXPECT_EQ(table_->sample(a, logits, 0), Token{5});
  // Sampled draws never leave the mask.
  SamplingParams hot;
  hot.temperature = 2.0f;
  hot.token_mask = mask;
  mask->words = {(1u << 0) | (1u << 6) | (1u << 7)};
  table_->set_sampling(a, hot, 7);
  for (int i = 0; i < 50; ++i) {
    const std::optional<Token> t = table_->sample(a, logits, 0);
    ASSERT_TRUE(t.has_value());
    EXPECT_TRUE(mask->allows(*t)) << *t;
  }
  // With a penalty on top: the mask first (id 1 stays out however it is lifted).
  SamplingParams biased;
  biased.logit_bias = sampling::make_logit_bias({{1, 50.0f}});
  biased.token_mask = mask;
  mask->words = {(1u << 2) | (1u << 3)};
  table_->set_sampling(a, biased, 0);
  EXPECT_EQ(table_->sample(a, logits, 0), Token{2});
  EXPECT_EQ(logits.data_as<float>()[1], 3.0f);
}

TEST_F(SessionTableTest, DevicePenaltiesMatchTheReferenceEntries) {
  const SessionId a = *table_->open();
  const SessionId plain = *table_->open();
  SamplingParams p = penalising();
  p.temperature = 0.7f;
  p.min_p = 0.1f;
  p.logit_bias = sampling::make_logit_bias({{6, 2.0f}});
  table_->set_sampling(a, p, 0);
  table_->set_sampling(plain, SamplingParams{0.7f, 1.0f, 0}, 0);
  pack_and_place(batch_of({tokens_input(a, {1, 2, 2}, 0, true)}));
  std::vector<sampling::PenaltyEntry> entries = {sampling::PenaltyEntry{7, 1.0f, 0.0f, 0}};
  const std::optional<DevicePenaltyRow> row = table_->device_penalties(a, entries);
  ASSERT_TRUE(row.has_value());
  EXPECT_EQ(row->repetition, 2.0f);
  EXPECT_EQ(row->temperature, 0.7f);
  EXPECT_EQ(row->min_p_log_threshold, sampling::min_p_log_threshold(0.1f));
  // Appended after what was there: ids 1, 2 (seen) and 6 (bias).
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].token, 7);
  std::vector<std::int32_t> ids;
  for (std::size_t i = 1; i < entries.size(); ++i) ids.push_back(entries[i].token);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::int32_t>{1, 2, 6}));
  // Neutral policies stay on the fast path: no row, nothing appended.
  EXPECT_FALSE(table_->device_penalties(plain, entries).has_value());
  EXPECT_EQ(entries.size(), 4u);
  // A device draw noted as such makes the next input output.
  table_->note_draw(a, 5);
  pack_and_place(batch_of({tokens_input(a, {5}, 3, true)}));
  EXPECT_EQ(table_->token_count(a, 5)->output, 1);
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
