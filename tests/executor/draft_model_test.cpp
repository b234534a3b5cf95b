// Speculative decoding with a draft model (executor/draft_model_proposer.h)
// on the golden fixtures, target and draft both built the way the CLI builds
// them (app::create_executor, app::load_draft_proposer): greedy output is
// token for token plain decoding's whatever the draft (the same model, which
// then has every draft accepted; another model of the same vocabulary; a
// draft whose state is disturbed so that it must rewind; a draft that fails),
// both caches hold exactly what they should after every step, and bad
// set-ups are refused with the sizes or flags named.
//
// Built twice: on the CPU program (label unit) and, with
// CELLM_DRAFT_TEST_BACKEND="cuda", on the CUDA program (tests/gpu, label
// gpu, skipped without a device like the other GPU suites).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "draft_rig.h"
#include "executor/draft_proposer.h"

#ifdef CELLM_DRAFT_TEST_GPU
#include "backend/cuda/cuda_program.h"
// ctest names tests by suite and test; a CUDA build holds both binaries, so
// the GPU suites get names of their own (ctest -R GpuDraftModel).
#define DraftModelTest GpuDraftModelTest
#define DraftModelSetUp GpuDraftModelSetUp
#endif

namespace cellm::executor::testing {
namespace {

constexpr std::size_t kTokens = 24;

// The same model drafting for itself: on the CPU program a row's logits do
// not depend on the step's width, so every draft is kept. The CUDA program's
// bf16 kernels may round a row differently at another width, which can flip
// a near tie in the draft's argmax (the output stays the target's): there,
// nearly every draft.
void expect_all_kept(const SpeculationCounters& c, const char* what) {
  EXPECT_GT(c.proposed, 0u) << what;
  if (kBackend == "cuda") {
    EXPECT_GE(c.accepted * 10, c.proposed * 9) << what << ": accepted " << c.accepted << " of "
                                                << c.proposed;
  } else {
    EXPECT_EQ(c.accepted, c.proposed) << what;
  }
}

class DraftModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef CELLM_DRAFT_TEST_GPU
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
#endif
    auto target = make_target("llama", nullptr);
    ASSERT_TRUE(target);
    plain_ = run_generation(*target->executor, kDraftPrompts, kTokens);
    ASSERT_EQ(plain_.generated.size(), kDraftPrompts.size());
    ASSERT_FALSE(plain_.counters.has_value());
  }
  DraftRun plain_;
};

TEST_F(DraftModelTest, TheModelAsItsOwnDraftHasEveryDraftAcceptedAndChangesNothing) {
  std::shared_ptr<DraftModelProposer> draft = make_draft("llama");
  ASSERT_TRUE(draft);
  auto recording = std::make_shared<Recording>(draft);
  auto target = make_target("llama", recording);
  ASSERT_TRUE(target);
  const DraftRun spec = run_generation(*target->executor, kDraftPrompts, kTokens, draft.get(),
                                       recording.get());
  EXPECT_EQ(spec.generated, plain_.generated);
  ASSERT_TRUE(spec.counters.has_value());
  expect_all_kept(*spec.counters, "own draft, together");
  EXPECT_LT(spec.steps, plain_.steps / 2) << "accepted drafts save decode steps";
  // Batch 1 (the bench's case): each prompt alone.
  for (std::size_t i = 0; i < kDraftPrompts.size(); ++i) {
    const DraftRun alone =
        run_generation(*target->executor, {kDraftPrompts[i]}, kTokens, draft.get(), recording.get());
    EXPECT_EQ(alone.generated.at(0), plain_.generated[i]) << "prompt " << i << " alone";
  }
  expect_all_kept(*target->executor->speculation_counters(), "own draft, every run");
  // Closed target sessions closed their draft sessions.
  EXPECT_EQ(draft->open_sessions(), 0u);
  EXPECT_EQ(dynamic_cast<CudaExecutor&>(draft->draft()).published_kv_cells().used, 0);
}

TEST_F(DraftModelTest, ADifferentDraftModelIsVerifiedAwayAndItsCacheFollows) {
  // Another architecture over the same 384-token vocabulary: its guesses
  // are mostly wrong, so the draft rewinds what the target did not keep.
  std::shared_ptr<DraftModelProposer> draft = make_draft("qwen3");
  ASSERT_TRUE(draft);
  auto recording = std::make_shared<Recording>(draft);
  auto target = make_target("llama", recording);
  ASSERT_TRUE(target);
  const DraftRun spec = run_generation(*target->executor, kDraftPrompts, kTokens, draft.get(),
                                       recording.get());
  EXPECT_EQ(spec.generated, plain_.generated);
  ASSERT_TRUE(spec.counters.has_value());
  EXPECT_GT(spec.counters->proposed, 0u);
  EXPECT_LT(spec.counters->accepted, spec.counters->proposed) << "some drafts were rejected";
  EXPECT_EQ(draft->open_sessions(), 0u);
}

TEST_F(DraftModelTest, ADisturbedDraftRewindsToTheSharedPrefixAndDraftsRightAgain) {
  // Before every other proposal the draft is first asked about a history
  // that leaves the real one a few tokens back, with a wrong token and junk
  // drafts after it. The real proposal must rewind all of that: if the
  // draft's cache kept any of it, its drafts would stop matching the target.
  std::shared_ptr<DraftModelProposer> draft = make_draft("llama");
  ASSERT_TRUE(draft);
  auto recording = std::make_shared<Recording>(draft);
  std::size_t disturbed = 0;
  recording->before = [&disturbed](DraftProposer& inner, SessionId session,
                                   std::span<const Token> history, std::size_t k) {
    if (history.size() < 4 || (disturbed++ % 2) != 0) return;
    std::vector<Token> wrong(history.begin(), history.end() - 2);
    wrong.push_back((history[history.size() - 2] + 1) % 384);
    std::vector<Token> junk;
    inner.propose(session, wrong, k, junk);
  };
  auto target = make_target("llama", recording);
  ASSERT_TRUE(target);
  const DraftRun spec = run_generation(*target->executor, kDraftPrompts, kTokens, draft.get(),
                                       recording.get());
  EXPECT_GT(disturbed, 2u);
  EXPECT_EQ(spec.generated, plain_.generated);
  ASSERT_TRUE(spec.counters.has_value());
  expect_all_kept(*spec.counters, "disturbed own draft");
}

TEST_F(DraftModelTest, NgramDraftsChangeNothingEither) {
  // Patterns from one token up: the fixtures' random text repeats single
  // tokens but seldom pairs, and a guess is what is under test here.
  auto target = make_target("llama", std::make_shared<NgramProposer>(1, 4));
  ASSERT_TRUE(target);
  const DraftRun spec = run_generation(*target->executor, kDraftPrompts, kTokens);
  EXPECT_EQ(spec.generated, plain_.generated);
  ASSERT_TRUE(spec.counters.has_value());
  EXPECT_GT(spec.counters->proposed, 0u);
}

// A draft executor that fails its initialize, or every execute after the
// first `good` ones.
class Flaky final : public RawStepExecutor {
 public:
  Flaky(std::unique_ptr<RawStepExecutor> inner, int good, bool fail_init)
      : inner_(std::move(inner)), good_(good), fail_init_(fail_init) {}
  bool initialize() override { return !fail_init_ && inner_->initialize(); }
  std::optional<SessionId> open_session() override { return inner_->open_session(); }
  void close_session(SessionId s) override { inner_->close_session(s); }
  void set_sampling(SessionId s, const SamplingParams& p, std::optional<std::uint64_t> seed) override {
    inner_->set_sampling(s, p, seed);
  }
  bool execute(const BatchInput& batch, BatchOutput& out) override {
    if (good_-- > 0) return inner_->execute(batch, out);
    ++failed;
    return false;
  }
  int max_session_tokens() const override { return inner_->max_session_tokens(); }
  std::int64_t vocab_size() const override { return inner_->vocab_size(); }
  bool execute_raw(const RawTargetStep& step,
                   const std::function<bool(const RawTargetOutput&)>& consume) override {
    return inner_->execute_raw(step, consume);
  }
  std::optional<std::vector<Token>> argmax_rows(const Tensor& logits, std::size_t rows) override {
    return inner_->argmax_rows(logits, rows);
  }
  std::optional<std::vector<Token>> sample_rows(const Tensor& logits, std::size_t rows,
                                                const std::vector<float>& params) override {
    return inner_->sample_rows(logits, rows, params);
  }
  int failed = 0;

 private:
  std::unique_ptr<RawStepExecutor> inner_;
  int good_;
  bool fail_init_;
};

std::shared_ptr<DraftModelProposer> flaky_draft(int good, bool fail_init, Flaky** flaky) {
  app::CudaExecutorConfig config;
  config.model_path = fixture("llama").string();
  config.backend = kBackend;
  config.max_sessions = kRigSessions;
  config.max_session_tokens = kRigTokens;
  config.program.kv_cells = kRigSessions * kRigTokens + 1;
  config.program.max_step = 64;  // narrower than the pool
  auto made = app::create_executor(config);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  auto loaded = std::make_shared<app::LoadedExecutor>(std::move(made).value());
  auto wrapped = std::make_unique<Flaky>(std::move(loaded->executor), good, fail_init);
  *flaky = wrapped.get();
  auto proposer = DraftModelProposer::create(std::move(wrapped), loaded, 384, "flaky");
  EXPECT_TRUE(proposer.ok()) << proposer.status().to_string();
  return proposer.ok() ? std::move(proposer).value() : nullptr;
}

TEST_F(DraftModelTest, AFailingDraftDegradesItsSessionsToPlainDecoding) {
  Flaky* flaky = nullptr;
  // Enough good steps for some rounds of drafts, then failures.
  std::shared_ptr<DraftModelProposer> draft = flaky_draft(12, false, &flaky);
  ASSERT_TRUE(draft && flaky);
  auto target = make_target("llama", draft);
  ASSERT_TRUE(target);
  const DraftRun spec = run_generation(*target->executor, kDraftPrompts, kTokens);
  EXPECT_EQ(spec.generated, plain_.generated);
  ASSERT_TRUE(spec.counters.has_value());
  EXPECT_GT(spec.counters->proposed, 0u) << "drafts before the failures";
  EXPECT_FALSE(draft->broken());
  // Each session's draft fails once and is not asked again.
  EXPECT_GE(flaky->failed, 1);
  EXPECT_LE(flaky->failed, static_cast<int>(kDraftPrompts.size()));
}

TEST_F(DraftModelTest, ADraftThatCannotStartLeavesEverySessionPlain) {
  Flaky* flaky = nullptr;
  std::shared_ptr<DraftModelProposer> draft = flaky_draft(1000, true, &flaky);
  ASSERT_TRUE(draft && flaky);
  auto target = make_target("llama", draft);  // initializes the draft, which fails
  ASSERT_TRUE(target);
  EXPECT_TRUE(draft->broken());
  const DraftRun spec = run_generation(*target->executor, kDraftPrompts, kTokens);
  EXPECT_EQ(spec.generated, plain_.generated);
  ASSERT_TRUE(spec.counters.has_value());
  EXPECT_EQ(spec.counters->proposed, 0u);
  EXPECT_EQ(flaky->failed, 0);
}

TEST(DraftModelSetUp, AVocabularyOtherThanTheTargetsIsRefusedNamingBothSizes) {
#ifdef CELLM_DRAFT_TEST_GPU
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
#endif
  const auto refused = app::load_draft_proposer(draft_options("llama"), 1000);
  ASSERT_FALSE(refused.ok());
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("384"), std::string::npos) << message;
  EXPECT_NE(message.find("1000"), std::string::npos) << message;
  EXPECT_NE(message.find("vocabulary"), std::string::npos) << message;
  // The same check where a caller hands over a built executor.
  app::CudaExecutorConfig config;
  config.model_path = fixture("llama").string();
  config.backend = kBackend;
  config.program.kv_cells = kRigTokens + 1;
  config.program.max_step = 64;
  config.max_session_tokens = kRigTokens;
  auto made = app::create_executor(config);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const auto direct = DraftModelProposer::create(std::move(made->executor), nullptr, 500, "d");
  ASSERT_FALSE(direct.ok());
  const std::string direct_message(direct.status().message());
  EXPECT_NE(direct_message.find("384"), std::string::npos) << direct_message;
  EXPECT_NE(direct_message.find("500"), std::string::npos) << direct_message;
}

TEST(DraftModelSetUp, OptionPairsAreCheckedBeforeAnythingLoads) {
  const auto message = [](const Status& s) { return std::string(s.message()); };
  const Status no_model = app::check_speculation_options("draft", "");
  ASSERT_FALSE(no_model.is_ok());
  EXPECT_NE(message(no_model).find("--draft-model"), std::string::npos) << message(no_model);
  const Status stray = app::check_speculation_options("ngram", fixture("llama"));
  ASSERT_FALSE(stray.is_ok());
  EXPECT_NE(message(stray).find("--speculate draft"), std::string::npos) << message(stray);
  const Status missing = app::check_speculation_options("draft", "/nonexistent/draft.gguf");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(message(missing).find("/nonexistent/draft.gguf"), std::string::npos);
  EXPECT_TRUE(app::check_speculation_options("draft", fixture("llama")).is_ok());
  EXPECT_TRUE(app::check_speculation_options("off", "").is_ok());
  const auto bare = make_proposer("draft");
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(std::string(bare.status().message()).find("--draft-model"), std::string::npos);
}

}  // namespace
}  // namespace cellm::executor::testing
