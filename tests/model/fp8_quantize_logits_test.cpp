// --quantize fp8 end to end on the CPU reference program, for every fixture
// of testdata/hf_models:
//  1. The fixture written as an FP8 checkpoint with per-channel scales
//     (fbgemm_fp8, by fp8_checkpoint.h's own encoder) and loaded as such must
//     give logits bit-identical to the original folder loaded with
//     LoadOptions::quantize = kFp8, and the stored codes must be the same:
//     quantizing on load is exactly "as if the checkpoint had been FP8".
//  2. Against the unquantized folder the logits stay close: the bounds of
//     fp8_logits_test.cpp (relative RMS error at most 50% at any position and
//     20% on average; these random tiny models amplify weight noise several
//     fold, and per-channel FP8 measured 10-14% on average there), and
//     above 1e-4 on average, so that a quantizer that silently kept the
//     floats fails.
#include <algorithm>
#include <cmath>
#include <cstring>
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

constexpr double kMaxPositionError = 0.5;
constexpr double kMaxMeanError = 0.2;

// The rows [begin, end) of stored weight `stored` as the checkpoint wrote
// its codes; for phi3's fused tensors, the split projection's rows.
struct StoredRows {
  std::string stored;
  std::int64_t begin = 0;
};

StoredRows stored_rows(const ModelSpec& spec, const std::string& name) {
  if (spec.arch != Architecture::kPhi3) return {name, 0};
  const std::int64_t q = static_cast<std::int64_t>(spec.num_heads) * spec.head_dim;
  const std::int64_t kv = static_cast<std::int64_t>(spec.num_kv_heads) * spec.head_dim;
  const auto replace = [&](const char* part, const char* fused, std::int64_t begin) {
    std::string s = name;
    s.replace(s.find(part), std::strlen(part), fused);
    return StoredRows{s, begin};
  };
  if (name.find("q_proj") != std::string::npos) return replace("q_proj", "qkv_proj", 0);
  if (name.find("k_proj") != std::string::npos) return replace("k_proj", "qkv_proj", q);
  if (name.find("v_proj") != std::string::npos) return replace("v_proj", "qkv_proj", q + kv);
  if (name.find("gate_proj") != std::string::npos) return replace("gate_proj", "gate_up_proj", 0);
  if (name.find("up_proj") != std::string::npos) {
    return replace("up_proj", "gate_up_proj", spec.intermediate_size);
  }
  return {name, 0};
}

class Fp8QuantizeLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8QuantizeLogits, EqualAnFp8CheckpointAndStayClose) {
  const std::string& f = GetParam();
  const fs::path dir = cellm::testing::testdata_dir() / "hf_models" / f;
  const fs::path out = fs::path(::testing::TempDir()) / ("cellm_fp8_quantize_logits_" + f);
  cellm::testing::Fp8WriteOptions wo;
  wo.layout = cellm::testing::Fp8Layout::kFbgemmChannel;
  const auto written = cellm::testing::write_fp8_checkpoint(dir, out, wo);
  ASSERT_FALSE(written.codes.empty());
  auto checkpoint = load_model(out);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  fs::remove_all(out);
  auto base = load_model(dir);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  LoadOptions o;
  o.quantize = Quantize::kFp8;
  auto quantized = load_model(dir, o);
  ASSERT_TRUE(quantized.ok()) << quantized.status().to_string();

  // The same codes as the checkpoint writer's (lm_head is the only linear
  // weight it leaves unquantized, as quantize_fp8 does).
  EXPECT_EQ(written.left_unquantized.size(), base->spec.tie_word_embeddings ? 0u : 1u);
  std::size_t compared = 0;
  for (const auto& [name, w] : quantized->weights.fp8) {
    SCOPED_TRACE(name);
    const StoredRows s = stored_rows(quantized->spec, name);
    const auto it = written.codes.find(s.stored);
    ASSERT_NE(it, written.codes.end());
    const std::size_t begin = static_cast<std::size_t>(s.begin * w.codes.dim(1));
    ASSERT_LE(begin + static_cast<std::size_t>(w.codes.numel()), it->second.size());
    EXPECT_EQ(std::memcmp(w.codes.data(), it->second.data() + begin,
                          static_cast<std::size_t>(w.codes.numel())),
              0);
    ++compared;
  }
  EXPECT_EQ(compared, 7 * quantized->weights.layers.size());

  auto cases = cellm::testing::load_golden_cases(dir);
  ASSERT_TRUE(cases.ok()) << cases.status().to_string();
  double worst = 0, sum = 0;
  std::size_t positions = 0;
  for (const auto& g : *cases) {
    auto got = testing::cpu_logits(*quantized, g.inputs);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    auto same = testing::cpu_logits(*checkpoint, g.inputs);
    ASSERT_TRUE(same.ok()) << same.status().to_string();
    EXPECT_TRUE(*same == *got) << "--quantize fp8 differs from the same model stored as FP8";
    auto want = testing::cpu_logits(*base, g.inputs);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    ASSERT_EQ(got->size(), want->size());
    for (std::size_t pos = 0; pos < want->size(); ++pos) {
      const double err = testing::row_error((*want)[pos], (*got)[pos]).relative;
      worst = std::max(worst, err);
      sum += err;
      ++positions;
      EXPECT_LE(err, kMaxPositionError) << "prompt of " << g.prompt.size() << ", position " << pos;
    }
  }
  const double mean = sum / static_cast<double>(positions);
  std::printf("[ quantize fp8 ] %-8s positions %zu: worst %.4f, mean %.4f\n", f.c_str(), positions,
              worst, mean);
  EXPECT_LE(mean, kMaxMeanError);
  EXPECT_GT(mean, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8QuantizeLogits,
                         ::testing::Values("llama", "qwen2", "qwen3", "mistral", "gemma3", "phi3"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace cellm::model
