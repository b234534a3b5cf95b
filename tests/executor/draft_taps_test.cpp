// The taps hook of DraftProposer (wants_taps / observe_taps), for heads that
// draft from the target's hidden states (EAGLE-style), with a test adapter:
// a "head" that reads each tap through the model's own LM head weights on
// the host. The tap of the row that produced a session's last kept token,
// projected, must give back that very token (the target's greedy choice),
// and every tap handed over must equal the tap a plain forward over the same
// tokens computes at that position, after plain steps and after drafted
// rounds alike (all drafts kept, or none).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "draft_rig.h"
#include "model/loader.h"

namespace cellm::executor::testing {
namespace {

constexpr std::size_t kTokens = 16;

class TapHead final : public DraftProposer {
 public:
  // With `refs` (prompt + greedy continuation per prompt) it proposes the
  // continuation, so whole rounds are kept; without, the projection's token.
  TapHead(Tensor lm_head, std::vector<std::vector<std::int64_t>> refs)
      : lm_head_(std::move(lm_head)), refs_(std::move(refs)) {}
  bool wants_taps() const override { return true; }
  void observe_taps(SessionId session, std::int64_t position, std::span<const float> tap) override {
    seen[session][position].assign(tap.begin(), tap.end());
    last_[session] = position;
  }
  void propose(SessionId session, std::span<const Token> history, std::size_t k,
               std::vector<Token>& out) override {
    const auto it = last_.find(session);
    if (it == last_.end() || it->second + 2 != static_cast<std::int64_t>(history.size())) {
      ++stale;  // no tap of the row before the token fed now
      return;
    }
    const auto [token, margin] = project(seen[session][it->second]);
    if (margin > 1e-3f) (token == history.back() ? agreed : disagreed) += 1;
    if (refs_.empty()) {
      out.push_back(token);
      return;
    }
    for (const auto& ref : refs_) {
      if (ref.size() <= history.size() ||
          !std::equal(history.begin(), history.end(), ref.begin(),
                      [](Token a, std::int64_t b) { return static_cast<std::int64_t>(a) == b; })) {
        continue;
      }
      for (std::size_t j = 0; j < k && history.size() + j < ref.size(); ++j) {
        out.push_back(static_cast<Token>(ref[history.size() + j]));
      }
      return;
    }
  }
  std::map<SessionId, std::map<std::int64_t, std::vector<float>>> seen;
  int stale = 0;
  int agreed = 0;
  int disagreed = 0;

 private:
  // The LM head's argmax over the tap, and its margin over the runner-up.
  std::pair<Token, float> project(const std::vector<float>& tap) const {
    const std::int64_t vocab = lm_head_.dim(0);
    const std::int64_t hidden = lm_head_.dim(1);
    float best = -INFINITY;
    float second = -INFINITY;
    Token arg = 0;
    for (std::int64_t v = 0; v < vocab; ++v) {
      double dot = 0.0;
      for (std::int64_t d = 0; d < hidden && d < static_cast<std::int64_t>(tap.size()); ++d) {
        dot += static_cast<double>(element_as_f32(lm_head_, v * hidden + d)) * tap[d];
      }
      const auto logit = static_cast<float>(dot);
      if (logit > best) {
        second = best;
        best = logit;
        arg = static_cast<Token>(v);
      } else if (logit > second) {
        second = logit;
      }
    }
    return {arg, best - second};
  }
  Tensor lm_head_;
  std::vector<std::vector<std::int64_t>> refs_;
  std::map<SessionId, std::int64_t> last_;
};

// Every position's tap from one plain raw forward over `tokens`.
std::vector<std::vector<float>> plain_taps(CudaExecutor& ex, const std::vector<std::int64_t>& tokens) {
  std::vector<std::vector<float>> taps(tokens.size());
  const std::optional<cache::SeqId> seq = ex.cache_control().seq_new();
  EXPECT_TRUE(seq.has_value());
  if (!seq) return taps;
  RawTargetStep step;
  step.tokens = tokens;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    step.positions.push_back(static_cast<std::int64_t>(i));
    step.seq_ids.push_back(*seq);
  }
  step.logit_indices = {static_cast<std::int64_t>(tokens.size()) - 1};
  const bool ok = ex.execute_raw(step, [&](const RawTargetOutput& out) {
    if (out.taps == nullptr) return false;
    const std::int64_t hidden = out.taps->dim(1);
    for (std::int64_t r = 0; r < out.length; ++r) {
      auto& row = taps[static_cast<std::size_t>(out.offset + r)];
      for (std::int64_t d = 0; d < hidden; ++d) row.push_back(element_as_f32(*out.taps, r * hidden + d));
    }
    return true;
  });
  EXPECT_TRUE(ok) << "the plain forward with taps failed";
  ex.cache_control().seq_rm(*seq);
  return taps;
}

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double diff = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

TEST(DraftTaps, AHeadGetsTheTapOfEachSessionsLastKeptRow) {
  auto loaded = model::load_model(fixture("llama"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const Tensor lm_head = loaded->weights.lm_head;
  ASSERT_EQ(lm_head.rank(), 2);

  auto reference = make_target("llama", nullptr, /*taps=*/true);
  ASSERT_TRUE(reference);
  const DraftRun plain = run_generation(*reference->executor, kDraftPrompts, kTokens);
  std::vector<std::vector<std::int64_t>> refs;
  for (std::size_t i = 0; i < kDraftPrompts.size(); ++i) {
    refs.push_back(kDraftPrompts[i]);
    refs.back().insert(refs.back().end(), plain.generated[i].begin(), plain.generated[i].end());
  }
  std::vector<std::vector<std::vector<float>>> want;
  for (const auto& ref : refs) want.push_back(plain_taps(*reference->executor, ref));

  for (const bool oracle : {true, false}) {
    auto head = std::make_shared<TapHead>(lm_head, oracle ? refs : decltype(refs){});
    auto target = make_target("llama", head, /*taps=*/true);
    ASSERT_TRUE(target);
    const DraftRun spec = run_generation(*target->executor, kDraftPrompts, kTokens);
    const char* what = oracle ? "oracle drafts" : "projected drafts";
    EXPECT_EQ(spec.generated, plain.generated) << what;
    ASSERT_TRUE(spec.counters.has_value());
    EXPECT_GT(spec.counters->proposed, 0u) << what;
    if (oracle) {
      EXPECT_EQ(spec.counters->accepted, spec.counters->proposed) << what;
    }
    EXPECT_EQ(head->stale, 0) << what << ": a step came without the tap before its token";
    EXPECT_GT(head->agreed, 0) << what;
    EXPECT_EQ(head->disagreed, 0) << what << ": a tap projected to another token than was kept";
    // Sessions were opened in prompt order, and ids only grow.
    ASSERT_EQ(head->seen.size(), kDraftPrompts.size()) << what;
    std::size_t prompt = 0;
    std::size_t compared = 0;
    for (const auto& [session, taps] : head->seen) {
      for (const auto& [position, tap] : taps) {
        ASSERT_LT(static_cast<std::size_t>(position), want[prompt].size());
        EXPECT_LE(relative_error(tap, want[prompt][static_cast<std::size_t>(position)]), 1e-4)
            << what << ": prompt " << prompt << " position " << position;
        ++compared;
      }
      ++prompt;
    }
    EXPECT_GT(compared, kDraftPrompts.size()) << what;
  }
}

}  // namespace
}  // namespace cellm::executor::testing
