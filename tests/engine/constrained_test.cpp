// Constrained decoding in the engine, over the FakeExecutor (which emits
// sid * 1000 + n whatever the mask says) and a toy TokenConstraint that
// expects an exact token list: the installed policy carries the mask of the
// first token; a grammar that is complete ends the generation with a stop and
// no stop token; a drawn token outside the grammar and a grammar that allows
// nothing at the start end it with a clear failure.
#include <gtest/gtest.h>

#include "cellm/token_constraint.h"
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

}  // namespace
}  // namespace cellm::testing
