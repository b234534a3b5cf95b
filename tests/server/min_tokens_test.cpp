// min_tokens end to end over a real Runner and the ToyExecutor: the runner
// installs a policy suppressing the stop tokens, swaps it for the plain one
// exactly when min_new_tokens have been delivered, refuses impossible
// configurations before anything runs, ignores stop tokens an executor
// delivers anyway; RunnerService passes it to every clone; the server applies
// it to EOS and to stop strings.
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "server/http_server.h"
#include "server/runner_service.h"
#include "toy_executor.h"

namespace cellm::server::testing {
namespace {

using namespace std::chrono_literals;
constexpr Token kEos = ToyExecutor::kEos;

struct Outcome {
  std::vector<Token> tokens;
  std::optional<FinishReason> finish;
  std::string error;
};

struct RunnerStack {
  explicit RunnerStack(std::uint64_t eos_every)
      : executor(8, eos_every), runner(executor, DecodeFirstScheduler::create(64, 16, 16)) {}
  ~RunnerStack() { runner.shutdown(); }

  Outcome generate(Session& session, GenConfig config) {
    auto out = std::make_shared<Outcome>();
    auto mu = std::make_shared<std::mutex>();
    GenerationHandle h = session.generate_async(
        std::vector<Token>{'h', 'i'}, std::move(config), [out, mu](const GenerationUpdate& u) {
          std::lock_guard lock(*mu);
          out->tokens.insert(out->tokens.end(), u.tokens.begin(), u.tokens.end());
          if (u.finish_reason) {
            out->finish = u.finish_reason;
            out->error = u.error_message;
          }
        });
    h.wait();
    std::lock_guard lock(*mu);
    return *out;
  }
  Session open() {
    std::optional<Session> s = runner.open_session_async().get();
    EXPECT_TRUE(s.has_value());
    return s ? std::move(*s) : Session();
  }

  ToyExecutor executor;
  Runner runner;
};

GenConfig config(std::int64_t min, std::int64_t max, std::vector<Token> stops = {kEos}) {
  GenConfig c;
  c.min_new_tokens = min;
  c.max_new_tokens = max;
  c.stop_tokens = std::move(stops);
  c.sampling.temperature = 1.0f;
  c.sampling.top_p = 0.9f;
  c.seed = 7;
  return c;
}

std::size_t count_of(const std::vector<Token>& tokens, Token t) {
  return static_cast<std::size_t>(std::count(tokens.begin(), tokens.end(), t));
}

TEST(MinTokensTest, StopTokensAreSuppressedUntilTheMinimumThenAllowed) {
  RunnerStack s(/*eos_every=*/1);  // EOS is the only token unless suppressed
  Session session = s.open();
  const Outcome o = s.generate(session, config(5, 10));
  ASSERT_EQ(o.finish, FinishReason::kStopToken) << o.error;
  ASSERT_EQ(o.tokens.size(), 6u);
  EXPECT_EQ(count_of(o.tokens, kEos), 1u);
  EXPECT_EQ(o.tokens.back(), kEos);

  const std::vector<ToyExecutor::PolicyChange> p = s.executor.policies();
  ASSERT_EQ(p.size(), 2u);
  // Installed before the first draw, suppressing exactly the stop token.
  EXPECT_EQ(p[0].outputs_before, 0u);
  EXPECT_TRUE(p[0].params.suppresses(kEos));
  EXPECT_EQ(p[0].params.suppressed_count, 1u);
  EXPECT_EQ(p[0].seed, std::optional<std::uint64_t>(7));
  // Replaced after the fifth token by the caller's own policy.
  EXPECT_EQ(p[1].outputs_before, 5u);
  EXPECT_EQ(p[1].sid, p[0].sid);
  EXPECT_EQ(p[1].params, (SamplingParams{1.0f, 0.9f, 0}));
  // A seeded run stays seeded, on a generator of its own rather than a restart.
  ASSERT_TRUE(p[1].seed.has_value());
  EXPECT_NE(*p[1].seed, 7u);

  // The same request again draws the same seeds: reproducible.
  Session again = s.open();
  const Outcome o2 = s.generate(again, config(5, 10));
  const std::vector<ToyExecutor::PolicyChange> p2 = s.executor.policies();
  ASSERT_EQ(p2.size(), 4u);
  EXPECT_EQ(p2[3].seed, p[1].seed);
  EXPECT_EQ(o2.tokens, o.tokens);
}

TEST(MinTokensTest, MinimumEqualToMaximumNeverStops) {
  RunnerStack s(1);
  Session session = s.open();
  const Outcome o = s.generate(session, config(4, 4));
  EXPECT_EQ(o.finish, FinishReason::kNewTokenLimit);
  EXPECT_EQ(o.tokens.size(), 4u);
  EXPECT_EQ(count_of(o.tokens, kEos), 0u);
  // Finished before the minimum's end was passed: no second policy.
  EXPECT_EQ(s.executor.policies().size(), 1u);
}

TEST(MinTokensTest, GreedyPoliciesAreSuppressedToo) {
  RunnerStack s(1);
  Session session = s.open();
  GenConfig c = config(3, 8);
  c.sampling = SamplingParams{};
  c.seed.reset();
  const Outcome o = s.generate(session, c);
  EXPECT_EQ(o.finish, FinishReason::kStopToken);
  EXPECT_EQ(o.tokens.size(), 4u);
  const auto p = s.executor.policies();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0].params.suppresses(kEos));
  EXPECT_FALSE(p[1].seed.has_value());  // unseeded stays unseeded
}

TEST(MinTokensTest, WithoutMinimumNothingIsSuppressed) {
  RunnerStack s(1);
  Session session = s.open();
  const Outcome o = s.generate(session, config(0, 8));
  EXPECT_EQ(o.finish, FinishReason::kStopToken);
  EXPECT_EQ(o.tokens, std::vector<Token>{kEos});
  const auto p = s.executor.policies();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].params.suppressed_count, 0u);
  // A minimum with no stop tokens (ignore_eos) has nothing to suppress.
  Session other = s.open();
  const Outcome o2 = s.generate(other, config(3, 5, {}));
  EXPECT_EQ(o2.finish, FinishReason::kNewTokenLimit);
  EXPECT_EQ(o2.tokens.size(), 5u);
  EXPECT_EQ(s.executor.policies().back().params.suppressed_count, 0u);
}

TEST(MinTokensTest, ImpossibleMinimumsAreRefusedBeforeAnythingRuns) {
  RunnerStack s(1);
  Session session = s.open();
  const Outcome above = s.generate(session, config(6, 5));
  EXPECT_EQ(above.finish, FinishReason::kFailed);
  EXPECT_NE(above.error.find("min_new_tokens 6"), std::string::npos) << above.error;
  const Outcome negative = s.generate(session, config(-1, 5));
  EXPECT_EQ(negative.finish, FinishReason::kFailed);
  std::vector<Token> many;
  for (Token t = 300; t < 300 + kMaxSuppressedTokens + 1; ++t) many.push_back(t);
  const Outcome crowded = s.generate(session, config(2, 5, many));
  EXPECT_EQ(crowded.finish, FinishReason::kFailed);
  EXPECT_NE(crowded.error.find("at most 8"), std::string::npos) << crowded.error;
  // Nothing ran, no policy was installed, and the session still works.
  EXPECT_TRUE(s.executor.executed().empty());
  EXPECT_TRUE(s.executor.policies().empty());
  EXPECT_EQ(session.position(), 0);
  const Outcome fine = s.generate(session, config(2, 5));
  EXPECT_EQ(fine.finish, FinishReason::kStopToken);
  EXPECT_EQ(fine.tokens.size(), 3u);
}

TEST(MinTokensTest, RunnerIgnoresStopTokensBeforeTheMinimum) {
  // An executor that delivers a stop token despite the suppression (one
  // without support for it) still cannot end the generation early.
  class Deaf final : public Executor {
   public:
    std::optional<SessionId> open_session() override { return next_++; }
    void close_session(SessionId) override {}
    void set_sampling(SessionId, const SamplingParams&, std::optional<std::uint64_t>) override {}
    bool execute(const BatchInput& batch, BatchOutput& out) override {
      out.outputs.assign(batch.inputs.size(), std::nullopt);
      for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
        if (batch.inputs[i].produce_output) out.outputs[i] = Output{batch.inputs[i].sid, {kEos}};
      }
      return true;
    }

   private:
    SessionId next_ = 1;
  } deaf;
  Runner runner(deaf, DecodeFirstScheduler::create(64, 16, 16));
  std::optional<Session> session = runner.open_session_async().get();
  ASSERT_TRUE(session);
  std::vector<Token> got;
  std::optional<FinishReason> finish;
  std::mutex mu;
  GenerationHandle h =
      session->generate_async(std::vector<Token>{1}, config(3, 10), [&](const GenerationUpdate& u) {
        std::lock_guard lock(mu);
        got.insert(got.end(), u.tokens.begin(), u.tokens.end());
        if (u.finish_reason) finish = u.finish_reason;
      });
  h.wait();
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(got, std::vector<Token>(4, kEos));
    EXPECT_EQ(finish, FinishReason::kStopToken);
  }
  session.reset();
  runner.shutdown();
}

ModelText letters_text() {
  ModelText t;
  t.tokenize = [](std::string_view s, bool) -> Result<std::vector<Token>> {
    return std::vector<Token>(s.begin(), s.end());
  };
  t.render_chat = [](const nlohmann::ordered_json&, const nlohmann::ordered_json&,
                     bool) -> Result<std::string> { return std::string("chat|"); };
  t.detokenize = [](std::span<const Token> ids) {
    std::string s;
    for (Token id : ids) {
      if (id < 256) s += static_cast<char>(id);
    }
    return s;
  };
  t.text_stream = [] {
    struct Bytes : TokenTextStream {
      std::string push(Token id) override {
        return id < 256 ? std::string(1, static_cast<char>(id)) : "";
      }
      std::string finish() override { return {}; }
    };
    return std::unique_ptr<TokenTextStream>(new Bytes);
  };
  return t;
}

struct ServiceStack {
  explicit ServiceStack(std::uint64_t eos_every, bool can_suppress = true)
      : executor(16, eos_every, can_suppress),
        runner(executor, DecodeFirstScheduler::create(64, 16, 16), toy_runner_options()) {
    RunnerServiceConfig c;
    c.model_name = "toy";
    c.context_length = 256;
    c.vocab_size = 258;
    c.max_sessions = 16;
    c.stop_tokens = {kEos};
    service = std::make_shared<RunnerService>(runner, letters_text(), c);
  }
  ~ServiceStack() {
    service.reset();
    runner.shutdown();
  }
  ToyExecutor executor;
  Runner runner;
  std::shared_ptr<RunnerService> service;
};

// A Server over `svc` on a free port for the lifetime of the object.
struct LiveServer {
  explicit LiveServer(std::shared_ptr<GenerationService> svc) : server(options()) {
    EXPECT_TRUE(server.bind().is_ok());
    server.set_service(std::move(svc));
    thread = std::thread([this] { (void)server.serve(); });
  }
  ~LiveServer() {
    server.stop();
    thread.join();
  }
  static ServerOptions options() {
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    return o;
  }
  nlohmann::json post(const nlohmann::json& body) {
    httplib::Client c("127.0.0.1", server.port());
    auto res = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return {};
    EXPECT_EQ(res->status, 200) << res->body;
    return nlohmann::json::parse(res->body);
  }
  Server server;
  std::thread thread;
};

TEST(MinTokensTest, EveryClonedChoiceHonoursTheMinimum) {
  ServiceStack s(1);
  LiveServer live(s.service);
  nlohmann::json r = live.post({{"prompt", "go"},
                                {"max_tokens", 12},
                                {"min_tokens", 5},
                                {"n", 3},
                                {"seed", 11},
                                {"temperature", 0.8}});
  ASSERT_EQ(r["choices"].size(), 3u);
  for (const auto& c : r["choices"]) {
    // Five letters, then the EOS that is no longer suppressed (not shown).
    EXPECT_EQ(c["text"].get<std::string>().size(), 5u) << r.dump();
    EXPECT_EQ(c["finish_reason"], "stop");
  }
  EXPECT_EQ(r["usage"]["completion_tokens"], 18);  // 3 x (5 letters + EOS)
  std::size_t suppressing = 0;
  for (const auto& p : s.executor.policies()) suppressing += p.params.suppresses(kEos) ? 1 : 0;
  EXPECT_EQ(suppressing, 3u);
}

TEST(MinTokensTest, StopStringsAreLookedForOnlyAfterTheMinimum) {
  ServiceStack s(0);  // never EOS: only strings stop
  LiveServer live(s.service);
  const nlohmann::json plain = {{"prompt", "abc"}, {"max_tokens", 12}, {"temperature", 0}};
  const std::string base = live.post(plain)["choices"][0]["text"].get<std::string>();
  ASSERT_EQ(base.size(), 12u);
  // A letter of the first tokens would stop at once without a minimum.
  const std::string stop(1, base[1]);
  nlohmann::json early = plain;
  early["stop"] = {stop};
  EXPECT_EQ(live.post(early)["choices"][0]["text"], base.substr(0, base.find(stop)));
  // With min_tokens 4 the first four letters pass whatever they hold; the
  // search starts after them.
  nlohmann::json late = early;
  late["min_tokens"] = 4;
  const std::string rest = base.substr(4);
  const std::size_t at = rest.find(stop);
  const std::string want =
      base.substr(0, 4) + (at == std::string::npos ? rest : rest.substr(0, at));
  nlohmann::json r = live.post(late);
  EXPECT_EQ(r["choices"][0]["text"], want);
  EXPECT_EQ(r["choices"][0]["finish_reason"], at == std::string::npos ? "length" : "stop");
}

TEST(MinTokensTest, ServiceRefusesTooManyStopTokensBeforeOpeningASession) {
  ServiceStack s(0);
  RunnerServiceConfig c;
  c.model_name = "toy";
  c.context_length = 256;
  c.vocab_size = 258;
  c.max_sessions = 16;
  for (Token t = 200; t < 200 + static_cast<Token>(kMaxSuppressedTokens) + 1; ++t) {
    c.stop_tokens.push_back(t);
  }
  RunnerService crowded(s.runner, letters_text(), c);
  EXPECT_EQ(crowded.stop_tokens(), c.stop_tokens);
  GenerationSpec spec;
  spec.prompt = {'h', 'i'};
  spec.max_new_tokens = 4;
  spec.min_new_tokens = 1;
  // Shared: a queued request may call back after the job is gone (at shutdown).
  auto events = std::make_shared<std::atomic<int>>(0);
  auto job = crowded.start(
      spec, [events](ChoiceEvent) { ++*events; });
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(job.status().message()).find("at most 8"), std::string::npos);
  EXPECT_EQ(events->load(), 0);
  EXPECT_TRUE(s.executor.executed().empty());
  EXPECT_TRUE(s.executor.policies().empty());
  // ignore_eos drops the stop tokens, and with them the problem.
  spec.ignore_eos = true;
  auto fine = crowded.start(
      spec, [events](ChoiceEvent) { ++*events; });
  EXPECT_TRUE(fine.ok()) << fine.status().to_string();
}

TEST(MinTokensTest, ServiceOverAnExecutorThatCannotSuppressRefusesBeforeOpeningASession) {
  ServiceStack s(1, /*can_suppress=*/false);
  EXPECT_FALSE(s.service->can_suppress_tokens());
  GenerationSpec spec;
  spec.prompt = {'h', 'i'};
  spec.max_new_tokens = 4;
  spec.min_new_tokens = 2;
  // Shared: a queued request may call back after the job is gone (at shutdown).
  auto events = std::make_shared<std::atomic<int>>(0);
  auto job = s.service->start(
      spec, [events](ChoiceEvent) { ++*events; });
  EXPECT_EQ(job.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(job.status().message()).find("min_new_tokens 2"), std::string::npos)
      << job.status().to_string();
  EXPECT_EQ(events->load(), 0);
  EXPECT_EQ(s.executor.open_sessions(), 0u);
  EXPECT_TRUE(s.executor.executed().empty());
  EXPECT_TRUE(s.executor.policies().empty());
  // Without stop tokens to hold back (ignore_eos), or without a minimum, it runs.
  spec.ignore_eos = true;
  auto ignoring = s.service->start(
      spec, [events](ChoiceEvent) { ++*events; });
  EXPECT_TRUE(ignoring.ok()) << ignoring.status().to_string();
  spec.ignore_eos = false;
  spec.min_new_tokens = 0;
  auto plain = s.service->start(
      spec, [events](ChoiceEvent) { ++*events; });
  EXPECT_TRUE(plain.ok()) << plain.status().to_string();
}

TEST(MinTokensTest, ServerRefusesMinTokensWithA400WhenTheExecutorCannotSuppress) {
  ServiceStack s(1, /*can_suppress=*/false);
  LiveServer live(s.service);
  httplib::Client c("127.0.0.1", live.server.port());
  const nlohmann::json req = {{"prompt", "go"}, {"max_tokens", 6}, {"min_tokens", 3}};
  auto res = c.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  const nlohmann::json body = nlohmann::json::parse(res->body, nullptr, false);
  ASSERT_TRUE(body.contains("error")) << res->body;
  EXPECT_EQ(body["error"]["param"], "min_tokens");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  const std::string message = body["error"]["message"].get<std::string>();
  EXPECT_NE(message.find("cannot suppress"), std::string::npos) << message;
  // Nothing reached the engine: no session, no step, no policy.
  EXPECT_EQ(s.executor.open_sessions(), 0u);
  EXPECT_TRUE(s.executor.executed().empty());
  EXPECT_TRUE(s.executor.policies().empty());
  // The same request without the minimum is served (this toy samples EOS
  // first, which nothing holds back now).
  nlohmann::json plain = req;
  plain.erase("min_tokens");
  nlohmann::json r = live.post(plain);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens"], 1) << r.dump();
  EXPECT_FALSE(s.executor.executed().empty());
}

TEST(MinTokensTest, AStopStringAcrossTheMinimumEndsTheChoiceBeforeIt) {
  ServiceStack s(0);
  LiveServer live(s.service);
  const nlohmann::json plain = {{"prompt", "abc"}, {"max_tokens", 12}, {"temperature", 0}};
  const std::string base = live.post(plain)["choices"][0]["text"].get<std::string>();
  ASSERT_EQ(base.size(), 12u);
  // Letters 3 and 4 straddle a minimum of 4 tokens: the match begins inside
  // the minimum and ends after it, so it counts (vLLM); only the text before
  // the first match that ends past letter 4 is delivered.
  const std::string stop = base.substr(3, 2);
  std::size_t at = base.find(stop);
  while (at + stop.size() <= 4) at = base.find(stop, at + 1);
  ASSERT_LE(at, 3u);
  nlohmann::json req = plain;
  req["stop"] = {stop};
  req["min_tokens"] = 4;
  nlohmann::json r = live.post(req);
  EXPECT_EQ(r["choices"][0]["text"], base.substr(0, at)) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["usage"]["completion_tokens"], 5);  // generation ended with letter 5
}

}  // namespace
}  // namespace cellm::server::testing
