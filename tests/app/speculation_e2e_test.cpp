// Speculative decoding on the real SmolLM2-135M-Instruct (scripts/fetch-model
// smollm2) through the request path users take (Runner::submit): with the
// n-gram proposer a request generates exactly the tokens it generates
// without, greedy and seeded sampling, alone and batched, while drafts are
// really proposed and accepted on text that repeats its prompt. With the
// model as its own draft (--speculate draft --draft-model) the same, every
// greedy draft kept; a draft of another vocabulary (gemma-3) and bad option
// pairs are refused at start-up, by the engine and by the `cellm` command.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <utility>
#include <string>
#include <vector>

#include "app/engine.h"
#include "support/testdata.h"

namespace cellm::app {
namespace {

std::filesystem::path smollm2() {
  return cellm::testing::source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::filesystem::path gemma3() {
  return cellm::testing::source_dir() / "models" / "gemma-3-270m-q4_k_m.gguf";
}

std::unique_ptr<Engine> load(const std::string& speculate,
                             const std::filesystem::path& draft_model = {}) {
  EngineOptions options;
  options.model = smollm2();
  options.backend = "cpu";
  options.max_sessions = 4;
  options.max_session_tokens = 512;
  options.prefix_cache_entries = 0;
  options.speculate = speculate;
  options.draft_model = draft_model;
  auto loaded = Engine::load(options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  return loaded.ok() ? std::move(loaded).value() : nullptr;
}

struct Result1 {
  std::vector<Token> tokens;
  std::int64_t drafted = 0;
  std::int64_t accepted = 0;
};

// Submits every prompt at once and waits for all of them.
std::vector<Result1> run(Engine& engine, const std::vector<std::string>& users, GenConfig config) {
  std::vector<std::shared_ptr<Result1>> results;
  std::vector<RequestHandle> handles;
  for (const std::string& user : users) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", user}});
    auto text = engine.render_chat(messages, true);
    EXPECT_TRUE(text.ok());
    auto ids = engine.encode(text.value_or(""), false);
    EXPECT_TRUE(ids.ok());
    Request request;
    request.prompt = ids.value_or(std::vector<Token>{});
    request.config = config;
    request.use_prefix_cache = false;
    auto result = std::make_shared<Result1>();
    RequestCallbacks callbacks;
    callbacks.on_update = [result](std::int32_t, const GenerationUpdate& u) {
      result->tokens.insert(result->tokens.end(), u.tokens.begin(), u.tokens.end());
    };
    callbacks.on_done = [result](const RequestOutcome& outcome) {
      for (const GenerationMetrics& m : outcome.metrics) {
        result->drafted += m.n_draft_tokens;
        result->accepted += m.n_accepted_draft_tokens;
      }
    };
    auto handle = engine.runner().submit(std::move(request), std::move(callbacks));
    EXPECT_TRUE(handle.ok()) << handle.status().to_string();
    if (handle.ok()) handles.push_back(*handle);
    results.push_back(result);
  }
  for (const RequestHandle& h : handles) h.wait();
  std::vector<Result1> out;
  for (const auto& r : results) out.push_back(*r);
  return out;
}

const std::vector<std::string> kUsers = {
    "Repeat exactly, word for word: the red fox runs past the old mill and the red fox "
    "runs past the old mill again.",
    "Copy this list twice: apple, banana, cherry, date, elderberry, fig.",
};

class SpeculationE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(smollm2()))
        << smollm2() << " is missing: run scripts/fetch-model smollm2";
  }
};

TEST_F(SpeculationE2eTest, NgramDraftsChangeNoTokenGreedyOrSeeded) {
  std::unique_ptr<Engine> plain = load("off");
  std::unique_ptr<Engine> spec = load("ngram");
  ASSERT_TRUE(plain && spec);
  GenConfig greedy;
  greedy.max_new_tokens = 40;
  greedy.stop_tokens = plain->stop_tokens();
  GenConfig sampled = greedy;
  sampled.sampling.temperature = 0.8f;
  sampled.seed = 7;
  for (const GenConfig& config : {greedy, sampled}) {
    const bool is_greedy = config.sampling.temperature == 0.0f;
    const std::vector<Result1> want = run(*plain, kUsers, config);
    // Both prompts together (a batch of two) and each alone.
    const std::vector<Result1> together = run(*spec, kUsers, config);
    ASSERT_EQ(together.size(), want.size());
    std::int64_t drafted = 0;
    std::int64_t accepted = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_FALSE(want[i].tokens.empty());
      EXPECT_EQ(want[i].drafted, 0);
      EXPECT_EQ(together[i].tokens, want[i].tokens) << (is_greedy ? "greedy" : "seeded") << " " << i;
      const std::vector<Result1> alone = run(*spec, {kUsers[i]}, config);
      EXPECT_EQ(alone.at(0).tokens, want[i].tokens) << (is_greedy ? "greedy" : "seeded") << " " << i;
      drafted += together[i].drafted + alone[0].drafted;
      accepted += together[i].accepted + alone[0].accepted;
    }
    // Copying prompts is what prompt lookup is for: drafts were proposed
    // and the model kept some.
    EXPECT_GT(drafted, 0) << (is_greedy ? "greedy" : "seeded");
    EXPECT_GT(accepted, 0) << (is_greedy ? "greedy" : "seeded");
  }
  const auto totals = spec->speculation();
  ASSERT_TRUE(totals.has_value());
  EXPECT_GT(totals->accepted, 0);
  EXPECT_FALSE(plain->speculation().has_value());
}

TEST_F(SpeculationE2eTest, UnknownMethodIsRefusedAtLoad) {
  EngineOptions options;
  options.model = smollm2();
  options.backend = "cpu";
  options.speculate = "medusa";
  auto loaded = Engine::load(options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("ngram"), std::string::npos);
}

TEST_F(SpeculationE2eTest, TheModelAsItsOwnDraftChangesNoTokenAndKeepsGreedyDrafts) {
  std::unique_ptr<Engine> plain = load("off");
  std::unique_ptr<Engine> spec = load("draft", smollm2());
  ASSERT_TRUE(plain && spec);
  GenConfig greedy;
  greedy.max_new_tokens = 24;
  greedy.stop_tokens = plain->stop_tokens();
  GenConfig sampled = greedy;
  sampled.sampling.temperature = 0.8f;
  sampled.seed = 11;
  for (const GenConfig& config : {greedy, sampled}) {
    const bool is_greedy = config.sampling.temperature == 0.0f;
    const char* what = is_greedy ? "greedy" : "seeded";
    const std::vector<Result1> want = run(*plain, kUsers, config);
    const std::vector<Result1> together = run(*spec, kUsers, config);
    const std::vector<Result1> alone = run(*spec, {kUsers[0]}, config);
    ASSERT_EQ(together.size(), want.size());
    std::int64_t drafted = 0;
    std::int64_t accepted = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_FALSE(want[i].tokens.empty());
      EXPECT_EQ(together[i].tokens, want[i].tokens) << what << " " << i;
      drafted += together[i].drafted;
      accepted += together[i].accepted;
    }
    EXPECT_EQ(alone.at(0).tokens, want[0].tokens) << what << " alone";
    drafted += alone[0].drafted;
    accepted += alone[0].accepted;
    EXPECT_GT(drafted, 0) << what;
    EXPECT_GT(accepted, 0) << what;
    // The draft is the target: its greedy guesses are the target's choices.
    if (is_greedy) {
      EXPECT_EQ(accepted, drafted) << what;
    }
  }
}

TEST_F(SpeculationE2eTest, ADraftOfAnotherVocabularyIsRefusedNamingBothSizes) {
  ASSERT_TRUE(std::filesystem::exists(gemma3()))
      << gemma3() << " is missing: run scripts/fetch-model gemma3";
  EngineOptions options;
  options.model = smollm2();
  options.backend = "cpu";
  options.max_session_tokens = 512;
  options.speculate = "draft";
  options.draft_model = gemma3();
  auto loaded = Engine::load(options);
  ASSERT_FALSE(loaded.ok());
  const std::string message(loaded.status().message());
  EXPECT_NE(message.find("262144"), std::string::npos) << message;
  EXPECT_NE(message.find("49152"), std::string::npos) << message;
}

TEST_F(SpeculationE2eTest, DraftOptionPairsAreRefusedAtStartUp) {
  EngineOptions options;
  options.model = smollm2();
  options.backend = "cpu";
  options.speculate = "draft";  // and no draft model
  auto loaded = Engine::load(options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.status().message()).find("--draft-model"), std::string::npos);
  options.speculate = "ngram";
  options.draft_model = smollm2();
  loaded = Engine::load(options);
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(std::string(loaded.status().message()).find("--speculate draft"), std::string::npos);
}

// The `cellm` command's exit status and stderr for `args`.
std::pair<int, std::string> cellm_cli(const std::string& args) {
  const std::string cmd = std::string(CELLMDEV_BINARY) + " " + args + " 2>&1";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {-1, "<popen failed>"};
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  return {pclose(pipe), out};
}

TEST_F(SpeculationE2eTest, TheCommandRefusesBadDraftOptionsAndRunsAGoodOne) {
  const std::string model = smollm2().string();
  const auto [serve_rc, serve_out] = cellm_cli("serve " + model + " --port 0 --draft-model " + model);
  EXPECT_NE(serve_rc, 0);
  EXPECT_NE(serve_out.find("--speculate draft"), std::string::npos) << serve_out;
  const auto [run_rc, run_out] =
      cellm_cli("run " + model + " --backend cpu -p hi -n 2 --speculate draft");
  EXPECT_NE(run_rc, 0);
  EXPECT_NE(run_out.find("--draft-model"), std::string::npos) << run_out;
  const auto [missing_rc, missing_out] = cellm_cli(
      "run " + model + " --backend cpu -p hi -n 2 --speculate draft --draft-model /nonexistent.gguf");
  EXPECT_NE(missing_rc, 0);
  EXPECT_NE(missing_out.find("/nonexistent.gguf"), std::string::npos) << missing_out;
  const auto [ok_rc, ok_out] = cellm_cli("run " + model +
                                         " --backend cpu --max-session-tokens 256 -p 'Count: 1, 2, "
                                         "3,' -n 8 --speculate draft --draft-model " + model);
  EXPECT_EQ(ok_rc, 0) << ok_out;
}

}  // namespace
}  // namespace cellm::app
