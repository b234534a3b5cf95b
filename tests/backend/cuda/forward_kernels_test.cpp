// The CUDA forward's fused GEMV path (the projections of a step of at most
// CELLM_GEMV_MAX_ROWS rows with the norms, residual adds and the MLP
// activation fused into them) against the cuBLASLt path with separate kernels
// on the same random weights: a prefill of three sequences, then decode steps
// with a padding row, in the real layer shapes (Llama 1B/8B heads, Qwen3's
// q/k norms and group 2, Gemma 3's head dim 256 and sliding windows; few
// layers where the full model would be slow to build). Logits must agree to
// bf16 noise.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/kernels/kernel_choice.h"
#include "gpu_test_util.h"
#include "model/shapes.h"

namespace cellm::cuda {
namespace {

constexpr std::int32_t kMaxStep = 1024;
constexpr std::int32_t kCells = 4096;
constexpr int kSeqs = 3;

struct ForwardCase {
  const char* shape;
  int layers;  // 0: all of them
  int prompt;  // tokens per sequence
  int decodes;
};

// Logits of every selected row of every step, in order.
std::vector<std::vector<float>> run(const ForwardCase& c, const KernelChoice& kernels) {
  auto spec = model::named_shape(c.shape);
  EXPECT_TRUE(spec.ok()) << spec.status().to_string();
  if (c.layers > 0) {
    spec->num_layers = c.layers;
    spec->layers.resize(static_cast<std::size_t>(c.layers));
  }
  auto weights = random_weights(*spec, 4242);
  EXPECT_TRUE(weights.ok()) << weights.status().to_string();
  auto forward = CudaForward::create(*spec, std::move(weights).value(), kMaxStep, kCells);
  EXPECT_TRUE(forward.ok()) << forward.status().to_string();
  CudaForward& f = **forward;
  EXPECT_TRUE(f.bind_tables(kSeqs + 1, c.prompt + c.decodes + 8).is_ok());

  std::mt19937 rng(99);
  std::vector<std::int32_t> step(static_cast<std::size_t>(StepArrays::kCount) * kMaxStep, 0);
  auto at = [&](StepArrays::Index which, int i) -> std::int32_t& {
    return step[static_cast<std::size_t>(which) * kMaxStep + static_cast<std::size_t>(i)];
  };
  std::int32_t next_cell = 1;  // 0 is scratch
  std::vector<std::vector<float>> logits;
  auto execute = [&](int width, int rows, bool decode) {
    CELLM_CUDA_CHECK(cudaMemcpy(f.step_device(), step.data(), step.size() * sizeof(std::int32_t),
                                cudaMemcpyHostToDevice));
    ForwardShape shape{width, rows, decode, kernels};
    const Status status = f.enqueue(shape, nullptr);
    EXPECT_TRUE(status.is_ok()) << status.to_string();
    std::vector<float> host(static_cast<std::size_t>(rows) * spec->vocab_size);
    CELLM_CUDA_CHECK(cudaDeviceSynchronize());
    CELLM_CUDA_CHECK(
        cudaMemcpy(host.data(), f.logits(), host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (int r = 0; r < rows; ++r) {
      logits.emplace_back(host.begin() + static_cast<std::ptrdiff_t>(r) * spec->vocab_size,
                          host.begin() + static_cast<std::ptrdiff_t>(r + 1) * spec->vocab_size);
    }
  };
  std::uniform_int_distribution<int> token(0, spec->vocab_size - 1);
  // Prefill: one step per prompt, its last token selected.
  for (int s = 0; s < kSeqs; ++s) {
    for (int p = 0; p < c.prompt; ++p) {
      at(StepArrays::kTokens, p) = token(rng);
      at(StepArrays::kPositions, p) = p;
      at(StepArrays::kSlots, p) = s;
      at(StepArrays::kCells, p) = next_cell++;
      at(StepArrays::kFreshFrom, p) = 0;  // the whole prompt is this step's
    }
    at(StepArrays::kSelector, 0) = c.prompt - 1;
    execute(c.prompt, 1, false);
  }
  // Decode: one token per sequence and a padding row, on the split-KV kernel.
  for (int d = 0; d < c.decodes; ++d) {
    for (int s = 0; s < kSeqs; ++s) {
      at(StepArrays::kTokens, s) = token(rng);
      at(StepArrays::kPositions, s) = c.prompt + d;
      at(StepArrays::kSlots, s) = s;
      at(StepArrays::kCells, s) = next_cell++;
      // The history before this token is settled: the split-KV kernel reads
      // it before its wait on the q/k/v projection.
      at(StepArrays::kFreshFrom, s) = c.prompt + d;
      at(StepArrays::kSelector, s) = s;
    }
    at(StepArrays::kTokens, kSeqs) = 0;
    at(StepArrays::kPositions, kSeqs) = 0;
    at(StepArrays::kSlots, kSeqs) = -1;
    at(StepArrays::kCells, kSeqs) = 0;
    at(StepArrays::kFreshFrom, kSeqs) = 0;
    execute(kSeqs + 1, kSeqs, true);
  }
  return logits;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double d = 0.0;
  double n = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    d += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
    n += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(d / std::max(n, 1e-30));
}

struct Variant {
  const char* name;
  KernelChoice kernels;
};

// The decode steps have four rows, so at the default CELLM_GEMV_MAX_ROWS
// (1) they run every projection on cuBLASLt with separate norm, residual and
// activation kernels: the baseline the fused GEMV path must match.
KernelChoice cublas_steps() {
  return KernelChoice{};
}

std::vector<Variant> variants() {
  // The fused GEMV path at max rows 4 and 8, and with every projection that
  // qualifies on tensor cores (the steps' rows in one mma where they fit its
  // shared memory, else on CUDA cores as without).
  KernelChoice gemv4;
  gemv4.gemv_max_rows = 4;
  KernelChoice gemv8 = gemv4;
  gemv8.gemv_max_rows = 8;
  KernelChoice gemv8_mma = gemv8;
  gemv8_mma.gemv_mma = kMmaAll;
  return {{"gemv4", gemv4}, {"gemv8", gemv8}, {"gemv8_mma", gemv8_mma}};
}

class ForwardKernelsTest : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(ForwardKernelsTest, FusedGemvStepsMatchTheCublasOnes) {
  CELLM_REQUIRE_GPU();
  const ForwardCase c = GetParam();
  const auto baseline = run(c, cublas_steps());
  ASSERT_EQ(baseline.size(), static_cast<std::size_t>(kSeqs * (1 + c.decodes)));
  for (const Variant& v : variants()) {
    const auto got = run(c, v.kernels);
    ASSERT_EQ(got.size(), baseline.size()) << v.name;
    for (std::size_t r = 0; r < got.size(); ++r) {
      // bf16 activations through a few layers: ~1% apart at most.
      EXPECT_LE(relative_error(got[r], baseline[r]), 2e-2) << v.name << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, ForwardKernelsTest,
                         ::testing::Values(ForwardCase{"llama-3.2-1b", 2, 300, 3},
                                           ForwardCase{"llama-3.1-8b", 2, 200, 2},
                                           ForwardCase{"qwen3-0.6b", 3, 120, 2},
                                           ForwardCase{"gemma3-270m", 0, 600, 2}),
                         [](const auto& info) {
                           std::string n = info.param.shape;
                           std::replace(n.begin(), n.end(), '-', '_');
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

}  // namespace
}  // namespace cellm::cuda
