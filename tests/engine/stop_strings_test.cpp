// Stop strings matched by the engine (GenConfig::stop_strings) over
// FakeExecutor, whose n-th token of any session is sid * 1000 + n: the byte
// table gives that token the n-th piece of a script, so every session "says"
// the same text. Expected offsets are computed from the script with
// std::string::find, never copied from a run.
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "engine/fake_executor.h"

namespace cellm::testing {
namespace {

using Pieces = std::vector<std::string>;

// token_bytes for sessions 1..9: the n-th token of each says pieces[n - 1].
TokenBytesTable table_for(const Pieces& pieces) {
  auto t = std::make_shared<std::vector<std::string>>(10000);
  for (std::size_t sid = 1; sid <= 9; ++sid) {
    for (std::size_t n = 1; n <= pieces.size(); ++n) (*t)[sid * 1000 + n] = pieces[n - 1];
  }
  return t;
}

std::string joined(const Pieces& pieces, std::size_t count) {
  return std::accumulate(pieces.begin(), pieces.begin() + static_cast<std::ptrdiff_t>(count),
                         std::string());
}

// The number of leading pieces whose text first holds `stop` ending past
// the first `min_tokens` pieces' bytes; 0 when none does.
std::size_t pieces_until(const Pieces& pieces, const std::string& stop, std::size_t min_tokens) {
  const std::size_t boundary = joined(pieces, std::min(min_tokens, pieces.size())).size();
  for (std::size_t k = 1; k <= pieces.size(); ++k) {
    const std::string text = joined(pieces, k);
    for (std::size_t at = text.find(stop); at != std::string::npos; at = text.find(stop, at + 1)) {
      if (at + stop.size() > boundary) return k;
    }
  }
  return 0;
}

struct Seen {
  std::mutex mu;
  std::map<std::int32_t, std::vector<Token>> tokens;
  std::map<std::int32_t, GenerationUpdate> last;
  std::optional<RequestOutcome> outcome;
};

RequestCallbacks record(const std::shared_ptr<Seen>& seen) {
  RequestCallbacks cb;
  cb.on_update = [seen](std::int32_t choice, const GenerationUpdate& u) {
    std::lock_guard lock(seen->mu);
    auto& t = seen->tokens[choice];
    t.insert(t.end(), u.tokens.begin(), u.tokens.end());
    if (u.finish_reason) seen->last[choice] = u;
  };
  cb.on_done = [seen](const RequestOutcome& o) {
    std::lock_guard lock(seen->mu);
    seen->outcome = o;
  };
  return cb;
}

class StopStringsTest : public ::testing::Test {
 protected:
  void start(const Pieces& pieces) {
    RunnerOptions options;
    options.token_bytes = table_for(pieces);
    runner = std::make_unique<Runner>(exec, DecodeFirstScheduler::create(16, 4, 4), options);
  }
  void TearDown() override {
    if (runner) runner->shutdown();
  }
  static Request request(std::vector<std::string> stops, std::int64_t max_new = 20,
                         std::int32_t n = 1) {
    Request r;
    r.prompt = {1, 2, 3};
    r.n = n;
    r.config.max_new_tokens = max_new;
    r.config.stop_strings = std::move(stops);
    return r;
  }
  std::shared_ptr<Seen> run(Request r) {
    auto seen = std::make_shared<Seen>();
    auto h = runner->submit(std::move(r), record(seen));
    EXPECT_TRUE(h.ok()) << h.status().message();
    if (h.ok()) h->wait();
    return seen;
  }
  // Checks that choice `c` ended on stop string `index` after `count` pieces.
  static void expect_stopped(Seen& seen, std::int32_t c, const Pieces& pieces,
                             const std::vector<std::string>& stops, std::int32_t index,
                             std::size_t count) {
    std::lock_guard lock(seen.mu);
    ASSERT_TRUE(seen.last.contains(c));
    const GenerationUpdate& u = seen.last[c];
    ASSERT_EQ(u.finish_reason, FinishReason::kStopString) << u.error_message;
    ASSERT_TRUE(u.stop_string.has_value());
    EXPECT_EQ(u.stop_string->index, index);
    const std::string text = joined(pieces, count);
    EXPECT_EQ(u.stop_string->text_bytes, static_cast<std::int64_t>(text.size()));
    EXPECT_EQ(u.stop_string->offset,
              static_cast<std::int64_t>(text.find(stops[static_cast<std::size_t>(index)])));
    EXPECT_EQ(seen.tokens[c].size(), count);
  }

  FakeExecutor exec;
  std::unique_ptr<Runner> runner;
};

const Pieces kHello = {"He", "llo", " wor", "ld", "!", " Bye", "."};

TEST_F(StopStringsTest, AStopSpanningTokensEndsTheChoiceOnTheTokenThatCompletesIt) {
  start(kHello);
  const std::vector<std::string> stops = {"lo w"};
  auto seen = run(request(stops));
  expect_stopped(*seen, 0, kHello, stops, 0, pieces_until(kHello, "lo w", 0));
  ASSERT_EQ(pieces_until(kHello, "lo w", 0), 3u);  // the script really spans tokens 2 and 3
}

TEST_F(StopStringsTest, AStopInsideOneTokenIsFoundAndItsOffsetLiesInThatToken) {
  start(kHello);
  const std::vector<std::string> stops = {"wo"};
  auto seen = run(request(stops));
  expect_stopped(*seen, 0, kHello, stops, 0, 3);
  std::lock_guard lock(seen->mu);
  // " wor" starts at byte 5; "wo" begins one byte into it.
  EXPECT_GT(seen->last[0].stop_string->offset, static_cast<std::int64_t>(joined(kHello, 2).size()));
}

TEST_F(StopStringsTest, TheEarliestOfSeveralStopsWinsAndTiesGoToTheFirstListed) {
  start(kHello);
  const std::vector<std::string> stops = {"ld", "zzz", "llo"};
  auto seen = run(request(stops));
  expect_stopped(*seen, 0, kHello, stops, 2, 2);

  const std::vector<std::string> tie = {"ld!", "ld"};
  auto tied = run(request(tie));
  // "ld" is complete one token before "ld!", so it wins by ending first.
  expect_stopped(*tied, 0, kHello, tie, 1, 4);
  // Both begin at the same byte and complete in the same token: the first listed.
  const std::vector<std::string> same = {"wor", "wo"};
  auto s = run(request(same));
  expect_stopped(*s, 0, kHello, same, 0, 3);
  const std::vector<std::string> reversed = {"wo", "wor"};
  auto r = run(request(reversed));
  expect_stopped(*r, 0, kHello, reversed, 0, 3);
  // " Bye" begins one byte before "Bye", in the same token: the earlier start wins.
  const std::vector<std::string> earlier = {"Bye", " Bye"};
  auto e = run(request(earlier));
  expect_stopped(*e, 0, kHello, earlier, 1, 6);
}

TEST_F(StopStringsTest, EveryChoiceOfARequestStopsAndFreesItsSession) {
  start(kHello);
  const std::vector<std::string> stops = {"wor"};
  auto seen = run(request(stops, 20, 3));
  for (std::int32_t c = 0; c < 3; ++c) expect_stopped(*seen, c, kHello, stops, 0, 3);
  {
    std::lock_guard lock(seen->mu);
    ASSERT_TRUE(seen->outcome.has_value());
    EXPECT_EQ(seen->outcome->usage.completion_tokens, 9);
    for (FinishReason r : seen->outcome->finish_reasons) EXPECT_EQ(r, FinishReason::kStopString);
  }
  EXPECT_EQ(exec.live_sessions(), 0u);
  runner->shutdown();  // the metrics are final then
  EXPECT_EQ(runner->metrics().finished_stop_string, 3);
}

TEST_F(StopStringsTest, TheMatchEndsTheChoiceInTheStepThatProducedIt) {
  // Three tokens a decode: the match completes in the middle of the second
  // decode's output; the tokens after it are not delivered and the session
  // sees no further step.
  exec.set_tokens_per_decode(3);
  start(kHello);
  const std::vector<std::string> stops = {"ld"};
  auto seen = run(request(stops));
  expect_stopped(*seen, 0, kHello, stops, 0, 4);
  std::size_t outputs = 0;
  for (const auto& batch : exec.batches()) {
    for (const auto& in : batch) outputs += in.produce_output ? 1 : 0;
  }
  // The prefill's token, a decode of three (tokens 2-4, where the match
  // completes), and nothing after it.
  EXPECT_EQ(outputs, 2u);
  EXPECT_EQ(exec.live_sessions(), 0u);
}

// One byte per token, as in the server's min_tokens cases (vLLM's rule).
Pieces letters(std::string_view s) {
  Pieces p;
  for (char c : s) p.emplace_back(1, c);
  return p;
}

TEST_F(StopStringsTest, MinTokensHidesMatchesEndingInTheFirstTokensText) {
  const Pieces abc = letters("abcdbcxyz");
  start(abc);
  {
    // "bc" ends at token 3, within min 3: passed over; the next "bc" (tokens
    // 5-6) ends after it and stops.
    Request r = request({"bc"});
    r.config.min_new_tokens = 3;
    auto seen = run(std::move(r));
    std::lock_guard lock(seen->mu);
    ASSERT_EQ(seen->last[0].finish_reason, FinishReason::kStopString);
    EXPECT_EQ(seen->tokens[0].size(), pieces_until(abc, "bc", 3));
    EXPECT_EQ(seen->last[0].stop_string->offset, 4);  // the second "bc": "abcd|bc"
  }
  {
    // "cd" begins within the minimum and ends after it: it counts (token 4).
    Request r = request({"cd"});
    r.config.min_new_tokens = 3;
    auto seen = run(std::move(r));
    std::lock_guard lock(seen->mu);
    ASSERT_EQ(seen->last[0].finish_reason, FinishReason::kStopString);
    EXPECT_EQ(seen->tokens[0].size(), 4u);
    EXPECT_EQ(seen->last[0].stop_string->offset, 2);
  }
  {
    // A match wholly inside the minimum and none later: it runs to its limit.
    Request r = request({"ab"}, 6);
    r.config.min_new_tokens = 2;
    auto seen = run(std::move(r));
    std::lock_guard lock(seen->mu);
    EXPECT_EQ(seen->last[0].finish_reason, FinishReason::kNewTokenLimit);
    EXPECT_FALSE(seen->last[0].stop_string.has_value());
    EXPECT_EQ(seen->tokens[0].size(), 6u);
  }
}

TEST_F(StopStringsTest, BadStopStringsAreRefusedInOnePlace) {
  start(kHello);
  auto refused = [&](std::vector<std::string> stops) {
    Request r = request(std::move(stops));
    EXPECT_EQ(check_request(r).code(), StatusCode::kInvalidArgument);
    auto h = runner->submit(std::move(r), {});
    return !h.ok() && h.status().code() == StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(refused({""}));
  EXPECT_TRUE(refused({"ok", "\xff"}));
  EXPECT_TRUE(refused({std::string(kMaxStopStringBytes + 1, 'a')}));
  EXPECT_TRUE(refused(std::vector<std::string>(kMaxStopStrings + 1, "a")));
  EXPECT_TRUE(check_request(request({std::string(kMaxStopStringBytes, 'a')})).is_ok());
  EXPECT_TRUE(check_request(request(std::vector<std::string>(kMaxStopStrings, "a"))).is_ok());
  EXPECT_EQ(exec.opened().size(), 0u);  // nothing ran
}

TEST_F(StopStringsTest, WithoutAByteTableStopStringsAreRefused) {
  runner = std::make_unique<Runner>(exec, DecodeFirstScheduler::create(16, 4, 4));
  auto h = runner->submit(request({"x"}), {});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("token_bytes"), std::string::npos);

  // generate_async refuses it with kFailed, leaving the session usable.
  auto session = runner->open_session_async().get();
  ASSERT_TRUE(session.has_value());
  GenConfig config;
  config.max_new_tokens = 2;
  config.stop_strings = {"x"};
  GenerationHandle g = session->generate_async(std::vector<Token>{1, 2}, config, {});
  g.wait();
  EXPECT_EQ(g.finish_reason(), FinishReason::kFailed);
  EXPECT_NE(g.error_message().find("token_bytes"), std::string::npos);
  config.stop_strings.clear();
  GenerationHandle ok = session->generate_async(std::vector<Token>{1, 2}, config, {});
  ok.wait();
  EXPECT_EQ(ok.finish_reason(), FinishReason::kNewTokenLimit);
}

}  // namespace
}  // namespace cellm::testing
