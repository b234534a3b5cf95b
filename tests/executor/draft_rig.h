// Shared rig of the draft-model speculation tests (draft_model_test.cpp,
// draft_taps_test.cpp, and the GPU build of the former): a target
// CudaExecutor over a fixture of ../shared/testdata/hf_models built through
// app::create_executor (the CLI's path), a DraftModelProposer built through
// app::load_draft_proposer, and a small driver that prefills prompts and
// decodes them together, checking the caches after every step.
//
// Thread-safety: test code, one thread (which is the engine thread here).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "app/draft_factory.h"
#include "app/executor_factory.h"
#include "driver.h"
#include "executor/cuda_executor.h"
#include "executor/draft_model_proposer.h"
#include "support/testdata.h"

namespace cellm::executor::testing {

#ifndef CELLM_DRAFT_TEST_BACKEND
#define CELLM_DRAFT_TEST_BACKEND "cpu"
#endif
inline const std::string kBackend = CELLM_DRAFT_TEST_BACKEND;

inline constexpr int kRigSessions = 4;
inline constexpr int kRigTokens = 128;

inline std::filesystem::path fixture(const std::string& name) {
  return cellm::testing::testdata_dir() / "hf_models" / name;
}

// Prompts of the fixtures' 384-token vocabulary.
inline const std::vector<std::vector<std::int64_t>> kDraftPrompts = {
    {1, 17, 42, 99, 7}, {3, 250, 8}, {60, 61, 62, 63, 64, 65, 66}};

// The target: everything create_executor made, the executor destroyed first.
inline std::unique_ptr<app::LoadedExecutor> make_target(
    const std::string& name, std::shared_ptr<DraftProposer> proposer, bool taps = false) {
  app::CudaExecutorConfig config;
  config.model_path = fixture(name).string();
  config.backend = kBackend;
  config.max_sessions = kRigSessions;
  config.max_session_tokens = kRigTokens;
  config.program.kv_cells = kRigSessions * kRigTokens + 1;
  config.program.max_step = 64;  // narrower than the pool
  config.program.taps = taps;
  config.speculation.proposer = std::move(proposer);
  config.speculation.max_drafts = 4;
  auto made = app::create_executor(config);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  auto loaded = std::make_unique<app::LoadedExecutor>(std::move(made).value());
  EXPECT_TRUE(loaded->executor->initialize());
  return loaded;
}

inline app::DraftModelOptions draft_options(const std::string& name) {
  app::DraftModelOptions o;
  o.model = fixture(name);
  o.backend = kBackend;
  o.sessions = kRigSessions;
  o.session_tokens = kRigTokens;
  return o;
}

inline std::shared_ptr<DraftModelProposer> make_draft(const std::string& name,
                                                      std::int64_t target_vocab = 384) {
  auto made = app::load_draft_proposer(draft_options(name), target_vocab);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  return made.ok() ? std::move(made).value() : nullptr;
}

// Forwards to a proposer and remembers, per session, the history it was
// last asked about; `before` may run first (to disturb a draft's state).
class Recording final : public DraftProposer {
 public:
  explicit Recording(std::shared_ptr<DraftProposer> inner) : inner_(std::move(inner)) {}
  void initialize() override { inner_->initialize(); }
  void propose(SessionId session, std::span<const Token> history, std::size_t max_tokens,
               std::vector<Token>& out) override {
    if (before) before(*inner_, session, history, max_tokens);
    inner_->propose(session, history, max_tokens, out);
    last[session].assign(history.begin(), history.end());
    proposed += out.size();
  }
  void forget(SessionId session) override { inner_->forget(session); }
  std::function<void(DraftProposer&, SessionId, std::span<const Token>, std::size_t)> before;
  std::map<SessionId, std::vector<Token>> last;
  std::size_t proposed = 0;

 private:
  std::shared_ptr<DraftProposer> inner_;
};

struct DraftRun {
  std::vector<std::vector<std::int64_t>> generated;  // `tokens` per prompt
  std::size_t steps = 0;                             // decode steps
  std::optional<SpeculationCounters> counters;
};

// Prefills `prompts` together, then decodes them together until each has
// `tokens` outputs. After every step: the target's cells are exactly the
// committed tokens; with `draft`, its cells are exactly what its sessions
// hold, each holds the history it was last asked about (from `recording`)
// and runs at most k tokens past it.
inline DraftRun run_generation(CudaExecutor& ex, const std::vector<std::vector<std::int64_t>>& prompts,
                               std::size_t tokens, DraftModelProposer* draft = nullptr,
                               const Recording* recording = nullptr) {
  DraftRun result;
  std::vector<Gen> gens;
  for (const auto& p : prompts) gens.push_back(start(ex, p));
  std::vector<std::pair<Gen*, Input>> work;
  for (Gen& g : gens) work.emplace_back(&g, prefill(g, g.prompt->size()));
  EXPECT_TRUE(run(ex, work, true));
  while (result.steps <= 4 * tokens) {
    work.clear();
    for (Gen& g : gens) {
      if (g.generated.size() < tokens) work.emplace_back(&g, decode(g));
    }
    if (work.empty()) break;
    if (!run(ex, work, true)) {
      ADD_FAILURE() << "decode step " << result.steps << " failed";
      break;
    }
    ++result.steps;
    std::int64_t used = 0;
    for (const Gen& g : gens) used += g.fed;
    EXPECT_EQ(ex.published_kv_cells().used, used) << "target after step " << result.steps;
    if (draft == nullptr) continue;
    auto& draft_ex = dynamic_cast<CudaExecutor&>(draft->draft());
    std::int64_t held = 0;
    for (const Gen& g : gens) {
      const std::span<const Token> h = draft->held(g.sid);
      held += static_cast<std::int64_t>(h.size());
      if (recording == nullptr || !recording->last.contains(g.sid) || h.empty()) continue;
      const std::vector<Token>& asked = recording->last.at(g.sid);
      EXPECT_GE(h.size(), asked.size()) << "session " << g.sid;
      if (h.size() < asked.size()) continue;
      EXPECT_LE(h.size(), asked.size() + 3) << "session " << g.sid << ": more than k - 1 drafts fed";
      EXPECT_TRUE(std::equal(asked.begin(), asked.end(), h.begin()))
          << "session " << g.sid << ": the draft does not hold the history it drafted from";
    }
    EXPECT_EQ(draft_ex.published_kv_cells().used, held) << "draft after step " << result.steps;
    EXPECT_EQ(draft_ex.cache_control().metrics().sequences,
              static_cast<std::int32_t>(draft->open_sessions()));
  }
  for (Gen& g : gens) {
    g.generated.resize(tokens);
    result.generated.push_back(g.generated);
  }
  for (const Gen& g : gens) ex.close_session(g.sid);
  result.counters = ex.speculation_counters();
  return result;
}

}  // namespace cellm::executor::testing
