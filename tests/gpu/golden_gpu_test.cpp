// Every golden fixture (Hugging Face float64 reference logits) through the
// CUDA program and the CudaExecutor, in bf16, with CUDA graphs on and off:
// the prompt fed whole, in chunks of 1, 3 and 7, packed with the fixture's
// other prompts, and through a clone taken mid-prompt; then the reference's
// greedy tokens one by one. Every position must match within the bf16
// tolerance of testdata/README.md.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "backend/cuda/cuda_program.h"
#include "executor/cuda_executor.h"
#include "model/loader.h"
#include "raw_driver.h"
#include "support/golden.h"

namespace cellm::gpu_testing {
namespace {

using cellm::testing::GoldenCase;

struct Rig {
  model::LoadedModel model;
  std::unique_ptr<executor::CudaExecutor> executor;
};

std::unique_ptr<Rig> make_rig(const std::string& fixture, bool graphs) {
  auto rig = std::make_unique<Rig>();
  auto loaded = model::load_model(cellm::testing::golden_root() / fixture);
  EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
  if (!loaded.ok()) return nullptr;
  rig->model = std::move(loaded).value();
  program::ProgramOptions options;
  options.static_widths = {1, 2, 4, 8, 16, 32};
  options.max_step = 512;
  options.kv_cells = 16384;
  options.cuda_graphs = graphs;
  auto program = cuda::load_program(rig->model.spec, rig->model.weights, options);
  EXPECT_TRUE(program.ok()) << program.status().to_string();
  if (!program.ok()) return nullptr;
  std::shared_ptr<program::Program> shared = std::move(program).value();
  auto ex = executor::CudaExecutor::create(shared, 8, 0);
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  if (!ex.ok()) return nullptr;
  rig->executor = std::move(ex).value();
  EXPECT_TRUE(rig->executor->initialize());
  return rig;
}

// Checks every position a sequence recorded from `from` on: each within the
// per-position bound, and the run's mean within the mean bound.
void expect_matches(const FedSeq& s, const GoldenCase& c, std::size_t from,
                    const std::string& what) {
  const cellm::testing::GoldenTolerance& tol = cellm::testing::kBf16Tolerance;
  int failures = 0;
  double sum = 0.0;
  double worst = 0.0;
  std::size_t n = 0;
  for (std::size_t pos = from; pos < c.inputs.size(); ++pos) {
    auto it = s.logits.find(pos);
    if (it == s.logits.end()) {
      ADD_FAILURE() << what << ": no logits for position " << pos;
      return;
    }
    const std::string err = cellm::testing::check_golden_row(it->second, c, pos, tol);
    if (!err.empty() && ++failures <= 3)
      ADD_FAILURE() << what << " position " << pos << ": " << err;
    const double e = cellm::testing::golden_row_error(it->second, c, pos);
    sum += e;
    worst = std::max(worst, e);
    ++n;
  }
  const double mean = n == 0 ? 0.0 : sum / static_cast<double>(n);
  EXPECT_LE(mean, tol.mean_relative_error)
      << what << ": mean relative error over " << n << " positions";
  std::printf("golden %-28s positions %4zu  mean rel err %.4f  worst %.4f\n", what.c_str(), n, mean,
              worst);
}

FedSeq new_seq(executor::CudaExecutor& ex, const GoldenCase& c) {
  FedSeq s;
  s.seq = ex.cache_control().seq_new().value_or(-1);
  s.inputs = &c.inputs;
  return s;
}

// Prompt in chunks of `chunk` (0 = whole), then one token at a time.
void run_single(executor::CudaExecutor& ex, const GoldenCase& c, std::size_t chunk,
                const std::string& what) {
  FedSeq s = new_seq(ex, c);
  ASSERT_GE(s.seq, 0);
  while (s.fed < c.prompt.size()) {
    const std::size_t n = chunk == 0 ? c.prompt.size() : std::min(chunk, c.prompt.size() - s.fed);
    ASSERT_TRUE(feed(ex, {{&s, n}})) << what;
  }
  while (s.fed < c.inputs.size()) ASSERT_TRUE(feed(ex, {{&s, 1}})) << what;
  expect_matches(s, c, 0, what);
  ex.cache_control().seq_rm(s.seq);
}

class GpuGoldenTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    rig_ = make_rig(std::get<0>(GetParam()), std::get<1>(GetParam()));
    ASSERT_NE(rig_, nullptr);
    auto cases =
        cellm::testing::load_golden_cases(cellm::testing::golden_root() / std::get<0>(GetParam()));
    ASSERT_TRUE(cases.ok()) << cases.status().to_string();
    cases_ = std::move(cases).value();
  }
  std::unique_ptr<Rig> rig_;
  std::vector<GoldenCase> cases_;
};

TEST_P(GpuGoldenTest, WholeAndChunkedPrompts) {
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{7}}) {
      run_single(*rig_->executor, cases_[i], chunk,
                 "prompt " + std::to_string(i) + " chunk " + std::to_string(chunk));
    }
  }
}

// Chunks of 7 keep every step within the static widths (graphs, split-KV
// attention for every row); chunks of 20 make wider steps that run eagerly
// and split their rows: chunks of 16+ rows to the prefill kernel, decodes
// and short tails to the split-KV kernel.
TEST_P(GpuGoldenTest, PromptsPackedTogetherWhileOthersDecode) {
  executor::CudaExecutor& ex = *rig_->executor;
  for (const std::size_t chunk : {std::size_t{7}, std::size_t{20}}) {
    std::vector<FedSeq> seqs;
    for (const GoldenCase& c : cases_) seqs.push_back(new_seq(ex, c));
    // Staggered starts: later prompts begin while earlier ones already decode.
    for (int step = 0;; ++step) {
      std::vector<std::pair<FedSeq*, std::size_t>> parts;
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        FedSeq& s = seqs[i];
        if (step < static_cast<int>(i) || s.fed >= s.inputs->size()) continue;
        const std::size_t prompt = cases_[i].prompt.size();
        parts.emplace_back(&s, s.fed < prompt ? std::min(chunk, prompt - s.fed) : 1);
      }
      if (parts.empty()) break;
      ASSERT_TRUE(feed(ex, parts)) << "chunk " << chunk << " step " << step;
    }
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      expect_matches(seqs[i], cases_[i], 0,
                     "packed prompt " + std::to_string(i) + " chunk " + std::to_string(chunk));
    }
    for (FedSeq& s : seqs) ex.cache_control().seq_rm(s.seq);
  }
}

TEST_P(GpuGoldenTest, CloneTakenMidPromptContinues) {
  executor::CudaExecutor& ex = *rig_->executor;
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    const GoldenCase& c = cases_[i];
    FedSeq a = new_seq(ex, c);
    const std::size_t half = std::max<std::size_t>(1, c.prompt.size() / 2);
    ASSERT_TRUE(feed(ex, {{&a, half}}));
    FedSeq b;
    b.seq = ex.cache_control().seq_clone(a.seq, static_cast<std::int32_t>(half)).value_or(-1);
    ASSERT_GE(b.seq, 0);
    b.inputs = &c.inputs;
    b.fed = half;
    // The source keeps going too (its new cells must not leak into the clone).
    ASSERT_TRUE(feed(ex, {{&a, 1}}));
    while (b.fed < c.inputs.size()) {
      const std::size_t n =
          b.fed < c.prompt.size() ? std::min<std::size_t>(3, c.prompt.size() - b.fed) : 1;
      ASSERT_TRUE(feed(ex, {{&b, n}}));
    }
    for (std::size_t p = 0; p < half; ++p) b.logits[p] = a.logits[p];
    expect_matches(b, c, 0, "clone of prompt " + std::to_string(i));
    ex.cache_control().seq_rm(a.seq);
    ex.cache_control().seq_rm(b.seq);
  }
}

std::string name_of(const ::testing::TestParamInfo<std::tuple<std::string, bool>>& info) {
  return std::get<0>(info.param) + (std::get<1>(info.param) ? "_graphs" : "_eager");
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, GpuGoldenTest,
    ::testing::Combine(::testing::ValuesIn(cellm::testing::golden_fixture_names()),
                       ::testing::Bool()),
    name_of);

}  // namespace
}  // namespace cellm::gpu_testing
