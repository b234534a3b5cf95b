// Constrained decoding in the engine, over the FakeExecutor (which emits
// sid * 1000 + n whatever the mask says) and a toy TokenConstraint that
// expects an exact token list: the installed policy carries the mask of the
// first token; a grammar that is complete ends the generation with a stop and
// no stop token; a drawn token outside the grammar and a grammar that allows
// nothing at the start end it with a clear failure. Masks after the first
// are deferred until the sampler settles them: a deferred mask is computed
// once, then, and holds what a synchronous refresh writes; a deferred dead end
// shows at settle(); a mask that outlives its generation reaches nothing.
#include <atomic>

#include <gtest/gtest.h>

#include "cellm/token_constraint.h"
#include "engine/constrained_decoding.h"
#include "engine/fake_executor.h"
#include "engine/runner_fixture.h"

namespace cellm::testing {
namespace {

constexpr std::int64_t kVocab = 4096;

// Allows exactly `expected`, in order; complete once all are consumed.
class ListConstraint final : public TokenConstraint {
 public:
  explicit ListConstraint(std::vector<Token> expected) : expected_(std::move(expected)) {}
  std::unique_ptr<TokenConstraintState> start() const override {
    return std::make_unique<State>(expected_);
  }
  std::int64_t vocab_size() const override { return kVocab; }

 private:
  class State final : public TokenConstraintState {
   public:
    explicit State(std::vector<Token> expected) : expected_(std::move(expected)) {}
    void fill_mask(std::span<std::uint32_t> words) override {
      std::fill(words.begin(), words.end(), 0u);
      if (next_ < expected_.size()) {
        const Token t = expected_[next_];
        words[t / 32] |= 1u << (t % 32);
      }
    }
    bool accepting() const override { return next_ == expected_.size(); }
    bool advance(Token token) override {
      if (next_ >= expected_.size() || expected_[next_] != token) return false;
      ++next_;
      return true;
    }

   private:
    std::vector<Token> expected_;
    std::size_t next_ = 0;
  };
  std::vector<Token> expected_;
};

// Allows exactly `expected`, in order, and then nothing, without being a
// complete match: a dead end after the last expected token.
class DeadEndConstraint final : public TokenConstraint {
 public:
  explicit DeadEndConstraint(std::vector<Token> expected) : list_(std::move(expected)) {}
  std::unique_ptr<TokenConstraintState> start() const override {
    return std::make_unique<State>(list_.start());
  }
  std::int64_t vocab_size() const override { return kVocab; }

 private:
  class State final : public TokenConstraintState {
   public:
    explicit State(std::unique_ptr<TokenConstraintState> inner) : inner_(std::move(inner)) {}
    void fill_mask(std::span<std::uint32_t> words) override { inner_->fill_mask(words); }
    bool accepting() const override { return false; }
    bool advance(Token token) override { return inner_->advance(token); }

   private:
    std::unique_ptr<TokenConstraintState> inner_;
  };
  ListConstraint list_;
};

class ConstrainedRunnerTest : public RunnerFixture {};

TEST_F(ConstrainedRunnerTest, ACompleteGrammarEndsWithAStop) {
  Session s = open();
  const Token first = static_cast<Token>(s.id() * 1000 + 1);
  GenConfig config = budget(10);
  config.stop_tokens = {4000};
  config.constraint =
      std::make_shared<ListConstraint>(std::vector<Token>{first, first + 1, first + 2});
  Collector c;
  GenerationHandle h = run(s, {1, 2, 3}, config, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kStopToken) << h.error_message();
  EXPECT_EQ(c.tokens(), (std::vector<Token>{first, first + 1, first + 2}));
  // The installed policy carries the mask; at installation it allowed the
  // first token only.
  const auto records = exec.sampling();
  ASSERT_FALSE(records.empty());
  const SamplingParams& p = records.back().params;
  ASSERT_TRUE(p.masks_tokens());
  EXPECT_EQ(p.token_mask->words.size(), static_cast<std::size_t>(kVocab / 32));
}

TEST_F(ConstrainedRunnerTest, ATokenOutsideTheGrammarFailsTheGeneration) {
  Session s = open();
  GenConfig config = budget(10);
  config.constraint = std::make_shared<ListConstraint>(std::vector<Token>{7, 8});
  Collector c;
  GenerationHandle h = run(s, {1, 2, 3}, config, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_NE(h.error_message().find("grammar does not allow"), std::string::npos)
      << h.error_message();
  // The session stays usable: an unconstrained generation runs after it.
  Collector after;
  EXPECT_EQ(run(s, {4}, budget(2), after).finish_reason(), FinishReason::kNewTokenLimit);
}

TEST_F(ConstrainedRunnerTest, AGrammarThatAllowsNothingIsRefusedAtTheStart) {
  Session s = open();
  GenConfig config = budget(10);
  config.constraint = std::make_shared<ListConstraint>(std::vector<Token>{});
  Collector c;
  GenerationHandle h = run(s, {1, 2}, config, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_NE(h.error_message().find("allows no token"), std::string::npos) << h.error_message();
  EXPECT_TRUE(c.tokens().empty());
}

TEST_F(ConstrainedRunnerTest, TheTokenBudgetStillEndsAConstrainedGeneration) {
  Session s = open();
  const Token first = static_cast<Token>(s.id() * 1000 + 1);
  GenConfig config = budget(2);
  config.constraint =
      std::make_shared<ListConstraint>(std::vector<Token>{first, first + 1, first + 2});
  Collector c;
  GenerationHandle h = run(s, {1}, config, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kNewTokenLimit);
  EXPECT_EQ(c.tokens().size(), 2u);
}

TEST_F(ConstrainedRunnerTest, ConcurrentConstrainedGenerationsFollowTheirGrammars) {
  std::vector<Session> sessions;
  for (int i = 0; i < 4; ++i) sessions.push_back(open());
  std::vector<Collector> collectors(sessions.size());
  std::vector<GenerationHandle> handles;
  std::vector<std::vector<Token>> want;
  for (std::size_t i = 0; i < sessions.size(); ++i) {
    const Token base = static_cast<Token>(sessions[i].id() * 1000);
    want.push_back({base + 1, base + 2, base + 3, base + 4, base + 5});
    GenConfig config = budget(20);
    config.stop_tokens = {4095};
    config.constraint = std::make_shared<ListConstraint>(want.back());
    Collector& c = collectors[i];
    handles.push_back(sessions[i].generate_async(std::vector<Token>{1, 2}, std::move(config),
                                                 c.on_update(), c.on_settled()));
  }
  for (std::size_t i = 0; i < handles.size(); ++i) {
    handles[i].wait();
    EXPECT_EQ(handles[i].finish_reason(), FinishReason::kStopToken) << handles[i].error_message();
    EXPECT_TRUE(wait_until([&] { return collectors[i].settled() > 0; }));
    EXPECT_EQ(collectors[i].tokens(), want[i]);
  }
}

TEST_F(ConstrainedRunnerTest, ADeadEndFailsAfterTheLastAllowedToken) {
  Session s = open();
  const Token base = static_cast<Token>(s.id() * 1000);
  GenConfig config = budget(10);
  config.constraint = std::make_shared<DeadEndConstraint>(std::vector<Token>{base + 1, base + 2});
  Collector c;
  GenerationHandle h = run(s, {1, 2, 3}, config, c);
  EXPECT_EQ(h.finish_reason(), FinishReason::kFailed);
  EXPECT_NE(h.error_message().find("dead end"), std::string::npos) << h.error_message();
  EXPECT_EQ(c.tokens(), (std::vector<Token>{base + 1, base + 2}));
  // The session stays usable.
  Collector after;
  EXPECT_EQ(run(s, {4}, budget(2), after).finish_reason(), FinishReason::kNewTokenLimit);
}

// A state whose mask is one token, `t + 1` after token `t`, counting its
// fills.
class CountingConstraint final : public TokenConstraint {
 public:
  std::unique_ptr<TokenConstraintState> start() const override {
    return std::make_unique<State>(fills_);
  }
  std::int64_t vocab_size() const override { return kVocab; }
  int fills() const { return fills_->load(); }

 private:
  class State final : public TokenConstraintState {
   public:
    explicit State(std::shared_ptr<std::atomic<int>> fills) : fills_(std::move(fills)) {}
    void fill_mask(std::span<std::uint32_t> words) override {
      fills_->fetch_add(1);
      std::fill(words.begin(), words.end(), 0u);
      words[static_cast<std::size_t>(next_ / 32)] |= 1u << (next_ % 32);
    }
    bool accepting() const override { return false; }
    bool advance(Token token) override {
      if (token != next_) return false;
      ++next_;
      return true;
    }

   private:
    std::shared_ptr<std::atomic<int>> fills_;
    Token next_ = 1;
  };
  std::shared_ptr<std::atomic<int>> fills_ = std::make_shared<std::atomic<int>>(0);
};

std::vector<std::uint32_t> only(Token t) {
  std::vector<std::uint32_t> w(kVocab / 32, 0u);
  w[static_cast<std::size_t>(t / 32)] |= 1u << (t % 32);
  return w;
}

TEST(ConstrainedDecodingDeferred, TheReaderComputesTheMaskOnceWhenItSettles) {
  CountingConstraint grammar, reference_grammar;
  detail::ConstrainedDecoding cd(grammar, {}, kVocab);
  // The same grammar refreshed synchronously: what each deferred mask must hold.
  detail::ConstrainedDecoding reference(reference_grammar, {}, kVocab);
  ASSERT_EQ(cd.refresh(), detail::ConstrainedDecoding::Next::kContinue);
  ASSERT_EQ(reference.refresh(), detail::ConstrainedDecoding::Next::kContinue);
  EXPECT_EQ(cd.mask()->words, only(1));
  for (Token t = 1; t < 50; ++t) {
    ASSERT_TRUE(cd.advance(t));
    ASSERT_TRUE(reference.advance(t));
    const int before = grammar.fills();
    ASSERT_EQ(cd.defer_refresh(), detail::ConstrainedDecoding::Next::kContinue);
    // Nothing ran yet: the engine thread computes it when the sampler reads
    // it, after the step's forward was enqueued.
    EXPECT_EQ(grammar.fills(), before);
    cd.mask()->settle();
    EXPECT_EQ(grammar.fills(), before + 1);
    ASSERT_EQ(reference.refresh(), detail::ConstrainedDecoding::Next::kContinue);
    ASSERT_EQ(cd.mask()->words, reference.mask()->words) << "after token " << t;
    // Settled already: neither a second read nor the engine's settle() runs
    // it again.
    cd.mask()->settle();
    EXPECT_EQ(cd.settle(), detail::ConstrainedDecoding::Next::kContinue);
    EXPECT_EQ(grammar.fills(), before + 1);
  }
}

TEST(ConstrainedDecodingDeferred, ADeferredDeadEndShowsAtSettleOnce) {
  DeadEndConstraint grammar({7});
  detail::ConstrainedDecoding cd(grammar, {}, kVocab);
  ASSERT_EQ(cd.refresh(), detail::ConstrainedDecoding::Next::kContinue);
  ASSERT_TRUE(cd.advance(7));
  ASSERT_EQ(cd.defer_refresh(), detail::ConstrainedDecoding::Next::kContinue);
  cd.mask()->settle();
  EXPECT_EQ(cd.mask()->words, std::vector<std::uint32_t>(kVocab / 32, 0u));
  EXPECT_EQ(cd.settle(), detail::ConstrainedDecoding::Next::kDeadEnd);
  EXPECT_EQ(cd.settle(), detail::ConstrainedDecoding::Next::kContinue);
}

TEST(ConstrainedDecodingDeferred, APendingMaskNeverOutlivesItsGeneration) {
  CountingConstraint grammar;
  TokenMaskPtr mask;
  for (int i = 0; i < 5; ++i) {
    detail::ConstrainedDecoding cd(grammar, {}, kVocab);
    ASSERT_EQ(cd.defer_refresh(), detail::ConstrainedDecoding::Next::kContinue);
    mask = cd.mask();  // an executor's policy may keep it
  }
  // Dropped unread when each generation went: settling the survivor reaches
  // no grammar state.
  mask->settle();
  EXPECT_EQ(grammar.fills(), 0);
}

}  // namespace
}  // namespace cellm::testing
