// `cellm bench serve`: a synthetic load driven through the Runner the way the
// server drives it (a session per request, generate_async, callbacks), with
// seeded random prompts and no stop tokens so every run asks for the same work;
// reports throughput and TTFT/TPOT/ITL/E2E latency percentiles.
// Thread-safety: run_serve_bench drives the load from the calling thread (the
// runner's callbacks run on its engine thread); the helpers are pure.
#pragma once

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cellm/metrics.h"
#include "cellm/status.h"
#include "cellm/types.h"
#include "core/dtype.h"
#include "model/quantize.h"

namespace cellm::bench {

struct ServeBenchOptions {
  // A model path, or a shape name (model/shapes.h): random weights, on the GPU
  // or, with backend "cpu", on the CPU (small shapes only, in practice).
  std::string model = "llama-3.1-8b";
  std::string backend = "auto";  // "auto", "cpu" or "cuda"
  int requests = 1000;
  int input_len = 512;   // random tokens after the shared prefix
  int output_len = 256;  // every request generates exactly this many
  // Lengths are drawn uniformly from [L * (1 - r), L * (1 + r)]; 0 fixes them.
  double range_ratio = 0.0;
  int prefix_len = 0;        // random tokens shared by every prompt
  bool reuse_prefix = true;  // prefill the prefix once and clone it per request
  double request_rate = std::numeric_limits<double>::infinity();  // Poisson, requests/s
  int max_concurrency = 0;  // requests in flight at once; 0: no limit
  // Scheduler prefill chunk (tokens). Throughput-oriented, as a benchmark
  // of a loaded server is: on the H200 (8B, 256 in flight) 2048 gave
  // 9,044-9,344 output tok/s against 8,546 at 512, for a longer ITL tail
  // (p99 125-129 ms against 60 ms) as the prefill rides along fewer, wider
  // steps.
  int prefill_chunk = 0;     // prompt tokens a session prefills per step; 0: cellm serve's default
  int max_batch_tokens = 0;  // tokens per engine step; 0: decodes + 2 chunks
  int warmup_requests = 1;   // untimed requests of the same shape before the run
  float temperature = 0.0f;  // 0: greedy
  float top_p = 1.0f;        // 1: off (with temperature > 0)
  int top_k = 0;             // 0: off
  std::uint64_t seed = 1;
  double gpu_memory_fraction = 0.9;  // CUDA: device share for weights, workspace and KV
  bool keep_quantized = false;       // program::ProgramOptions::keep_quantized (`--keep-quantized`)
  double progress_s = 10.0;          // a progress line on stderr this often; 0: none
  std::string json_path;             // a JSON line is appended here when set
  // model::LoadOptions::quantize (`--quantize fp8`); model paths only.
  model::Quantize quantize = model::Quantize::kNone;
  // `--kv-dtype`, as `cellm serve` takes it (app::check_kv_dtype): bf16, or
  // fp8 on CUDA; the CPU keeps f32 K/V whatever is asked, and refuses fp8.
  DType kv_dtype = DType::kBF16;
};

// Checks every option alone and together; the message names the option and
// the accepted range.
Status validate(const ServeBenchOptions& options);

// Inclusive bounds of a length drawn with `range_ratio` (at least 1 token).
struct LengthRange {
  int lo = 0;
  int hi = 0;
};
LengthRange length_range(int length, double range_ratio);

// Request i's arrival, in seconds after the start: the running sum of
// exponential gaps of mean 1 / rate (a Poisson process). An infinite rate puts
// every arrival at 0.
std::vector<double> poisson_arrivals(int count, double rate, std::uint64_t seed);

// One synthetic request: its prompt (the shared prefix first) and how many
// tokens it must generate.
struct RequestSpec {
  std::vector<Token> prompt;
  int output_len = 0;
};
std::vector<RequestSpec> make_requests(const ServeBenchOptions& options, std::int32_t vocab_size);

// How the executor must be sized for a load: every session resident at once
// reserves `session_tokens` cells, plus the scratch cell.
struct PoolNeed {
  int sessions = 0;        // concurrent requests, plus the prefix snapshots
  int session_tokens = 0;  // the longest prompt plus the longest output
  std::int64_t cells = 0;
};
PoolNeed pool_need(const ServeBenchOptions& options);
// The prefill chunk a run asks for: --prefill-chunk, or cellm serve's default
// when it is 0 (the executor's widest step may still cap it).
int effective_prefill_chunk(const ServeBenchOptions& options);
// OutOfResources naming the options to lower when `need` does not fit a pool
// of `pool_cells` (scratch included) or the model's context.
Status check_pool(const ServeBenchOptions& options, const PoolNeed& need, std::int64_t pool_cells,
                  std::int64_t max_context);

// The p-th percentile (0..100) of ascending `sorted`, interpolating linearly
// between closest ranks (numpy's default). 0 for an empty set.
double percentile(const std::vector<double>& sorted, double p);

struct LatencySummary {
  std::size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;
};
LatencySummary summarize(std::vector<double> values);
// The Markdown latency table of both serve reports: its header, and one row
// (`--` where nothing was measured).
inline constexpr std::string_view kLatencyTableHeader =
    "\n| latency (ms) | mean | p50 | p90 | p99 |\n|---|---|---|---|---|\n";
std::string latency_row(std::string_view name, const LatencySummary& s);

struct ServeBenchReport {
  std::string model;
  std::string backend;  // "cpu" or "cuda"
  std::string device;   // GPU name or "cpu"
  std::string kernels;  // CUDA kernel variants (kernel_choice.h's describe); empty on the CPU
  int completed = 0;
  int failed = 0;
  std::string first_error;  // of the first failed request
  double duration_s = 0;
  std::int64_t input_tokens = 0;      // prompts of completed requests, prefix included
  std::int64_t output_tokens = 0;     // generated by completed requests
  std::int64_t prefilled_tokens = 0;  // what the runner actually prefilled for them
  double request_throughput = 0;      // completed requests / s
  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;  // (input + output) / s
  // Milliseconds. TTFT and E2E count from the moment a request is sent;
  // TPOT is per request (E2E - TTFT) / (output - 1); ITL pools every gap
  // between two deliveries of every request.
  LatencySummary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  // The timed run's share of the runner's counters (warm-up excluded).
  EngineMetrics engine;
};

// Runs the load and prints a table to `out`; the report is what it printed.
Result<ServeBenchReport> run_serve_bench(const ServeBenchOptions& options, std::FILE* out);

// One progress line of a run: requests finished out of `requests`, tokens
// and steps so far, with the mean step time by kind.
std::string progress_line(const EngineMetrics& engine, int requests);

// The table printed at the end of a run, and the JSON line of --json.
std::string format_report(const ServeBenchOptions& options, const ServeBenchReport& report);
nlohmann::json report_json(const ServeBenchOptions& options, const ServeBenchReport& report,
                           const std::string& commit);

}  // namespace cellm::bench
