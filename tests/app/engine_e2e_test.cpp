// The assembled engine on the real SmolLM2-135M-Instruct (scripts/fetch-model
// smollm2) on the CPU: concurrency, cancellation, the prefix cache and the
// `cellm run` command behave as a user relies on them.
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "app/engine.h"
#include "cellm/prefix_cache.h"
#include "support/testdata.h"

namespace cellm::app {
namespace {

std::filesystem::path smollm2() {
  return cellm::testing::source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

struct Outcome {
  std::vector<Token> tokens;
  FinishReason reason = FinishReason::kFailed;
  GenerationMetrics metrics;
};

// Starts a generation; the returned future completes with its outcome.
std::future<Outcome> generate(Session& session, std::vector<Token> delta, GenConfig config,
                              GenerationCallback extra = {}) {
  auto outcome = std::make_shared<Outcome>();
  auto done = std::make_shared<std::promise<Outcome>>();
  auto handle = std::make_shared<GenerationHandle>();
  std::future<Outcome> f = done->get_future();
  *handle = session.generate_async(
      std::move(delta), std::move(config),
      [outcome, extra](const GenerationUpdate& u) {
        outcome->tokens.insert(outcome->tokens.end(), u.tokens.begin(), u.tokens.end());
        if (u.finish_reason) outcome->reason = *u.finish_reason;
        if (extra) extra(u);
      },
      [outcome, done, handle] {
        outcome->metrics = handle->metrics();
        done->set_value(*outcome);
      });
  return f;
}

class EngineE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(smollm2())) return;
    EngineOptions options;
    options.model = smollm2();
    options.backend = "cpu";
    options.max_sessions = 40;
    options.max_session_tokens = 512;
    options.prefix_cache_entries = 4;
    auto loaded = Engine::load(options);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    engine_ = std::move(loaded).value().release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    engine_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(smollm2()))
        << smollm2() << " is missing: run scripts/fetch-model smollm2";
    ASSERT_NE(engine_, nullptr);
  }
  Session open() {
    auto s = engine_->runner().open_session_async().get();
    EXPECT_TRUE(s.has_value());
    return s ? std::move(*s) : Session();
  }
  std::vector<Token> chat_prompt(const std::string& user) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", user}});
    auto text = engine_->render_chat(messages, true);
    EXPECT_TRUE(text.ok()) << text.status().to_string();
    auto ids = engine_->encode(text.value_or(""), false);
    EXPECT_TRUE(ids.ok());
    return ids.value_or(std::vector<Token>{});
  }
  static GenConfig greedy(int n) {
    GenConfig c;
    c.max_new_tokens = n;
    c.stop_tokens = engine_->stop_tokens();
    return c;
  }
  static Engine* engine_;
};
Engine* EngineE2eTest::engine_ = nullptr;

TEST_F(EngineE2eTest, SixteenConcurrentSessionsGiveTheTokensOfOneAtATime) {
  const std::vector<std::string> questions = {"What is the capital of France?",
                                              "Name a primary colour.",
                                              "What is 2 + 2?",
                                              "Say hello in Spanish.",
                                              "What do bees make?",
                                              "Name a planet.",
                                              "What is ice made of?",
                                              "Give me a fruit.",
                                              "What animal barks?",
                                              "How many legs does a spider have?",
                                              "What colour is the sky?",
                                              "Name an ocean.",
                                              "What is the opposite of hot?",
                                              "Which season is coldest?",
                                              "What do cows drink?",
                                              "Name a musical instrument."};
  std::vector<std::vector<Token>> alone;
  for (const std::string& q : questions) {
    Session s = open();
    Outcome o = generate(s, chat_prompt(q), greedy(12)).get();
    ASSERT_NE(o.reason, FinishReason::kFailed);
    alone.push_back(o.tokens);
  }
  std::vector<Session> sessions;
  std::vector<std::future<Outcome>> running;
  for (const std::string& q : questions) {
    sessions.push_back(open());
    running.push_back(generate(sessions.back(), chat_prompt(q), greedy(12)));
  }
  for (std::size_t i = 0; i < running.size(); ++i) {
    Outcome o = running[i].get();
    EXPECT_EQ(o.tokens, alone[i]) << "question " << i << ": " << questions[i];
  }
  EXPECT_GT(engine_->runner().metrics().peak_concurrent_generations, 1);
}

TEST_F(EngineE2eTest, CancelledGenerationLeavesItsSessionUsable) {
  Session s = open();
  auto handle = std::make_shared<GenerationHandle>();
  std::atomic<int> seen{0};
  auto outcome = std::make_shared<std::promise<FinishReason>>();
  *handle = s.generate_async(chat_prompt("Count from one to fifty in words."), greedy(200),
                             [handle, &seen, outcome](const GenerationUpdate& u) {
                               seen += static_cast<int>(u.tokens.size());
                               if (seen >= 3) handle->cancel();
                               if (u.finish_reason) outcome->set_value(*u.finish_reason);
                             });
  EXPECT_EQ(outcome->get_future().get(), FinishReason::kCancelled);
  handle->wait();
  EXPECT_LT(seen.load(), 200);
  const Position after_cancel = s.position();
  EXPECT_GT(after_cancel, 0);
  // The same session takes a new turn.
  Outcome next =
      generate(s, engine_->encode("\nAnd now say goodbye.", false).value(), greedy(8)).get();
  EXPECT_NE(next.reason, FinishReason::kFailed);
  EXPECT_NE(next.reason, FinishReason::kCancelled);
  EXPECT_FALSE(next.tokens.empty());
  EXPECT_GT(s.position(), after_cancel);
}

TEST_F(EngineE2eTest, PrefixCacheHitGivesTheColdTokensWithLessPrefill) {
  ASSERT_GT(engine_->prefix_cache_entries(), 0);
  const std::vector<Token> prompt = chat_prompt(
      "You are a geography tutor. Answer in one short sentence. What is the capital of Italy?");
  // Runs the prompt as a request; its tokens and the cached prompt tokens.
  auto ask = [&] {
    auto tokens = std::make_shared<std::vector<Token>>();
    Request request;
    request.prompt = prompt;
    request.config = greedy(10);
    RequestCallbacks cb;
    cb.on_update = [tokens](std::int32_t, const GenerationUpdate& u) {
      tokens->insert(tokens->end(), u.tokens.begin(), u.tokens.end());
    };
    auto handle = engine_->runner().submit(std::move(request), std::move(cb));
    EXPECT_TRUE(handle.ok()) << handle.status().to_string();
    if (!handle.ok()) return std::make_pair(std::vector<Token>{}, std::int64_t{-1});
    handle->wait();
    return std::make_pair(*tokens, handle->cached_tokens());
  };
  auto [cold, cold_cached] = ask();
  ASSERT_FALSE(cold.empty());
  // The runner snapshots the prompt; the same prompt again takes all but its
  // last token from the snapshot and must give the same greedy tokens.
  auto [warm, warm_cached] = ask();
  EXPECT_EQ(warm, cold);
  // Only the last prompt token was prefilled again.
  EXPECT_EQ(warm_cached, static_cast<std::int64_t>(prompt.size()) - 1);
  EXPECT_LE(cold_cached, static_cast<std::int64_t>(prompt.size()) - 1);
}

// A small prefill chunk splits the prompt over several engine steps; the
// continuation must not change.
TEST_F(EngineE2eTest, SmallPrefillChunkGivesTheSameTokens) {
  EXPECT_GT(engine_->prefill_chunk(), 0);
  EXPECT_LE(engine_->prefill_chunk(), 256);
  EXPECT_EQ(engine_->max_batch_tokens(), 40 + 2 * engine_->prefill_chunk());
  const std::vector<Token> prompt = chat_prompt(
      "You are a patient tutor. Explain, in two short sentences, why the sky looks blue on a "
      "clear day and why sunsets are often red or orange.");
  ASSERT_GT(prompt.size(), 48u) << "the prompt must span several chunks of 16";
  Session wide = open();
  const Outcome expected = generate(wide, prompt, greedy(12)).get();
  ASSERT_NE(expected.reason, FinishReason::kFailed);

  EngineOptions options;
  options.model = smollm2();
  options.backend = "cpu";
  options.max_sessions = 8;  // the pool must be wider than the widest forward (2048)
  options.max_session_tokens = 512;
  options.prefix_cache_entries = 0;
  options.prefill_chunk = 16;
  auto loaded = Engine::load(options);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  Engine& narrow = **loaded;
  EXPECT_EQ(narrow.prefill_chunk(), 16);
  EXPECT_EQ(narrow.max_batch_tokens(), 8 + 2 * 16);
  auto session = narrow.runner().open_session_async().get();
  ASSERT_TRUE(session.has_value());
  const Outcome got = generate(*session, prompt, greedy(12)).get();
  EXPECT_EQ(got.tokens, expected.tokens);
  EXPECT_EQ(got.metrics.n_prefilled_tokens, static_cast<std::int64_t>(prompt.size()));
}

TEST(EngineOptionsTest, NegativeSchedulerLimitsAreRefusedBeforeAnythingLoads) {
  for (int which = 0; which < 3; ++which) {
    EngineOptions options;
    options.model = "/nonexistent/model.gguf";  // never read: the limits are checked first
    if (which == 0) options.prefill_chunk = -1;
    if (which == 1) options.max_batch_tokens = -5;
    if (which == 2) options.max_decode_sequences = -2;
    auto loaded = Engine::load(options);
    ASSERT_FALSE(loaded.ok()) << which;
    EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(loaded.status().message().find("must not be negative"), std::string::npos)
        << loaded.status().to_string();
  }
}

// Runs `cellm run` on SmolLM2 with extra arguments; stdout, or "<...>" on failure.
std::string run_cli(const std::string& args) {
  const std::string cmd =
      std::string(CELLMDEV_BINARY) + " run " + smollm2().string() + " --backend cpu " + args +
      " 2>/dev/null";
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return std::string("<popen failed>");
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int rc = pclose(pipe);
  return rc == 0 ? out : "<exit " + std::to_string(rc) + ">";
}

// `cellm run` with a seed prints the same text twice, and another seed is allowed to differ.
TEST(CliE2eTest, SeededRunIsReproducible) {
  ASSERT_TRUE(std::filesystem::exists(smollm2())) << "run scripts/fetch-model smollm2";
  auto run = [](int seed) {
    return run_cli("--chat -p 'Write a short poem about the sea.' -n 24 --temperature 0.9 "
                   "--top-p 0.95 --seed " +
                   std::to_string(seed));
  };
  const std::string a = run(7);
  const std::string b = run(7);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a.rfind("<", 0), std::string::npos) << a;
  EXPECT_EQ(a, b);
}

// Greedy SmolLM2 loops on a list prompt; --repetition-penalty changes the
// text and repeats fewer words, and a value outside its range is refused.
TEST(CliE2eTest, RepetitionPenaltyChangesTheGreedyText) {
  ASSERT_TRUE(std::filesystem::exists(smollm2())) << "run scripts/fetch-model smollm2";
  const std::string prompt = "--chat -p 'List colours: red, blue, green, red, blue, green,' -n 40 "
                             "--temperature 0";
  const std::string plain = run_cli(prompt);
  const std::string penalised = run_cli(prompt + " --repetition-penalty 1.5");
  ASSERT_EQ(plain.rfind("<", 0), std::string::npos) << plain;
  ASSERT_EQ(penalised.rfind("<", 0), std::string::npos) << penalised;
  EXPECT_NE(plain, penalised);
  auto repeats = [](const std::string& text) {
    std::map<std::string, int> seen;
    int repeated = 0;
    std::string word;
    for (char c : text + " ") {
      if (std::isalpha(static_cast<unsigned char>(c))) {
        word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      } else if (!word.empty()) {
        if (seen[word]++ > 0) ++repeated;
        word.clear();
      }
    }
    return repeated;
  };
  EXPECT_LT(repeats(penalised), repeats(plain)) << "plain: " << plain << "\npenalised: "
                                                << penalised;
  EXPECT_EQ(run_cli(prompt + " --repetition-penalty 0").rfind("<exit ", 0), 0u);
}

}  // namespace
}  // namespace cellm::app
