// `cellm bench step`: decode and prefill timings of one model on this
// machine's GPU, with the device's own ceilings measured in the same run and
// every figure also given as a fraction of its roofline (decode: weight + KV
// bytes read over the copy bandwidth; prefill: FLOPs over the bf16 GEMM rate).
//
// Decode points are the served step: `batch` sessions generate through a
// Runner over a DecodeFirstScheduler and the CudaExecutor, as `cellm serve`
// runs them (executor.execute, the device sampler, the callbacks), with a
// fixed length and no stop token. The sessions are prefilled through the
// runner up to each context in turn; only steps in which every session
// decodes are timed, from the Runner's own deliveries. Greedy, then seeded
// sampling at temperature 1 (StepBenchOptions::sampling picks). Prefill
// points time one forward of the prompt through execute_raw.
//
// Thread-safety: runs on the calling thread (the Runner has its own engine
// thread, where the deliveries are stamped).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cellm/runner.h"
#include "cellm/status.h"
#include "cellm/types.h"
#include "core/dtype.h"
#include "model/quantize.h"

namespace cellm::bench {

struct StepBenchOptions {
  std::string model = "llama-3.2-1b";  // a shape name (random weights) or a model path
  bool keep_quantized = false;         // ProgramOptions::keep_quantized (`--keep-quantized`)
  // `--quantize fp8`: model::LoadOptions::quantize for a model path.
  model::Quantize quantize = model::Quantize::kNone;
  // `--kv-dtype`: ProgramOptions::kv_dtype (kBF16 or kF8E4M3, CUDA only).
  DType kv_dtype = DType::kBF16;
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
  // "auto" (CUDA when built and a device is visible, else the CPU), "cpu" or
  // "cuda". The CPU path is bench_step_cpu.cpp.
  std::string backend = "auto";
  std::string cpu_program;  // "fast" / "reference"; empty: fast
  int threads = 0;          // CPU threads; 0: every core
  // Which of batches / contexts / prompts the command line gave: the CPU
  // replaces the others' GPU sweep with llama-bench's tg64 / pp128 points
  // (batch 1, a one-token context, a 128-token prompt).
  bool batches_given = false, contexts_given = false, prompts_given = false;
  // Speculative verification points (bench_verify.h): drafts per session, 1..16.
  std::vector<int> verify_drafts;
  // Decode points with speculative decoding on ("ngram"; empty: off), as
  // `cellm serve --speculate ngram` runs it: the guard that speculation costs
  // nothing where it cannot help (CUDA).
  std::string speculate;
};

// Decode points as `cellm serve` runs them (see above), on any runner: one
// set of sessions, prefilled to each context in turn, timed at each.
struct ServedDecode {
  // Plain decoding: one step, which delivers a token to every session.
  // Speculative: the time per token a session receives (what a plain step
  // costs it), however many tokens each step accepted.
  double ms_per_step = 0;
  int steps = 0;               // engine steps timed
  double tokens_per_step = 1;  // a session's tokens per timed step (1 without speculation)
  double mean_keys = 0;        // keys a session attends, averaged over the timed tokens
};
class ServedDecodeBench {
 public:
  // Opens `batch` sessions on `runner`, which must outlive this object; its
  // executor must hold them and its scheduler decode them all in one step.
  // `speculative`: the executor speculates, so a step may deliver several
  // tokens to a session (time() then reports the time per token).
  static Result<ServedDecodeBench> open(Runner& runner, int batch, std::int64_t vocab,
                                        std::uint64_t seed, bool speculative = false);
  // Prefills every session with random tokens up to `context` tokens (from
  // where it is; nothing when it already holds that many).
  Status prefill_to(int context);
  // All sessions generate warmup + steps + 1 tokens from one new token each,
  // with `sampling` (seeded), started in one step; times the last `steps`.
  // An error when any timed step lacks a session's token.
  Result<ServedDecode> time(const SamplingParams& sampling, int warmup_steps, int steps);
  // Tokens each session holds (the pending one included).
  int context() const { return held_; }
  // Tokens one time() call adds to each session.
  static int tokens_per_time(int warmup_steps, int steps) {
    return std::max(1, warmup_steps) + steps + 4;
  }

 private:
  ServedDecodeBench(Runner& runner, std::int64_t vocab, std::uint64_t seed, bool speculative)
      : runner_(&runner), vocab_(vocab), seed_(seed), speculative_(speculative) {}
  Token draw();  // the next random id of the vocabulary
  Runner* runner_;
  std::int64_t vocab_;
  std::uint64_t seed_;
  bool speculative_;
  std::uint64_t draws_ = 0;  // random ids drawn so far (the next one's index)
  std::vector<Session> sessions_;
  int held_ = 0;
};

// Runs the benchmark, printing progress and a table to `out`.
Status run_step_bench(const StepBenchOptions& options, std::FILE* out);
// The CPU form (options.backend "cpu"): tokens/s and the copy-bandwidth fraction.
Status run_cpu_step_bench(const StepBenchOptions& options, std::FILE* out);

}  // namespace cellm::bench
