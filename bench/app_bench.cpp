// CPU decode throughput of a real model through the assembled executor
// (app::create_executor, backend "cpu"): each iteration is one engine step
// that decodes one greedy token for each of `batch` sessions, packed into
// one forward. The model is $CELLMDEV_BENCH_MODEL, else
// models/SmolLM2-135M-Instruct.Q4_1.gguf under the working directory. Every
// session holds a 64-token prompt and decodes at contexts 64..191 (it rewinds
// to 64 when it reaches 192), so the KV read per step stays bounded.
//
//   build/<dir>/bench/app_bench --benchmark_filter=Decode
//
// tokens_per_s counts generated tokens (batch per step).
#include <memory>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "app/executor_factory.h"
#include "core/check.h"
#include "core/env.h"

namespace cellm::app {
namespace {

constexpr int kPrompt = 64;
constexpr int kContextSpan = 128;
constexpr int kMaxBatch = 8;

std::string model_path() {
  return env_string("CELLMDEV_BENCH_MODEL").value_or("models/SmolLM2-135M-Instruct.Q4_1.gguf");
}

LoadedExecutor& shared_executor() {
  static LoadedExecutor* loaded = [] {
    CudaExecutorConfig config;
    config.model_path = model_path();
    config.backend = "cpu";
    config.max_sessions = kMaxBatch;
    config.max_session_tokens = kPrompt + kContextSpan;
    config.program.max_step = 256;
    auto made = create_executor(config);
    CELLM_CHECK(made.ok(), "{}", made.status().to_string());
    auto* out = new LoadedExecutor(std::move(made).value());
    CELLM_CHECK(out->executor->initialize(), "initialize failed");
    return out;
  }();
  return *loaded;
}

void BM_Decode(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  executor::CudaExecutor& ex = *shared_executor().executor;
  std::vector<SessionId> sessions;
  BatchInput prefill;
  for (int s = 0; s < batch; ++s) {
    sessions.push_back(ex.open_session().value());
    auto prompt = std::make_shared<std::vector<Token>>();
    for (int i = 0; i < kPrompt; ++i) prompt->push_back(static_cast<Token>(100 + 31 * s + 7 * i));
    Input in;
    in.sid = sessions.back();
    in.payload = prompt;
    in.size = prompt->size();
    in.produce_output = true;
    prefill.inputs.push_back(std::move(in));
  }
  BatchOutput out;
  CELLM_CHECK(ex.execute(prefill, out), "prefill failed");
  std::vector<Token> last(static_cast<std::size_t>(batch));
  for (int s = 0; s < batch; ++s) last[static_cast<std::size_t>(s)] = out.outputs[s]->tokens[0];

  int step = 0;
  for (auto _ : state) {
    BatchInput decode;
    const Position pos = kPrompt + step % kContextSpan;  // rewinds to kPrompt when it wraps
    for (int s = 0; s < batch; ++s) {
      Input in;
      in.sid = sessions[static_cast<std::size_t>(s)];
      in.payload = std::make_shared<const std::vector<Token>>(1, last[static_cast<std::size_t>(s)]);
      in.size = 1;
      in.position = pos;
      in.produce_output = true;
      decode.inputs.push_back(std::move(in));
    }
    CELLM_CHECK(ex.execute(decode, out), "decode step failed");
    for (int s = 0; s < batch; ++s) last[static_cast<std::size_t>(s)] = out.outputs[s]->tokens[0];
    ++step;
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
  for (SessionId sid : sessions) ex.close_session(sid);
}
BENCHMARK(BM_Decode)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace cellm::app
