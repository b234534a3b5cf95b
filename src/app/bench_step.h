// `cellm bench step`: decode and prefill timings of one model on this
// machine's GPU, with the device's own ceilings measured in the same run and
// every figure also given as a fraction of its roofline (decode: weight + KV
// bytes read over the copy bandwidth; prefill: FLOPs over the bf16 GEMM rate).
//
// Decode points are the served step: `batch` sessions generate through a
// Runner over a DecodeFirstScheduler and the CudaExecutor, as `cellm serve`
// runs them (executor.execute, the device sampler, the callbacks), with a
// fixed length and no stop token. Each session first prefills `context`
// tokens; only the steps in which every session decodes are timed, from the
// Runner's own deliveries. Twice: greedy, then seeded sampling at
// temperature 1. Prefill points time one forward of the prompt through
// execute_raw.
//
// Thread-safety: runs on the calling thread (the Runner has its own engine
// thread, where the deliveries are stamped).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cellm/runner.h"
#include "cellm/status.h"
#include "cellm/types.h"

namespace cellm::app {

struct StepBenchOptions {
  std::string model = "llama-3.2-1b";  // a shape name (random weights) or a model path
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<int> contexts = {128, 512, 2048, 8192};
  std::vector<int> prompts = {128, 512, 2048, 8192};
  int warmup_steps = 8;
  int steps = 64;  // timed decode steps a point (every session decoding)
  // Decode lines: "greedy", "sampled" (temperature 1, seeded) or "both".
  std::string sampling = "both";
  int prefill_reps = 5;
  std::string json_path;  // JSON lines appended here when set
  std::uint64_t seed = 1;
};

// One decode point as `cellm serve` runs it (see above), on any executor.
struct ServedDecodeOptions {
  int batch = 1;            // sessions decoding together
  int context = 512;        // tokens each holds when the warm-up starts (>= 2)
  SamplingParams sampling;  // of the timed generations, seeded per session
  int warmup_steps = 8;
  int steps = 64;
  std::uint64_t seed = 1;
  std::int64_t vocab = 0;  // the prompts' random ids lie in [0, vocab)
};
struct ServedDecode {
  double ms_per_step = 0;
  int steps = 0;  // steps timed, every session decoding in each
};
// Runs one point on `runner`, whose executor must hold `batch` sessions of
// context + warmup + steps + 4 tokens and whose scheduler must decode them
// all in one step: an error otherwise (a refused session, or fewer than half
// the steps with every session decoding). Blocks until the generations end;
// never call it from a callback of the same runner.
Result<ServedDecode> time_served_decode(Runner& runner, const ServedDecodeOptions& options);

// Runs the benchmark, printing progress and a table to `out`.
Status run_step_bench(const StepBenchOptions& options, std::FILE* out);

}  // namespace cellm::app
