// Golden checks of the executors against Hugging Face transformers: for every
// fixture folder under $CELLMDEV_GOLDEN_DIR (default <testdata>/hf_models; see
// tests/support/golden.h), the CPU program is driven through each executor
// path — ModuleExecutor::execute, CudaExecutor::execute and
// CudaExecutor::execute_raw (graphs do not exist on the CPU) — and the logits
// at every position of prompt + teacher-forced greedy tokens must be within
// the float32 tolerances of testdata/README.md. The prompt is fed whole, in
// chunks of 1, 3 and 7, packed with the fixture's other prompts while they
// decode, and through a clone taken mid-prompt. Steps are at most 64 tokens
// wide (static widths 1..32 plus forward_others), so long prompts also cross
// the executors' slicing and padding.
//
// The CPU program's attention runs on one OpenMP thread here: these tiny
// models' steps are too small to gain from a team, waking one per step costs
// ten times the forward on a busy 2-core CI machine, and the threaded path is
// checked by tests/backend/cpu/golden_test.cpp.
#include <algorithm>
#include <filesystem>
#include <omp.h>
#include <tuple>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_program.h"
#include "logit_steppers.h"
#include "model/loader.h"
#include "support/golden.h"

namespace cellm::executor::testing {
namespace {

namespace fs = std::filesystem;
using cellm::testing::golden_fixture_names;
using cellm::testing::golden_root;
using cellm::testing::GoldenCase;

constexpr std::int32_t kMaxStep = 64;

using Param = std::tuple<std::string, StepperKind>;

class ExecutorGolden : public ::testing::TestWithParam<Param> {
 protected:
  static void SetUpTestSuite() { omp_set_num_threads(1); }

  void SetUp() override {
    dir_ = golden_root() / std::get<0>(GetParam());
    auto cases = cellm::testing::load_golden_cases(dir_);
    ASSERT_TRUE(cases.ok()) << cases.status().to_string();
    cases_ = std::move(cases).value();
    auto loaded = model::load_model(dir_);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    model_ = std::make_unique<model::LoadedModel>(std::move(loaded).value());
    for (const GoldenCase& c : cases_) longest_ = std::max(longest_, c.inputs.size());
  }

  // A fresh program and executor with room for every case plus a clone.
  std::unique_ptr<LogitStepper> make() {
    const int sessions = static_cast<int>(cases_.size()) + 2;
    const int tokens = static_cast<int>(longest_);
    program::ProgramOptions o;
    o.static_widths = {1, 2, 4, 8, 16, 32};
    o.max_step = kMaxStep;
    o.kv_cells = sessions * tokens + 1;
    // transformers rotates a 16-bit checkpoint with 16-bit frequencies.
    o.rope_table_dtype = model_->weights.embed_tokens.dtype();
    auto program = cpu::CpuProgram::create(model_->spec, model_->weights, o);
    EXPECT_TRUE(program.ok()) << program.status().to_string();
    if (!program.ok()) return nullptr;
    auto stepper = make_stepper(std::get<1>(GetParam()),
                                std::shared_ptr<program::Program>(std::move(program).value()),
                                sessions, tokens);
    EXPECT_TRUE(stepper.ok()) << stepper.status().to_string();
    return stepper.ok() ? std::move(stepper).value() : nullptr;
  }

  // Checks `rows` as the logits of case `k` at positions first, first + 1, ...
  // Returns false (after one report) on the first bad row.
  bool check(const Rows& rows, std::size_t k, std::size_t first, const std::string& label) {
    for (std::size_t j = 0; j < rows.size(); ++j) {
      const std::string bad = cellm::testing::check_golden_row(rows[j], cases_[k], first + j,
                                                               cellm::testing::kFloat32Tolerance);
      if (!bad.empty()) {
        ADD_FAILURE() << label << ": prompt " << k << " position " << first + j << ": " << bad;
        return false;
      }
    }
    return true;
  }

  // Case which[i] joins at step start[i], prefills `chunk` tokens per step (0:
  // the rest of the prompt at once), then decodes one teacher-forced token
  // per step; all live cases share each step. Streams close when done.
  void run_schedule(LogitStepper& s, const std::vector<std::size_t>& which, std::size_t chunk,
                    const std::vector<int>& start, const std::string& label) {
    std::vector<StreamId> streams;
    std::vector<std::size_t> fed(which.size(), 0);
    for (std::size_t k = 0; k < which.size(); ++k) {
      auto id = s.open();
      ASSERT_TRUE(id.has_value()) << label;
      streams.push_back(*id);
    }
    for (int step = 0;; ++step) {
      std::vector<StreamToken> tokens;
      std::vector<std::pair<std::size_t, std::size_t>> owner;  // (k, position)
      bool pending = false;
      for (std::size_t k = 0; k < which.size(); ++k) {
        const GoldenCase& c = cases_[which[k]];
        if (fed[k] >= c.inputs.size()) continue;
        pending = true;
        if (step < start[k]) continue;
        const std::size_t t = c.prompt.size();
        std::size_t n = 1;
        if (fed[k] < t) n = chunk == 0 ? t - fed[k] : std::min(chunk, t - fed[k]);
        for (std::size_t j = 0; j < n; ++j, ++fed[k]) {
          tokens.push_back({streams[k], c.inputs[fed[k]]});
          owner.emplace_back(k, fed[k]);
        }
      }
      if (!pending) break;
      if (tokens.empty()) continue;
      auto rows = s.step(tokens);
      ASSERT_TRUE(rows.ok()) << label << " step " << step << ": " << rows.status().to_string();
      for (std::size_t r = 0; r < owner.size(); ++r) {
        const auto [k, pos] = owner[r];
        if (!check({(*rows)[r]}, which[k], pos, label)) return;
      }
    }
    for (StreamId id : streams) s.close(id);
  }

  // Each case alone, one after another on one executor; the pool must be
  // empty again afterwards (cells of closed streams are reused, not leaked).
  void run_each_alone(std::size_t chunk, const std::string& label) {
    auto s = make();
    ASSERT_NE(s, nullptr);
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      run_schedule(*s, {i}, chunk, {0}, label);
      if (HasFailure()) return;
    }
    EXPECT_EQ(s->kv_metrics().cells_used, 0) << label;
    EXPECT_EQ(s->kv_metrics().sessions, 0) << label;
  }

  fs::path dir_;
  std::vector<GoldenCase> cases_;
  std::unique_ptr<model::LoadedModel> model_;
  std::size_t longest_ = 0;
};

TEST_P(ExecutorGolden, WholePrompt) {
  run_each_alone(0, "whole");
}

TEST_P(ExecutorGolden, ChunksOf1And3And7) {
  for (std::size_t chunk : {1u, 3u, 7u}) {
    run_each_alone(chunk, "chunk " + std::to_string(chunk));
    if (HasFailure()) return;
  }
}

TEST_P(ExecutorGolden, PackedWithOtherPromptsWhileTheyDecode) {
  // Later prompts join while earlier ones are already decoding.
  std::vector<std::size_t> all(cases_.size());
  std::vector<int> start(cases_.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    all[i] = i;
    start[i] = static_cast<int>(3 * i);
  }
  for (std::size_t chunk : {0u, 5u}) {
    auto s = make();
    ASSERT_NE(s, nullptr);
    run_schedule(*s, all, chunk, start, "packed chunk " + std::to_string(chunk));
    if (HasFailure()) return;
    EXPECT_EQ(s->kv_metrics().cells_used, 0);
  }
}

TEST_P(ExecutorGolden, CloneMidPromptThenContinue) {
  auto s = make();
  ASSERT_NE(s, nullptr);
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    const GoldenCase& c = cases_[i];
    const std::size_t t = c.prompt.size();
    if (t < 2) continue;
    const std::size_t cut = t / 2;
    const std::size_t src_fed = std::min(t, cut + 3);  // the source runs past the cut
    const auto src = s->open();
    ASSERT_TRUE(src.has_value());
    auto feed = [&](StreamId id, std::size_t from, std::size_t to, std::size_t chunk,
                    const std::string& label) {
      for (std::size_t p = from; p < to; p += chunk) {
        std::vector<StreamToken> tokens;
        for (std::size_t q = p; q < std::min(to, p + chunk); ++q)
          tokens.push_back({id, c.inputs[q]});
        auto rows = s->step(tokens);
        if (!rows.ok()) {
          ADD_FAILURE() << label << ": " << rows.status().to_string();
          return false;
        }
        if (!check(*rows, i, p, label)) return false;
      }
      return true;
    };
    ASSERT_TRUE(feed(*src, 0, src_fed, 4, "clone source"));
    const auto clone = s->clone(*src, static_cast<std::int32_t>(cut));
    ASSERT_TRUE(clone.has_value());
    // Closing the source frees its cells past the cut for the clone to reuse.
    s->close(*src);
    ASSERT_TRUE(feed(*clone, cut, t, 3, "clone prefill"));
    ASSERT_TRUE(feed(*clone, t, c.inputs.size(), 1, "clone decode"));
    s->close(*clone);
  }
  EXPECT_EQ(s->kv_metrics().cells_used, 0);
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (const std::string& name : golden_fixture_names()) {
    for (StepperKind k : {StepperKind::kModule, StepperKind::kCuda, StepperKind::kRaw}) {
      out.emplace_back(name, k);
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExecutorGolden, ::testing::ValuesIn(params()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" +
                                  stepper_kind_name(std::get<1>(info.param));
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ExecutorGolden);

TEST(ExecutorGoldenFixtures, AtLeastOneFixtureFolder) {
  EXPECT_FALSE(golden_fixture_names().empty())
      << "no fixture folder with expected.safetensors under " << golden_root();
}

}  // namespace
}  // namespace cellm::executor::testing
