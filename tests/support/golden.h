// Golden fixtures of Hugging Face reference outputs (testdata/README.md):
// every folder under $CELLMDEV_GOLDEN_DIR (default testdata/hf_models) holding
// expected.safetensors, its prompts, greedy continuations and teacher-forced
// logits, and the comparison rule (relative error per position, same argmax
// where the reference's top-2 margin allows).
//
// Thread-safety: plain functions over immutable data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "cellm/status.h"
#include "core/tensor.h"

namespace cellm::testing {

struct GoldenCase {
  std::vector<std::int64_t> prompt;
  std::vector<std::int64_t> greedy;
  std::vector<std::int64_t> inputs;  // prompt + greedy[:-1]: row j of logits follows inputs[0..j]
  Tensor logits;                     // [inputs.size(), V] float32
};

struct GoldenTolerance {
  double max_relative_error;   // per position, ||got - ref|| / ||ref||
  double argmax_margin;        // argmax must match where the top-2 margin exceeds this
  double mean_relative_error;  // over all positions of a run
};
inline constexpr GoldenTolerance kFloat32Tolerance{1e-4, 1e-3, 1e-4};
// bf16: testdata/README.md suggests 3e-2 per position and argmax where the
// margin exceeds 0.25, but Hugging Face transformers itself, run in bf16 on an
// H200 over these fixtures (bench/tools/hf_bf16_error.py, 2026-11-30), reaches
// 5.7e-2 per position (llama) and flips the argmax at margins up to 0.46
// (llama_long, qwen3). A bf16 forward is held to that yardstick per position
// and to the suggested 3e-2 on average over each run.
inline constexpr GoldenTolerance kBf16Tolerance{6e-2, 0.5, 3e-2};

// The relative error of one position (for means); NaN when sizes differ.
double golden_row_error(std::span<const float> got, const GoldenCase& c, std::size_t pos);

std::filesystem::path golden_root();
// Fixture folder names under golden_root(), sorted.
std::vector<std::string> golden_fixture_names();
Result<std::vector<GoldenCase>> load_golden_cases(const std::filesystem::path& dir);

// "" when row `pos` of `got` matches the reference; else what is wrong.
std::string check_golden_row(std::span<const float> got, const GoldenCase& c, std::size_t pos,
                             const GoldenTolerance& tol);

}  // namespace cellm::testing
