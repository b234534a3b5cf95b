// CpuProgram on tiny random models of every architecture: logits against an
// independent double-precision reference, invariance under chunking,
// padding, packing and cloning, and the method/constant surface with its
// refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/cpu_program.h"
#include "step_driver.h"
#include "tiny_model.h"

namespace cellm::cpu {
namespace {

using model::Architecture;
using testing::DriverToken;
using testing::StepDriver;

constexpr double kRefTol = 1e-4;   // float32 forward vs the double reference
constexpr double kSelfTol = 2e-6;  // one float32 path vs another

program::ProgramOptions small_options() {
  program::ProgramOptions o;
  o.static_widths = {1, 2, 4, 8};
  o.max_step = 64;
  o.kv_cells = 512;
  return o;
}

std::unique_ptr<StepDriver> make_driver(const testing::TinyModel& m,
                                        program::ProgramOptions options = small_options(),
                                        std::int32_t cells = 512) {
  auto program = CpuProgram::create(m.spec, m.weights, options);
  EXPECT_TRUE(program.ok()) << program.status().to_string();
  if (!program.ok()) return nullptr;
  cache::CellCacheConfig config{cells, 8, 200};
  auto driver = StepDriver::create(std::move(program).value(), config);
  EXPECT_TRUE(driver.ok()) << driver.status().to_string();
  return driver.ok() ? std::move(driver).value() : nullptr;
}

std::vector<std::int64_t> make_tokens(std::size_t n, std::int64_t vocab, std::uint64_t salt) {
  std::vector<std::int64_t> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = static_cast<std::int64_t>((i * 7 + salt * 13 + i * i) % vocab);
  return t;
}

class CpuProgramArch : public ::testing::TestWithParam<Architecture> {
 protected:
  void SetUp() override { model_ = testing::make_tiny_model(GetParam(), 42); }
  testing::TinyModel model_;
};

TEST_P(CpuProgramArch, WholePromptMatchesReference) {
  auto d = make_driver(model_);
  ASSERT_NE(d, nullptr);
  const auto tokens = make_tokens(23, model_.spec.vocab_size, 1);
  const auto ref = testing::reference_logits(model_.spec, model_.weights, tokens);
  const auto seq = d->cache().seq_new();
  ASSERT_TRUE(seq.has_value());
  auto got = d->feed(*seq, tokens, tokens.size());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), tokens.size());
  for (std::size_t p = 0; p < tokens.size(); ++p) {
    EXPECT_LE(testing::relative_error((*got)[p], ref[p]), kRefTol) << "position " << p;
  }
}

TEST_P(CpuProgramArch, ChunkingAndPaddingDoNotChangeLogits) {
  const auto tokens = make_tokens(30, model_.spec.vocab_size, 2);
  const auto ref = testing::reference_logits(model_.spec, model_.weights, tokens);
  for (std::size_t chunk : {1u, 3u, 7u}) {
    auto d = make_driver(model_);
    ASSERT_NE(d, nullptr);
    const auto seq = d->cache().seq_new();
    // Chunks of 3 and 7 run on forward_4 / forward_8 with padding rows.
    auto got = d->feed(*seq, tokens, chunk);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    for (std::size_t p = 0; p < tokens.size(); ++p) {
      EXPECT_LE(testing::relative_error((*got)[p], ref[p]), kRefTol)
          << "chunk " << chunk << " position " << p;
    }
  }
}

TEST_P(CpuProgramArch, PackedSequencesMatchTheirSoloRuns) {
  auto d = make_driver(model_);
  ASSERT_NE(d, nullptr);
  const auto a = make_tokens(17, model_.spec.vocab_size, 3);
  const auto b = make_tokens(11, model_.spec.vocab_size, 4);
  const auto ref_a = testing::reference_logits(model_.spec, model_.weights, a);
  const auto ref_b = testing::reference_logits(model_.spec, model_.weights, b);
  const auto sa = d->cache().seq_new();
  const auto sb = d->cache().seq_new();
  // A decodes one token a step while B prefills in chunks of 5 beside it.
  std::size_t ia = 0, ib = 0;
  while (ia < a.size() || ib < b.size()) {
    std::vector<DriverToken> step;
    std::vector<std::pair<int, std::size_t>> owner;
    if (ib < b.size()) {
      for (std::size_t k = 0; k < 5 && ib < b.size(); ++k, ++ib) {
        step.push_back({*sb, b[ib], true});
        owner.push_back({1, ib});
      }
    }
    if (ia < a.size()) {
      step.push_back({*sa, a[ia], true});
      owner.push_back({0, ia++});
    }
    auto got = d->step(step);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    for (std::size_t r = 0; r < owner.size(); ++r) {
      const auto& ref = owner[r].first == 0 ? ref_a : ref_b;
      EXPECT_LE(testing::relative_error((*got)[r], ref[owner[r].second]), kRefTol)
          << "seq " << owner[r].first << " position " << owner[r].second;
    }
  }
}

TEST_P(CpuProgramArch, CloneMidPromptContinuesLikeTheOriginal) {
  auto d = make_driver(model_);
  ASSERT_NE(d, nullptr);
  const auto tokens = make_tokens(20, model_.spec.vocab_size, 5);
  auto other = tokens;
  other[12] = (other[12] + 1) % model_.spec.vocab_size;  // the clone diverges after position 11
  const auto ref = testing::reference_logits(model_.spec, model_.weights, tokens);
  const auto ref_other = testing::reference_logits(model_.spec, model_.weights, other);
  const auto src = d->cache().seq_new();
  ASSERT_TRUE(d->feed(*src, std::span(tokens).first(15), 4).ok());
  const auto clone = d->cache().seq_clone(*src, 12);
  ASSERT_TRUE(clone.has_value());
  // The source keeps going while the clone takes another branch.
  auto rest_src = d->feed(*src, std::span(tokens).subspan(15), 2);
  auto rest_clone = d->feed(*clone, std::span(other).subspan(12), 3);
  ASSERT_TRUE(rest_src.ok() && rest_clone.ok());
  for (std::size_t i = 0; i < rest_src->size(); ++i) {
    EXPECT_LE(testing::relative_error((*rest_src)[i], ref[15 + i]), kRefTol) << i;
  }
  for (std::size_t i = 0; i < rest_clone->size(); ++i) {
    EXPECT_LE(testing::relative_error((*rest_clone)[i], ref_other[12 + i]), kRefTol) << i;
  }
}

TEST_P(CpuProgramArch, EveryForwardMethodAgrees) {
  const auto tokens = make_tokens(6, model_.spec.vocab_size, 6);
  std::vector<std::vector<float>> first;
  for (const std::string method : {"forward_8", "forward_others", "forward"}) {
    auto d = make_driver(model_);
    ASSERT_NE(d, nullptr);
    const auto seq = d->cache().seq_new();
    auto got = d->feed(*seq, tokens, tokens.size(), method);
    ASSERT_TRUE(got.ok()) << method << ": " << got.status().to_string();
    if (first.empty()) {
      first = *got;
      continue;
    }
    for (std::size_t p = 0; p < tokens.size(); ++p) {
      EXPECT_LE(testing::relative_error((*got)[p], first[p]), kSelfTol) << method << " " << p;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, CpuProgramArch,
                         ::testing::Values(Architecture::kLlama, Architecture::kQwen2,
                                           Architecture::kQwen3, Architecture::kMistral,
                                           Architecture::kGemma3, Architecture::kPhi3),
                         [](const auto& info) {
                           switch (info.param) {
                             case Architecture::kLlama: return "llama";
                             case Architecture::kQwen2: return "qwen2";
                             case Architecture::kQwen3: return "qwen3";
                             case Architecture::kMistral: return "mistral";
                             case Architecture::kGemma3: return "gemma3";
                             case Architecture::kPhi3: return "phi3";
                           }
                           return "unknown";
                         });

}  // namespace
}  // namespace cellm::cpu
