// `cellm bench step`: decode and prefill timings of one model on this
// machine's GPU, with the device's own ceilings measured in the same run and
// every figure also given as a fraction of its roofline (decode: weight + KV
// bytes read over the copy bandwidth; prefill: FLOPs over the bf16 GEMM rate).
//
// Decode points place the context's cells in the cache without computing them
// (the KV bytes read per step are the same as after a real prefill), then time
// full engine steps: one packed forward through the CudaExecutor (CUDA graph
// for static widths), the device sampler and the one synchronisation.
//
// Thread-safety: runs on the calling thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cellm/status.h"

namespace cellm::bench {

struct StepBenchOptions {
  std::string model = "llama-3.2-1b";  // a shape name (random weights) or a model path
  std::vector<int> batches = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::vector<int> contexts = {128, 512, 2048, 8192};
  std::vector<int> prompts = {128, 512, 2048, 8192};
  int warmup_steps = 8;
  int steps = 64;  // one decode_greedy call (kDecodeGreedyMaxSteps) a chain
  int prefill_reps = 5;
  std::string json_path;  // JSON lines appended here when set
  std::uint64_t seed = 1;
};

// Runs the benchmark, printing progress and a table to `out`.
Status run_step_bench(const StepBenchOptions& options, std::FILE* out);

}  // namespace cellm::bench
