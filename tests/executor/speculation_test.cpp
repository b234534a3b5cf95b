// Speculative decoding in CudaExecutor (executor/speculation.h) over the toy
// program: whatever the proposer guesses, a session generates exactly what
// plain decoding generates (greedy, and seeded sampling coin for coin, on
// the host and the device sampler paths), no cell leaks, and right guesses
// save steps. Plus the n-gram proposer on its own.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "driver.h"
#include "executor/cuda_executor.h"
#include "executor/draft_proposer.h"
#include "toy_program.h"

namespace cellm::executor::testing {
namespace {

constexpr std::size_t kTokens = 24;
// Prompts whose toy continuations are easy to tell apart.
const std::vector<std::vector<std::int64_t>> kPrompts = {
    {3, 1, 4, 1, 5}, {9, 2, 6}, {5, 3, 5, 8, 9, 7, 9}, {2, 7, 1, 8, 2, 8}};

// Proposes from known full sequences (prompt + continuation): the one whose
// prefix is the history. kRight proposes what follows; kWrong shifts every
// proposal by one; kFirstRight gets the first right and the rest wrong.
class Scripted final : public DraftProposer {
 public:
  enum class Mode { kRight, kWrong, kFirstRight };
  Scripted(std::vector<std::vector<std::int64_t>> refs, Mode mode, std::int64_t vocab)
      : refs_(std::move(refs)), mode_(mode), vocab_(vocab) {}
  void propose(SessionId, std::span<const Token> history, std::size_t max_tokens,
               std::vector<Token>& out) override {
    ++calls;
    for (const auto& ref : refs_) {
      if (ref.size() <= history.size() ||
          !std::equal(history.begin(), history.end(), ref.begin(),
                      [](Token a, std::int64_t b) { return static_cast<std::int64_t>(a) == b; })) {
        continue;
      }
      for (std::size_t j = 0; j < max_tokens && history.size() + j < ref.size(); ++j) {
        std::int64_t t = ref[history.size() + j];
        if (mode_ == Mode::kWrong || (mode_ == Mode::kFirstRight && j > 0)) t = (t + 1) % vocab_;
        out.push_back(static_cast<Token>(t));
      }
      return;
    }
  }
  int calls = 0;

 private:
  std::vector<std::vector<std::int64_t>> refs_;
  Mode mode_;
  std::int64_t vocab_;
};

struct Policy {
  std::optional<SamplingParams> params;  // none: no policy (greedy)
  std::uint64_t seed = 0;
};

struct Outcome {
  std::vector<std::vector<std::int64_t>> generated;  // per prompt, kTokens each
  std::size_t steps = 0;
  std::optional<SpeculationCounters> counters;
};

// Prefills every prompt in one batch, then decodes them together, checking
// after every step that the cells in use are exactly the committed ones.
Outcome generate(const ToyConfig& config, const Policy& policy, std::shared_ptr<DraftProposer> proposer,
             std::size_t max_batch = 4) {
  auto program = std::make_shared<ToyProgram>(config);
  SpeculationOptions spec;
  spec.proposer = std::move(proposer);
  spec.max_batch = max_batch;
  auto made = CudaExecutor::create(program, 4, 0, spec);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  Outcome result;
  if (!made.ok()) return result;
  CudaExecutor& ex = **made;
  EXPECT_TRUE(ex.initialize());
  std::vector<Gen> gens;
  for (const auto& p : kPrompts) gens.push_back(start(ex, p));
  std::vector<std::pair<Gen*, Input>> work;
  for (std::size_t i = 0; i < gens.size(); ++i) {
    if (policy.params) ex.set_sampling(gens[i].sid, *policy.params, policy.seed + i);
    work.emplace_back(&gens[i], prefill(gens[i], gens[i].prompt->size()));
  }
  EXPECT_TRUE(run(ex, work, true));
  while (true) {
    work.clear();
    for (Gen& g : gens) {
      if (g.generated.size() < kTokens) work.emplace_back(&g, decode(g));
    }
    if (work.empty()) break;
    EXPECT_TRUE(run(ex, work, true));
    ++result.steps;
    std::int64_t committed = 0;
    for (const Gen& g : gens) committed += g.fed;
    EXPECT_EQ(ex.published_kv_cells().used, committed) << "after decode step " << result.steps;
    if (result.steps > 10 * kTokens) break;
  }
  for (Gen& g : gens) {
    g.generated.resize(kTokens);  // the last output may overshoot
    result.generated.push_back(g.generated);
  }
  result.counters = ex.speculation_counters();
  return result;
}

std::vector<std::vector<std::int64_t>> full_sequences(const Outcome& plain) {
  std::vector<std::vector<std::int64_t>> refs;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    refs.push_back(kPrompts[i]);
    refs.back().insert(refs.back().end(), plain.generated[i].begin(), plain.generated[i].end());
  }
  return refs;
}

ToyConfig host_config() {
  return ToyConfig{};
}
ToyConfig device_config() {
  ToyConfig c;
  c.device_logits = true;
  c.samplers = true;
  return c;
}

Policy sampled(float temperature, std::uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  return Policy{p, seed};
}

struct Case {
  std::string name;
  ToyConfig config;
  Policy policy;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class SpeculationTest : public ::testing::TestWithParam<Case> {};

// Every proposer mode gives plain decoding's tokens; right guesses are all
// accepted and save steps, wrong ones are all rejected.
TEST_P(SpeculationTest, OutputIsPlainDecodingWhateverTheGuesses) {
  const Case& c = GetParam();
  const Outcome plain = generate(c.config, c.policy, nullptr);
  ASSERT_EQ(plain.generated.size(), kPrompts.size());
  EXPECT_FALSE(plain.counters.has_value());
  EXPECT_EQ(plain.steps, kTokens - 1);
  const auto refs = full_sequences(plain);
  for (auto mode : {Scripted::Mode::kRight, Scripted::Mode::kWrong, Scripted::Mode::kFirstRight}) {
    auto proposer = std::make_shared<Scripted>(refs, mode, c.config.vocab);
    const Outcome spec = generate(c.config, c.policy, proposer);
    const int m = static_cast<int>(mode);
    EXPECT_EQ(spec.generated, plain.generated) << c.name << " mode " << m;
    ASSERT_TRUE(spec.counters.has_value());
    EXPECT_GT(proposer->calls, 0);
    EXPECT_GT(spec.counters->proposed, 0u) << "mode " << m;
    switch (mode) {
      case Scripted::Mode::kRight:
        EXPECT_EQ(spec.counters->accepted, spec.counters->proposed) << c.name;
        EXPECT_LT(spec.steps, plain.steps / 2) << c.name << ": right guesses save steps";
        break;
      case Scripted::Mode::kWrong:
        EXPECT_EQ(spec.counters->accepted, 0u) << c.name;
        EXPECT_EQ(spec.steps, plain.steps) << c.name;
        break;
      case Scripted::Mode::kFirstRight:
        EXPECT_GT(spec.counters->accepted, 0u) << c.name;
        EXPECT_LT(spec.counters->accepted, spec.counters->proposed) << c.name;
        break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Paths, SpeculationTest,
    ::testing::Values(Case{"host_greedy", host_config(), Policy{}},
                      Case{"host_greedy_policy", host_config(), Policy{SamplingParams{}, 1}},
                      Case{"host_sampled", host_config(), sampled(1.5f, 11)},
                      Case{"device_greedy", device_config(), Policy{}},
                      Case{"device_sampled", device_config(), sampled(1.5f, 23)}),
    [](const auto& info) { return info.param.name; });

// Seeded sampling with speculation draws the same tokens as without for
// every seed tried, so the sampled distribution is the plain one (a
// stronger statement than a frequency test), on both sampler paths.
TEST(SpeculationSampling, ManySeedsDrawWhatPlainDecodingDraws) {
  for (const ToyConfig& config : {host_config(), device_config()}) {
    std::map<std::int64_t, int> first_tokens;
    for (std::uint64_t seed = 100; seed < 120; ++seed) {
      const Policy policy = sampled(2.0f, seed);
      const Outcome plain = generate(config, policy, nullptr);
      auto proposer = std::make_shared<Scripted>(full_sequences(plain), Scripted::Mode::kFirstRight,
                                                 config.vocab);
      const Outcome spec = generate(config, policy, proposer);
      EXPECT_EQ(spec.generated, plain.generated) << "seed " << seed;
      ++first_tokens[plain.generated[0][0]];
    }
    // The draws really are random: more than one first token over 20 seeds.
    EXPECT_GT(first_tokens.size(), 1u);
  }
}

TEST(SpeculationScope, LargeBatchesAndAdjustedPoliciesRunPlain) {
  const Outcome plain = generate(host_config(), Policy{}, nullptr);
  auto proposer =
      std::make_shared<Scripted>(full_sequences(plain), Scripted::Mode::kRight, ToyConfig{}.vocab);
  // Four outputs a step, at most three allowed: never drafted.
  const Outcome wide = generate(host_config(), Policy{}, proposer, 3);
  EXPECT_EQ(wide.generated, plain.generated);
  ASSERT_TRUE(wide.counters.has_value());
  EXPECT_EQ(wide.counters->proposed, 0u);
  EXPECT_EQ(wide.steps, plain.steps);

  SamplingParams penalized;
  penalized.frequency_penalty = 0.5f;
  const Outcome plain_pen = generate(host_config(), Policy{penalized, 5}, nullptr);
  auto proposer2 = std::make_shared<Scripted>(full_sequences(plain_pen), Scripted::Mode::kRight,
                                              ToyConfig{}.vocab);
  const Outcome spec_pen = generate(host_config(), Policy{penalized, 5}, proposer2);
  EXPECT_EQ(spec_pen.generated, plain_pen.generated);
  EXPECT_EQ(spec_pen.counters->proposed, 0u);
}

// A proposer that throws costs its session the drafts of that step only.
class Throwing final : public DraftProposer {
 public:
  void propose(SessionId, std::span<const Token>, std::size_t, std::vector<Token>&) override {
    throw std::runtime_error("no proposals today");
  }
};

TEST(SpeculationScope, AFailingProposerDegradesToPlainDecoding) {
  const Outcome plain = generate(host_config(), Policy{}, nullptr);
  const Outcome spec = generate(host_config(), Policy{}, std::make_shared<Throwing>());
  EXPECT_EQ(spec.generated, plain.generated);
  EXPECT_EQ(spec.counters->proposed, 0u);
}

std::vector<Token> ngram(std::vector<Token> history, std::size_t k, std::size_t lo = 2,
                         std::size_t hi = 4) {
  NgramProposer p(lo, hi);
  std::vector<Token> out;
  p.propose(1, history, k, out);
  return out;
}

TEST(NgramProposerTest, ProposesWhatFollowedTheLatestEarlierMatch) {
  // "7 8" occurred twice before; the latest was followed by 5 6.
  EXPECT_EQ(ngram({7, 8, 1, 2, 7, 8, 5, 6, 9, 7, 8}, 2), (std::vector<Token>{5, 6}));
  // A longer match wins over a later shorter one: "1 7 8" -> 3.
  EXPECT_EQ(ngram({1, 7, 8, 3, 4, 7, 8, 5, 1, 7, 8}, 1), (std::vector<Token>{3}));
  // Proposals stop at the end of the history and at k.
  EXPECT_EQ(ngram({4, 5, 6, 4, 5}, 8), (std::vector<Token>{6, 4, 5}));
  EXPECT_EQ(ngram({4, 5, 6, 7, 8, 4, 5}, 2), (std::vector<Token>{6, 7}));
}

TEST(NgramProposerTest, NothingWithoutAMatch) {
  EXPECT_TRUE(ngram({1, 2, 3, 4, 5}, 4).empty());
  EXPECT_TRUE(ngram({}, 4).empty());
  EXPECT_TRUE(ngram({1, 2, 1, 2}, 0).empty());
  // A single repeated token is below the minimum pattern of two.
  EXPECT_TRUE(ngram({9, 1, 2, 9}, 4).empty());
  EXPECT_EQ(ngram({9, 1, 2, 9}, 4, 1, 4), (std::vector<Token>{1, 2, 9}));
}

TEST(NgramProposerTest, UnknownMethodsAreRefusedByName) {
  EXPECT_TRUE(make_proposer("ngram").ok());
  const auto bad = make_proposer("eagle");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ngram"), std::string::npos);
}

}  // namespace
}  // namespace cellm::executor::testing
