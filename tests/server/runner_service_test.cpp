// RunnerService over a real Runner (with its prefix cache) and ToyExecutor:
// n choices share one prefill, prefix hits skip prefill without changing the
// output, seeds make choices reproducible, cancellation frees sessions; and
// the whole stack behind the HTTP server.
#include "server/runner_service.h"

#include <chrono>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cellm/decode_first_scheduler.h"
#include "runner_stack.h"
#include "server/generation_run.h"
#include "server_harness.h"
#include "toy_executor.h"

namespace cellm::server::testing {
namespace {

using namespace std::chrono_literals;

struct Collected {
  std::map<int, std::vector<Token>> tokens;
  std::map<int, FinishReason> finish;
  std::int64_t cached = 0;
};

// Runs `spec` to completion through a GenerationJob.
Collected run(GenerationService& svc, const GenerationSpec& spec) {
  auto channel = std::make_shared<EventChannel>();
  Result<std::unique_ptr<GenerationJob>> job =
      svc.start(spec, [channel](ChoiceEvent e) { channel->push(std::move(e)); });
  Collected out;
  EXPECT_TRUE(job.ok()) << job.status().to_string();
  if (!job.ok()) return out;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (static_cast<int>(out.finish.size()) < spec.n &&
         std::chrono::steady_clock::now() < deadline) {
    std::vector<ChoiceEvent> events;
    channel->wait(&events, 50ms);
    for (ChoiceEvent& e : events) {
      auto& v = out.tokens[e.choice];
      v.insert(v.end(), e.tokens.begin(), e.tokens.end());
      if (e.finish) out.finish[e.choice] = *e.finish;
    }
  }
  EXPECT_EQ(static_cast<int>(out.finish.size()), spec.n);
  // Known since the engine admitted the request, before its first event.
  out.cached = (*job)->cached_tokens();
  return out;
}

std::vector<Token> bytes(const std::string& s) {
  return std::vector<Token>(s.begin(), s.end());
}

GenerationSpec spec_for(const std::string& prompt, int n, std::int64_t max_new,
                        std::optional<std::uint64_t> seed = std::nullopt) {
  GenerationSpec s;
  s.prompt = bytes(prompt);
  s.n = n;
  s.max_new_tokens = max_new;
  s.seed = seed;
  s.sampling.temperature = seed ? 1.0f : 0.0f;
  return s;
}

TEST(RunnerServiceTest, ChoicesSharePrefillAndAreReproducible) {
  Stack a(0);
  const std::string prompt = "The shared prompt of three choices";
  Collected first = run(*a.service, spec_for(prompt, 3, 8, 42));
  // Every prompt position below the last was executed exactly once.
  std::map<Position, int> seen;
  for (const auto& e : a.executor.executed()) {
    for (std::size_t k = 0; k < e.size; ++k) seen[e.position + static_cast<Position>(k)] += 1;
  }
  for (Position p = 0; p + 1 < static_cast<Position>(prompt.size()); ++p) {
    EXPECT_EQ(seen[p], 1) << "position " << p;
  }
  // The last prompt token is fed once per choice (each samples its own first).
  EXPECT_EQ(seen[static_cast<Position>(prompt.size() - 1)], 3);
  ASSERT_EQ(first.tokens.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(first.tokens[i].size(), 8u);
    EXPECT_EQ(first.finish[i], FinishReason::kNewTokenLimit);
  }
  // Seeds differ per choice, so the choices differ.
  EXPECT_NE(first.tokens[0], first.tokens[1]);
  EXPECT_NE(first.tokens[1], first.tokens[2]);

  // The same request on a fresh engine gives the same choices; choice i of
  // seed s equals choice 0 of seed s + i.
  Stack b(0);
  Collected again = run(*b.service, spec_for(prompt, 3, 8, 42));
  EXPECT_EQ(again.tokens, first.tokens);
  Collected shifted = run(*b.service, spec_for(prompt, 1, 8, 43));
  EXPECT_EQ(shifted.tokens[0], first.tokens[1]);
  EXPECT_TRUE(FakeService::eventually([&] { return b.executor.open_sessions() == 0; }));
}

TEST(RunnerServiceTest, PrefixHitsSkipPrefillAndMatchACacheLessRun) {
  const std::string system = "You are a careful assistant. Answer briefly.";
  Stack cold(0);
  Collected reference = run(*cold.service, spec_for(system + " Q2?", 1, 12));

  Stack warm(4);
  Collected r1 = run(*warm.service, spec_for(system + " Q1?", 1, 12));
  EXPECT_EQ(r1.cached, 0);
  const std::size_t before = warm.executor.executed_tokens();
  Collected r2 = run(*warm.service, spec_for(system + " Q2?", 1, 12));
  // The common prefix "…briefly. Q" came from the snapshot of request 1.
  EXPECT_EQ(r2.cached, static_cast<std::int64_t>(system.size() + 2));
  const std::size_t prefilled = warm.executor.executed_tokens() - before;
  EXPECT_EQ(prefilled, 2u + 12u - 1u);  // "2?" plus the fed-back generated tokens
  EXPECT_EQ(r2.tokens, reference.tokens);
  // Snapshots are held by the cache, nothing else.
  EXPECT_TRUE(
      FakeService::eventually([&] { return warm.executor.open_sessions() == warm.cache_size(); }));
  EXPECT_GE(warm.cache_size(), 1u);
}

// Snapshots have sessions of their own beyond max_sessions (the Engine's
// sizing): a request costs only its choices, and /metrics counts the
// snapshot sessions apart.
TEST(RunnerServiceTest, SnapshotSessionsAreAccountedApartFromAdmission) {
  Stack own(4);
  EXPECT_EQ(own.service->max_sequences(), 32);
  EXPECT_EQ(own.service->stats().snapshot_sessions, 0);
  GenerationSpec spec;
  spec.prompt = {1, 2, 3, 4, 5};
  spec.max_new_tokens = 3;
  run(*own.service, spec);
  // The prompt's snapshot went into the cache once the prompt was committed.
  EXPECT_EQ(own.cache_size(), 1u);
  EXPECT_EQ(own.service->stats().snapshot_sessions, 1);
  EXPECT_TRUE(FakeService::eventually([&] { return own.executor.open_sessions() == 1; }));
}

TEST(RunnerServiceTest, StopTokensEndChoicesUnlessIgnored) {
  Stack s(0, /*eos_every=*/5);
  GenerationSpec spec = spec_for("abc", 1, 200);
  Collected stopped = run(*s.service, spec);
  ASSERT_EQ(stopped.finish[0], FinishReason::kStopToken);
  EXPECT_EQ(stopped.tokens[0].back(), ToyExecutor::kEos);
  spec.ignore_eos = true;
  spec.max_new_tokens = static_cast<std::int64_t>(stopped.tokens[0].size()) + 5;
  Collected ignored = run(*s.service, spec);
  EXPECT_EQ(ignored.finish[0], FinishReason::kNewTokenLimit);
  EXPECT_EQ(ignored.tokens[0].size(), static_cast<std::size_t>(spec.max_new_tokens));
}

TEST(RunnerServiceTest, DestroyingAJobCancelsItAndFreesItsSessions) {
  Stack s(0);
  auto channel = std::make_shared<EventChannel>();
  // No token limit that the engine could reach before the job is destroyed
  // (400 was reached on a fast run, ending choice 0 by length instead).
  GenerationSpec spec = spec_for("long one", 2, std::int64_t{1} << 40, 1);
  Result<std::unique_ptr<GenerationJob>> job =
      s.service->start(spec, [channel](ChoiceEvent e) { channel->push(std::move(e)); });
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  EXPECT_TRUE(FakeService::eventually([&] { return s.executor.open_sessions() == 2u; }));
  job->reset();
  EXPECT_TRUE(FakeService::eventually([&] { return s.executor.open_sessions() == 0; }));
  // Both choices report their cancellation; on a loaded machine the two
  // terminal events may arrive some time apart, so collect until both came.
  std::set<int> cancelled;
  std::string seen;  // every terminal event, for the failure message
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cancelled.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::vector<ChoiceEvent> events;
    channel->wait(&events, 50ms);
    for (const ChoiceEvent& e : events) {
      if (e.finish) {
        seen += fmt::format(" choice {}: {} {};", e.choice, finish_reason_name(*e.finish), e.error);
      }
      if (e.finish == FinishReason::kCancelled) cancelled.insert(e.choice);
    }
  }
  EXPECT_EQ(cancelled, (std::set<int>{0, 1})) << seen;
}

TEST(RunnerServiceTest, ServesOverHttpWithCachedTokensInUsage) {
  Stack s(4);
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  Server server(o);
  ASSERT_TRUE(server.bind().is_ok());
  server.set_service(s.service);
  std::thread t([&] { (void)server.serve(); });
  httplib::Client c("127.0.0.1", server.port());
  const std::string system = std::string(60, 's');
  auto ask = [&](const std::string& q) {
    nlohmann::json body{
        {"messages", nlohmann::json::array({{{"role", "system"}, {"content", system}},
                                            {{"role", "user"}, {"content", q}}})},
        {"max_tokens", 4},
        {"n", 2},
        {"seed", 5}};
    auto res = c.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    return nlohmann::json::parse(res->body);
  };
  nlohmann::json a = ask("first question");
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(a["choices"].size(), 2u);
  nlohmann::json b = ask("second question");
  // "s…s|" plus nothing of the differing question.
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 61);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("cellm:prefix_cache_hits_total 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("cellm:prefix_cache_hit_tokens_total 61\n"), std::string::npos);
  server.stop();
  t.join();
}

}  // namespace
}  // namespace cellm::server::testing
