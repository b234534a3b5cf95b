// The host's share of a serving step, time in which the GPU idles between
// two steps of `cellm serve` (cellm bench step's decode points run the same
// loop on the GPU).
// - BM_RunnerStep: the Runner and the DecodeFirstScheduler alone, over an
//   executor that answers every row with a fixed token at once: scheduling,
//   the step's bookkeeping, delivering the tokens, queueing the next decode.
// - BM_RunnerDecode: a Runner over a CudaExecutor over the toy program
//   (tests/executor/toy_program.h), whose forward does almost nothing: the
//   above plus packing the rows, placing them in the cache and the sampler
//   call.
// Every session decodes in every step. Counters: `us_per_step` (wall time
// per engine step), `cpu_us_per_step` (CPU time per step, which a loaded
// machine does not inflate), `execute_us_per_step` (inside
// Executor::execute) and `steps`.
// Run: engine_bench --benchmark_counters_tabular=true; profile with
// perf record -g bin/engine_bench --benchmark_filter=.../sessions:256.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include <benchmark/benchmark.h>

#include "cellm/decode_first_scheduler.h"
#include "cellm/executor.h"
#include "cellm/runner.h"
#include "core/check.h"
#include "executor/cuda_executor.h"
#include "executor/toy_program.h"

namespace cellm {
namespace {

constexpr std::int64_t kVocab = 64;
constexpr int kPrompt = 16;

// Answers every row that asks with token 1, at once; keeps nothing.
class InstantExecutor final : public Executor {
 public:
  std::optional<SessionId> open_session() override { return next_++; }
  void close_session(SessionId) override {}
  void set_sampling(SessionId, const SamplingParams&, std::optional<std::uint64_t>) override {}
  bool execute(const BatchInput& batch, BatchOutput& out) override {
    out.outputs.resize(batch.inputs.size());
    for (std::size_t i = 0; i < batch.inputs.size(); ++i) {
      std::optional<Output>& o = out.outputs[i];
      if (!batch.inputs[i].produce_output) {
        o.reset();
        continue;
      }
      if (!o) o.emplace();
      o->sid = batch.inputs[i].sid;
      o->tokens.assign(1, Token{1});
    }
    return true;
  }

 private:
  SessionId next_ = 1;
};

struct StepCounts {
  std::int64_t steps = 0;
  std::int64_t execute_us = 0;
  double wall_us = 0.0;
  double cpu_us = 0.0;
};

// CPU time of the whole process: the engine thread's, as the benchmark's
// thread sleeps in wait() meanwhile. Unlike wall time it holds on a shared,
// loaded machine.
double process_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

// One iteration: `sessions` sessions (opened untimed) each generate
// `generated` tokens from a kPrompt-token prompt, all at once.
void generate_all(Runner& runner, int sessions, int generated, benchmark::State& state,
                  StepCounts& counts) {
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
  const double cpu0 = process_cpu_us();
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
  counts.cpu_us += process_cpu_us() - cpu0;
  counts.wall_us +=
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  state.PauseTiming();
  const EngineMetrics after = runner.metrics();
  counts.steps += after.steps - before.steps;
  counts.execute_us += after.step_latency_sum_us - before.step_latency_sum_us;
  open.clear();  // closes the sessions, freeing their cells
  state.ResumeTiming();
}

void report(benchmark::State& state, const StepCounts& counts) {
  state.counters["steps"] = static_cast<double>(counts.steps);
  const double per_step = counts.steps > 0 ? 1.0 / static_cast<double>(counts.steps) : 0.0;
  state.counters["us_per_step"] = counts.wall_us * per_step;
  state.counters["cpu_us_per_step"] = counts.cpu_us * per_step;
  state.counters["execute_us_per_step"] = static_cast<double>(counts.execute_us) * per_step;
}

// args {sessions, generated tokens per session}
void BM_RunnerStep(benchmark::State& state) {
  const auto sessions = static_cast<int>(state.range(0));
  const auto generated = static_cast<int>(state.range(1));
  InstantExecutor exec;
  auto scheduler = DecodeFirstScheduler::create(static_cast<std::size_t>(sessions) + 2 * 256,
                                                static_cast<std::size_t>(sessions), 256);
  CELLM_CHECK(scheduler != nullptr, "scheduler");
  Runner runner(exec, std::move(scheduler));
  StepCounts counts;
  for (auto _ : state) generate_all(runner, sessions, generated, state, counts);
  runner.shutdown();
  report(state, counts);
}
BENCHMARK(BM_RunnerStep)
    ->ArgNames({"sessions", "generated"})
    ->Args({1, 512})
    ->Args({8, 512})
    ->Args({64, 256})
    ->Args({256, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

std::shared_ptr<executor::testing::ToyProgram> make_program(int sessions, int session_tokens) {
  executor::testing::ToyConfig config;
  config.vocab = kVocab;
  config.max_context = session_tokens;
  config.static_widths = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  config.dynamic_width = 1024;
  // Every session's cells, and a pool wider than the widest method.
  config.max_cells = std::max<std::int64_t>(static_cast<std::int64_t>(sessions) * session_tokens,
                                            config.dynamic_width) +
                     1;
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
  StepCounts counts;
  for (auto _ : state) generate_all(runner, sessions, generated, state, counts);
  runner.shutdown();
  report(state, counts);
}
BENCHMARK(BM_RunnerDecode)
    ->ArgNames({"sessions", "generated"})
    ->Args({1, 512})
    ->Args({8, 512})
    ->Args({64, 128})
    ->Args({256, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace cellm
