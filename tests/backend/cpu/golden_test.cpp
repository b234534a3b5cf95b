// Golden checks of the CPU program against Hugging Face transformers: for
// every fixture folder (config.json, model.safetensors, expected.safetensors
// with prompt_i / greedy_i / logits_i) under $CELLMDEV_GOLDEN_DIR (default
// <testdata>/hf_models), the prompt is fed whole, in chunks of 1, 3 and 7,
// packed with the fixture's other prompts while they decode, and through a
// clone taken mid-prompt; then the greedy tokens are teacher-forced. Every
// position's logits must be within 1e-4 relative error of the reference, with
// the same argmax wherever the reference's top-2 margin exceeds 1e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "backend/cpu/cpu_program.h"
#include "support/golden.h"
#include "model/loader.h"
#include "step_driver.h"
#include "support/testdata.h"
#include "tiny_model.h"

namespace cellm::cpu {
namespace {

namespace fs = std::filesystem;
using testing::DriverToken;
using testing::StepDriver;

using cellm::testing::GoldenCase;
using cellm::testing::golden_fixture_names;
using cellm::testing::golden_root;

std::string check_row(const std::vector<float>& got, const GoldenCase& c, std::size_t pos) {
  return cellm::testing::check_golden_row(got, c, pos, cellm::testing::kFloat32Tolerance);
}

class CpuGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = golden_root() / GetParam();
    auto cases = cellm::testing::load_golden_cases(dir_);
    ASSERT_TRUE(cases.ok()) << cases.status().to_string();
    cases_ = std::move(cases).value();
  }

  std::unique_ptr<StepDriver> make_driver(const std::string& config = "config.json") {
    model::LoadOptions lo;
    lo.config_path = dir_ / config;
    auto loaded = model::load_model(dir_, lo);
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    if (!loaded.ok()) return nullptr;
    // The cache and the widest step come from the fixture: every case may be
    // resident at once (one sequence each) and a whole prompt is one step.
    std::size_t longest = 0, total = 0;
    for (const GoldenCase& c : cases_) {
      longest = std::max(longest, c.inputs.size());
      total += c.inputs.size();
    }
    const auto max_step = static_cast<std::int32_t>(std::max<std::size_t>(longest, 64));
    const auto cells = static_cast<std::int32_t>(total + 1);  // + the scratch cell
    program::ProgramOptions o;
    o.static_widths = {1, 2, 4, 8, 16, 32};
    o.max_step = max_step;
    o.kv_cells = cells;
    // transformers rotates a 16-bit checkpoint with 16-bit frequencies.
    o.rope_table_dtype = loaded->weights.embed_tokens.dtype();
    auto program = CpuProgram::create(loaded->spec, loaded->weights, o);
    EXPECT_TRUE(program.ok()) << program.status().to_string();
    if (!program.ok()) return nullptr;
    auto driver = StepDriver::create(
        std::move(program).value(),
        {cells, static_cast<std::int32_t>(std::max<std::size_t>(cases_.size(), 8)), max_step});
    EXPECT_TRUE(driver.ok()) << driver.status().to_string();
    return driver.ok() ? std::move(driver).value() : nullptr;
  }

  // Runs every case as its own sequence: case i joins at step start[i], then
  // prefills `chunk` tokens per step (0 = whole prompt) and decodes one token
  // per step — all sequences packed into the same steps.
  void run_schedule(StepDriver& d, const std::vector<std::size_t>& which, std::size_t chunk,
                    const std::vector<int>& start, const std::string& label) {
    std::vector<cache::SeqId> seqs;
    std::vector<std::size_t> fed(which.size(), 0);
    for (std::size_t k = 0; k < which.size(); ++k) {
      auto s = d.cache().seq_new();
      ASSERT_TRUE(s.has_value());
      seqs.push_back(*s);
    }
    for (int step = 0;; ++step) {
      std::vector<DriverToken> tokens;
      std::vector<std::pair<std::size_t, std::size_t>> owner;  // (case k, position)
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
          tokens.push_back({seqs[k], c.inputs[fed[k]], true});
          owner.push_back({k, fed[k]});
        }
      }
      if (!pending) break;
      if (tokens.empty()) continue;
      auto got = d.step(tokens);
      ASSERT_TRUE(got.ok()) << label << ": " << got.status().to_string();
      for (std::size_t r = 0; r < owner.size(); ++r) {
        const auto [k, pos] = owner[r];
        const std::string bad = check_row((*got)[r], cases_[which[k]], pos);
        EXPECT_EQ(bad, "") << label << ": prompt " << which[k] << " position " << pos;
        if (!bad.empty()) return;  // one report per schedule is enough
      }
    }
  }

  void run_each_alone(std::size_t chunk, const std::string& label,
                      const std::string& config = "config.json") {
    for (std::size_t i = 0; i < cases_.size(); ++i) {
      auto d = make_driver(config);
      ASSERT_NE(d, nullptr);
      run_schedule(*d, {i}, chunk, {0}, label + " prompt " + std::to_string(i));
    }
  }

  fs::path dir_;
  std::vector<GoldenCase> cases_;
};

TEST_P(CpuGolden, WholePrompt) {
  run_each_alone(0, "whole");
}

TEST_P(CpuGolden, WholePromptLegacyConfig) {
  if (!fs::exists(dir_ / "config_legacy.json")) GTEST_SKIP() << "no config_legacy.json";
  run_each_alone(0, "whole (legacy config)", "config_legacy.json");
}

TEST_P(CpuGolden, ChunksOf1) {
  run_each_alone(1, "chunk 1");
}
TEST_P(CpuGolden, ChunksOf3) {
  run_each_alone(3, "chunk 3");
}
TEST_P(CpuGolden, ChunksOf7) {
  run_each_alone(7, "chunk 7");
}

TEST_P(CpuGolden, PackedWithOtherPrompts) {
  // Later prompts join while earlier ones are already decoding.
  std::vector<std::size_t> all(cases_.size());
  std::vector<int> start(cases_.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    all[i] = i;
    start[i] = static_cast<int>(3 * i);
  }
  for (std::size_t chunk : {0u, 5u}) {
    auto d = make_driver();
    ASSERT_NE(d, nullptr);
    run_schedule(*d, all, chunk, start, "packed chunk " + std::to_string(chunk));
  }
}

TEST_P(CpuGolden, CloneMidPromptThenContinue) {
  for (std::size_t i = 0; i < cases_.size(); ++i) {
    const GoldenCase& c = cases_[i];
    const std::size_t t = c.prompt.size();
    if (t < 2) continue;
    auto d = make_driver();
    ASSERT_NE(d, nullptr);
    const std::size_t cut = t / 2;
    const std::size_t src_fed = std::min(t, cut + 3);  // the source runs past the cut
    const auto src = d->cache().seq_new();
    auto pre = d->feed(*src, std::span(c.inputs).first(src_fed), 4);
    ASSERT_TRUE(pre.ok()) << pre.status().to_string();
    const auto clone = d->cache().seq_clone(*src, static_cast<std::int32_t>(cut));
    ASSERT_TRUE(clone.has_value());
    // Drop the source so its cells past the cut are reused by the clone.
    ASSERT_TRUE(d->cache().seq_rm(*src));
    auto rest = d->feed(*clone, std::span(c.inputs).subspan(cut, t - cut), 3);
    ASSERT_TRUE(rest.ok()) << rest.status().to_string();
    auto decode = d->feed(*clone, std::span(c.inputs).subspan(t), 1);
    ASSERT_TRUE(decode.ok()) << decode.status().to_string();
    rest->insert(rest->end(), decode->begin(), decode->end());
    for (std::size_t j = 0; j < rest->size(); ++j) {
      const std::string bad = check_row((*rest)[j], c, cut + j);
      EXPECT_EQ(bad, "") << "clone: prompt " << i << " position " << cut + j;
      if (!bad.empty()) break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuGolden, ::testing::ValuesIn(golden_fixture_names()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(CpuGolden);

TEST(CpuGoldenFixtures, AtLeastOneFixtureFolder) {
  EXPECT_FALSE(golden_fixture_names().empty())
      << "no fixture folder with expected.safetensors under " << golden_root();
}

}  // namespace
}  // namespace cellm::cpu
