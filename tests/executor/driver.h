// A miniature runner for executor tests: generations that feed prompt chunks
// and then one-token decodes carrying the last sampled token, as the Runner
// does, so expected continuations can be compared with toy_greedy().
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "cellm/executor.h"

namespace cellm::executor::testing {

struct Gen {
  SessionId sid = 0;
  std::shared_ptr<const std::vector<Token>> prompt;
  Position fed = 0;  // positions committed so far
  std::vector<std::int64_t> generated;
  std::vector<TokenLogprobs> logprobs;  // every output's entries, in order
};

inline Gen start(Executor& ex, std::vector<std::int64_t> prompt) {
  Gen g;
  g.sid = ex.open_session().value_or(-1);
  g.prompt = std::make_shared<const std::vector<Token>>(prompt.begin(), prompt.end());
  return g;
}

// The next `count` prompt tokens; asks for output when they end the prompt.
inline Input prefill(const Gen& g, std::size_t count) {
  Input in;
  in.sid = g.sid;
  in.offset = static_cast<std::size_t>(g.fed);
  in.size = count;
  in.payload = g.prompt;
  in.position = 0;
  in.produce_output = in.offset + count == g.prompt->size();
  return in;
}

inline Input decode(const Gen& g) {
  Input in;
  in.sid = g.sid;
  in.size = 1;
  in.payload =
      std::make_shared<const std::vector<Token>>(1, static_cast<Token>(g.generated.back()));
  in.position = g.fed;
  in.produce_output = true;
  return in;
}

// Runs one batch of (generation, input) and advances the generations. With
// `multi` an output may carry several tokens (speculative decoding): all but
// the last are committed, as the executor contract says.
inline bool run(Executor& ex, std::vector<std::pair<Gen*, Input>> work, bool multi = false) {
  BatchInput batch;
  for (auto& [g, in] : work) batch.inputs.push_back(in);
  BatchOutput out;
  if (!ex.execute(batch, out)) return false;
  EXPECT_EQ(out.outputs.size(), work.size());
  for (std::size_t i = 0; i < work.size(); ++i) {
    Gen& g = *work[i].first;
    g.fed += static_cast<Position>(work[i].second.size);
    EXPECT_EQ(out.outputs[i].has_value(), work[i].second.produce_output) << "input " << i;
    if (out.outputs[i]) {
      EXPECT_EQ(out.outputs[i]->sid, g.sid);
      const std::vector<Token>& tokens = out.outputs[i]->tokens;
      if (!multi) {
        EXPECT_EQ(tokens.size(), 1u);
      }
      EXPECT_FALSE(tokens.empty());
      for (Token t : tokens) g.generated.push_back(static_cast<std::int64_t>(t));
      if (!tokens.empty()) g.fed += static_cast<Position>(tokens.size()) - 1;
      for (const TokenLogprobs& lp : out.outputs[i]->logprobs) g.logprobs.push_back(lp);
    }
  }
  return true;
}

// Decodes every generation together until each has `tokens` outputs.
// With `multi` a generation may overshoot `tokens` by its last output.
inline bool decode_all(Executor& ex, std::vector<Gen*> gens, std::size_t tokens,
                       bool multi = false) {
  while (true) {
    std::vector<std::pair<Gen*, Input>> work;
    for (Gen* g : gens) {
      if (g->generated.size() < tokens) work.emplace_back(g, decode(*g));
    }
    if (work.empty()) return true;
    if (!run(ex, work, multi)) return false;
  }
}

inline std::vector<std::int64_t> prompt_of(const Gen& g) {
  return std::vector<std::int64_t>(g.prompt->begin(), g.prompt->end());
}

}  // namespace cellm::executor::testing
