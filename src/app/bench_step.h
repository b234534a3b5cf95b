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
// Thread-safety: runs on the calling thread (the Runner has its own).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cellm/status.h"

namespace cellm::app {

struct StepBenchOptions {
  std::string model = "llama-3.2-1b";  // a shape name (random weights) or a model path
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<int> contexts = {128, 512, 2048, 8192};
  std::vector<int> prompts = {128, 512, 2048, 8192};
  int warmup_steps = 8;
  int steps = 64;  // timed decode steps a point (every session decoding)
  int prefill_reps = 5;
  std::string json_path;  // JSON lines appended here when set
  std::uint64_t seed = 1;
};

// Runs the benchmark, printing progress and a table to `out`.
Status run_step_bench(const StepBenchOptions& options, std::FILE* out);

}  // namespace cellm::app
