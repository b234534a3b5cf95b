// Models in the exact shapes of SmolLM2-135M and Gemma 3 270M with random
// weights made on the device (the real files are too large to carry to the
// GPU machine): the CUDA program's bf16 logits against the float32 CPU
// program over the very same weight values, position by position, with a
// prompt long enough to cross Gemma's 512-token sliding window.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_program.h"
#include "backend/cuda/cuda_program.h"
#include "backend/cuda/device_weights.h"
#include "executor/cuda_executor.h"
#include "model/shapes.h"
#include "raw_driver.h"

namespace cellm::gpu_testing {
namespace {

struct ShapeCase {
  const char* name;
  std::size_t prompt;
  std::size_t decodes;
};

class GpuShapeTest : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(GpuShapeTest, CudaLogitsMatchTheCpuProgramOnTheSameWeights) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const ShapeCase& sc = GetParam();
  auto spec = model::named_shape(sc.name);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto device = cuda::random_weights(*spec, 20261130);
  ASSERT_TRUE(device.ok()) << device.status().to_string();
  auto host = cuda::download_weights(*spec, *device);
  ASSERT_TRUE(host.ok()) << host.status().to_string();

  program::ProgramOptions options;
  options.static_widths = {1, 2, 4, 8};
  options.max_step = 1024;
  options.kv_cells = 4096;
  auto gpu_program = cuda::make_program(*spec, std::move(device).value(), options);
  ASSERT_TRUE(gpu_program.ok()) << gpu_program.status().to_string();
  options.device_sampling = false;
  auto cpu_program = cpu::CpuProgram::create(*spec, *host, options);
  ASSERT_TRUE(cpu_program.ok()) << cpu_program.status().to_string();
  auto gpu = make_test_executor(std::move(gpu_program).value(), 2);
  auto cpu = make_test_executor(std::move(cpu_program).value(), 2);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);

  // The prompt, then greedy tokens of the CPU reference fed to both.
  std::mt19937 rng(7);
  std::vector<std::int64_t> inputs;
  for (std::size_t i = 0; i < sc.prompt; ++i) {
    inputs.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(spec->vocab_size)));
  }
  FedSeq g, c;
  g.seq = gpu->cache_control().seq_new().value_or(-1);
  c.seq = cpu->cache_control().seq_new().value_or(-1);
  g.inputs = c.inputs = &inputs;
  ASSERT_TRUE(feed(*gpu, {{&g, sc.prompt}}));
  ASSERT_TRUE(feed(*cpu, {{&c, sc.prompt}}));
  for (std::size_t i = 0; i < sc.decodes; ++i) {
    const auto& last = c.logits.at(inputs.size() - 1);
    inputs.push_back(std::max_element(last.begin(), last.end()) - last.begin());
    ASSERT_TRUE(feed(*gpu, {{&g, 1}}));
    ASSERT_TRUE(feed(*cpu, {{&c, 1}}));
  }
  int argmax_checked = 0;
  double worst = 0;
  for (const auto& [pos, ref] : c.logits) {
    const auto& got = g.logits.at(pos);
    const double err = relative_error(got, ref);
    worst = std::max(worst, err);
    EXPECT_LE(err, 3e-2) << sc.name << " position " << pos;
    if (expect_argmax_where_clear(got, ref, 0.25f,
                                  std::string(sc.name) + " position " + std::to_string(pos))) {
      ++argmax_checked;
    }
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
  RecordProperty("argmax_checked", argmax_checked);
  EXPECT_GT(argmax_checked, 0) << "no position had a margin above 0.25";
}

INSTANTIATE_TEST_SUITE_P(Shapes, GpuShapeTest,
                         ::testing::Values(ShapeCase{"smollm2-135m", 40, 8},
                                           ShapeCase{"gemma3-270m", 600, 8},
                                           ShapeCase{"smollm2-135m", 300, 8}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.name) + "_prompt" +
                                           std::to_string(info.param.prompt);
                           std::replace(n.begin(), n.end(), '-', '_');
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

}  // namespace
}  // namespace cellm::gpu_testing
