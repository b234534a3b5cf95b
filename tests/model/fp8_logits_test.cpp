// FP8 checkpoints on the CPU reference program: every fixture of
// testdata/hf_models, written as FP8 in each layout (fp8_checkpoint.h), runs
// the golden prompts teacher-forced with their greedy continuations.
//
// Two comparisons per case:
//  1. Against the same model written as plain F32 weights holding the
//     writer's own dequantized values: the logits must be bit-identical, so
//     the FP8 load path feeds the program exactly the weights an independent
//     dequantization gives.
//  2. Against the unquantized folder (f32 or bf16 weights, as stored): the
//     quantization noise. E4M3 keeps 3 mantissa bits, so each weight moves by
//     up to 2^-4 (6.25%) of itself; over a tensor of N(0, 0.02) weights with
//     an amax/448 scale that is ~2.6% RMS (vs ~0.9% for int8 per tensor).
//     These random tiny models amplify weight noise about five-fold into the
//     logits (the GGUF Q8_0 files of gguf_arch_test reach 3% on average), and
//     measured FP8 runs reach 8-14% on average and 34% at the worst position
//     (gemma3 1.5% and 2.5%). The bounds, 20% on average and 50% per
//     position, leave headroom for that. A flipped argmax needs the two top
//     logits to move by their margin, so the argmax must agree wherever the
//     margin exceeds 6× the position's RMS logit error (flips were seen at
//     margins up to 3.0 with logits up to 45).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>

#include "model/cpu_logits.h"
#include "model/fp8_checkpoint.h"
#include "model/loader.h"
#include "support/golden.h"
#include "support/testdata.h"

namespace cellm::model {
namespace {

namespace fs = std::filesystem;
using cellm::testing::Fp8Layout;

constexpr double kMaxPositionError = 0.5;
constexpr double kMaxMeanError = 0.2;
constexpr double kArgmaxSigmas = 6.0;

struct LogitsCase {
  std::string fixture;
  Fp8Layout layout;
};
std::string case_name(const ::testing::TestParamInfo<LogitsCase>& info) {
  return fmt::format("{}_{}", info.param.fixture, fp8_layout_name(info.param.layout));
}

Result<std::vector<std::vector<float>>> run(const LoadedModel& m,
                                            const std::vector<std::int64_t>& tokens) {
  return testing::cpu_logits(m, tokens);
}

void PrintTo(const LogitsCase& c, std::ostream* os) {
  *os << c.fixture << " " << fp8_layout_name(c.layout);
}

class Fp8Logits : public ::testing::TestWithParam<LogitsCase> {};

TEST_P(Fp8Logits, StayCloseToTheUnquantizedModel) {
  const LogitsCase& c = GetParam();
  const fs::path dir = cellm::testing::testdata_dir() / "hf_models" / c.fixture;
  const fs::path out = fs::path(::testing::TempDir()) / ("cellm_fp8_logits_" + case_name({c, 0}));
  cellm::testing::Fp8WriteOptions o;
  o.layout = c.layout;
  const auto written = cellm::testing::write_fp8_checkpoint(dir, out, o);
  ASSERT_FALSE(written.expected.empty());
  auto base = load_model(dir);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  auto fp8 = load_model(out);
  ASSERT_TRUE(fp8.ok()) << fp8.status().to_string();
  o.plain_dequantized = true;
  cellm::testing::write_fp8_checkpoint(dir, out.string() + "_plain", o);
  auto plain = load_model(out.string() + "_plain");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_FALSE(plain->spec.quant.quantized());
  fs::remove_all(out);
  fs::remove_all(out.string() + "_plain");

  auto cases = cellm::testing::load_golden_cases(dir);
  ASSERT_TRUE(cases.ok()) << cases.status().to_string();
  double worst = 0, sum = 0;
  std::size_t positions = 0, argmax_checked = 0, argmax_flips = 0;
  for (const auto& g : *cases) {
    auto want = run(*base, g.inputs);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    auto got = run(*fp8, g.inputs);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), want->size());
    auto same = run(*plain, g.inputs);
    ASSERT_TRUE(same.ok()) << same.status().to_string();
    EXPECT_TRUE(*same == *got) << "the FP8 folder's logits differ from the same weights as F32";
    for (std::size_t pos = 0; pos < want->size(); ++pos) {
      const auto& w = (*want)[pos];
      const auto& q = (*got)[pos];
      const auto [err, diff] = testing::row_error(w, q);
      worst = std::max(worst, err);
      sum += err;
      ++positions;
      EXPECT_LE(err, kMaxPositionError) << "prompt of " << g.prompt.size() << ", position " << pos;
      std::vector<float> sorted = w;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      const double entry_rms = std::sqrt(diff / static_cast<double>(w.size()));
      if (sorted[0] - sorted[1] > kArgmaxSigmas * entry_rms) {
        ++argmax_checked;
        const auto wa = std::max_element(w.begin(), w.end()) - w.begin();
        const auto qa = std::max_element(q.begin(), q.end()) - q.begin();
        if (wa != qa) {
          ++argmax_flips;
          ADD_FAILURE() << "argmax " << qa << " instead of " << wa << " at position " << pos
                        << " of the prompt of " << g.prompt.size() << " (margin "
                        << sorted[0] - sorted[1] << ")";
        }
      }
    }
  }
  const double mean = sum / static_cast<double>(positions);
  std::printf(
      "[ fp8 ] %-8s %-15s positions %zu: worst %.4f, mean %.4f; argmax checked %zu, "
      "flips %zu\n",
      c.fixture.c_str(), fp8_layout_name(c.layout), positions, worst, mean, argmax_checked,
      argmax_flips);
  EXPECT_LE(mean, kMaxMeanError);
  // The weights really were rounded: an FP8 load that silently kept the
  // original floats would pass the bounds above with zero error.
  EXPECT_GT(mean, 1e-4);
}

std::vector<LogitsCase> logits_cases() {
  std::vector<LogitsCase> cases;
  for (const char* f : {"llama", "qwen2", "qwen3", "mistral", "gemma3", "phi3"}) {
    for (Fp8Layout l : {Fp8Layout::kFp8Tensor, Fp8Layout::kFp8Block, Fp8Layout::kFbgemmChannel,
                        Fp8Layout::kCtTensor, Fp8Layout::kCtChannel, Fp8Layout::kCtBlock}) {
      cases.push_back({f, l});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Logits, ::testing::ValuesIn(logits_cases()), case_name);

}  // namespace
}  // namespace cellm::model
