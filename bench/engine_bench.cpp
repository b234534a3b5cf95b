// The host's share of a serving step: a Runner over a CudaExecutor over the
// toy program (tests/executor/toy_program.h), whose forward does almost
// nothing, decoding many sessions at once. What a step costs here is what the
// engine thread spends around the model on every step of `cellm bench serve`
// (scheduling, packing the rows, placing them in the cache, the sampler call,
// delivering the tokens), time in which the GPU idles unless it is hidden.
// Counters: `us_per_step` (wall time per engine step), `execute_us_per_step`
// (inside Executor::execute, the toy's work included) and `steps`.
// Run: engine_bench --benchmark_counters_tabular=true; profile with
// perf record -g bin/engine_bench --benchmark_filter=.../sessions:256.
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include <benchmark/benchmark.h>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "core/check.h"
#include "executor/cuda_executor.h"
#include "executor/toy_program.h"

namespace cellm {
namespace {

constexpr std::int64_t kVocab = 64;
constexpr int kPrompt = 16;

std::shared_ptr<executor::testing::ToyProgram> make_program(int sessions, int session_tokens) {
  executor::testing::ToyConfig config;
  config.vocab = kVocab;
  config.max_context = session_tokens;
  config.max_cells = static_cast<std::int64_t>(sessions) * session_tokens + 1;
  config.static_widths = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  config.dynamic_width = 1024;
  // One key a layer: the toy's own work stays small beside the host path's.
  config.windows = {1};
  // A device sampler, as the CUDA program exports (greedy rows take argmax).
  config.device_logits = true;
  config.samplers = true;
  config.sampler_rows = 1024;
  return std::make_shared<executor::testing::ToyProgram>(config);
}

// args {sessions, generated tokens per session}
void BM_RunnerDecode(benchmark::State& state) {
  const auto sessions = static_cast<int>(state.range(0));
  const auto generated = static_cast<int>(state.range(1));
  const int session_tokens = kPrompt + generated + 8;
  auto made = executor::CudaExecutor::create(make_program(sessions, session_tokens), sessions,
                                             session_tokens);
  CELLM_CHECK(made.ok(), "{}", made.status().to_string());
  std::unique_ptr<executor::CudaExecutor> exec = std::move(made).value();
  // Every session decodes in one step; prompts go in chunks beside them.
  auto scheduler = DecodeFirstScheduler::create(static_cast<std::size_t>(sessions) + 2 * 256,
                                                static_cast<std::size_t>(sessions), 256);
  CELLM_CHECK(scheduler != nullptr, "scheduler");
  Runner runner(*exec, std::move(scheduler));
  CELLM_CHECK(runner.open_session_async().get().has_value(), "the executor did not initialize");

  std::int64_t steps = 0;
  std::int64_t execute_us = 0;
  double wall_us = 0.0;
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<std::future<std::optional<Session>>> opening;
    for (int s = 0; s < sessions; ++s) opening.push_back(runner.open_session_async());
    std::vector<Session> open;
    for (auto& f : opening) {
      std::optional<Session> s = f.get();
      CELLM_CHECK(s.has_value(), "the runner refused a session");
      open.push_back(std::move(*s));
    }
    const EngineMetrics before = runner.metrics();
    state.ResumeTiming();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<GenerationHandle> handles;
    for (int s = 0; s < sessions; ++s) {
      std::vector<Token> prompt(kPrompt);
      for (int i = 0; i < kPrompt; ++i) prompt[static_cast<std::size_t>(i)] = (s * 7 + i) % kVocab;
      GenConfig config;
      config.max_new_tokens = generated;
      handles.push_back(open[static_cast<std::size_t>(s)].generate_async(
          std::move(prompt), config, [](const GenerationUpdate&) {}));
    }
    for (const GenerationHandle& h : handles) h.wait();
    wall_us +=
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    state.PauseTiming();
    const EngineMetrics after = runner.metrics();
    steps += after.steps - before.steps;
    execute_us += after.step_latency_sum_us - before.step_latency_sum_us;
    open.clear();  // closes the sessions, freeing their cells
    state.ResumeTiming();
  }
  runner.shutdown();
  state.counters["steps"] = static_cast<double>(steps);
  const double per_step = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  state.counters["us_per_step"] = wall_us * per_step;
  state.counters["execute_us_per_step"] = static_cast<double>(execute_us) * per_step;
}
BENCHMARK(BM_RunnerDecode)
    ->ArgNames({"sessions", "generated"})
    ->Args({64, 128})
    ->Args({256, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace cellm
