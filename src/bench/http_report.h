// Figures of `cellm bench serve` over HTTP, from the client's records: the
// same names and conventions as the in-process report (bench_serve.h), plus
// what only a client sees (text chunks) and what a plot needs (quantiles of
// every latency, output tokens over time).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_serve.h"
#include "bench/http_client.h"
#include "bench/load_plan.h"

namespace cellm::bench {

struct HttpBenchReport {
  std::string target;   // "in-process" or the URL
  std::string model;    // the served model's name
  std::string backend;  // "cpu", "cuda", or "remote"
  std::string device;   // GPU name, "cpu", or "unknown" for a URL
  int completed = 0;
  int failed = 0;
  std::string first_error;
  // Completed requests whose completion_tokens differ from the output
  // length asked for (a server that stopped at EOS despite ignore_eos).
  // Counted only when every request must run to its length (ignore_eos).
  int length_mismatches = 0;
  // Completed requests that came back without usage (their output tokens
  // are then the text chunks counted, which may merge tokens).
  int usage_missing = 0;
  double duration_s = 0;           // first request sent to the last stream's end
  std::int64_t input_tokens = 0;   // usage.prompt_tokens (the sent ids when no usage)
  std::int64_t output_tokens = 0;  // usage.completion_tokens (text chunks when no usage)
  double request_throughput = 0;
  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;
  // Milliseconds, as vLLM's client counts them: TTFT to the first text chunk,
  // TPOT per request (E2E - TTFT) / (output tokens - 1), ITL every gap
  // between two text chunks of a request, E2E to the stream's end.
  LatencySummary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  // Quantiles 0, 1, ..., 100 of each latency (empty when none), for CDFs.
  std::vector<double> ttft_q, tpot_q, itl_q, e2e_q;
  // Output tokens finished per bin of `timeline_bin_s` seconds from the start
  // (a request's tokens are spread over its chunks' times).
  double timeline_bin_s = 0;
  std::vector<double> output_tps_timeline;
  // Speculative decoding during the timed run, from the server's /metrics
  // counters read before and after it; nullopt when the server exposes none
  // (speculation off, or a server without them).
  struct Speculation {
    std::int64_t proposed = 0;  // draft tokens verified
    std::int64_t accepted = 0;  // of them, kept
    double acceptance() const {
      return proposed > 0 ? static_cast<double>(accepted) / static_cast<double>(proposed) : 0.0;
    }
  };
  std::optional<Speculation> speculation;
  // The in-process Runner under the same load, when it ran.
  std::optional<ServeBenchReport> inprocess;
};

// Folds the records of a run into the report's figures. `exact_lengths`:
// every request had to produce its output_len (ignore_eos), so any other
// count is a mismatch; without it a request may end at EOS.
void tally_http(const std::vector<RequestSpec>& requests, const std::vector<RequestRecord>& records,
                HttpBenchReport& report, bool exact_lengths = true);

// The speculative-decoding counters of a Prometheus text page: the sums of
// the samples of every metric named *spec_decode_num_draft_tokens_total and
// *spec_decode_num_accepted_tokens_total (cellm's "cellm:" and vLLM's
// "vllm:" both match). nullopt when the page has neither.
std::optional<HttpBenchReport::Speculation> parse_spec_counters(std::string_view metrics_text);

// Quantiles 0..100 of `values` (sorted inside).
std::vector<double> quantiles(std::vector<double> values);

std::string format_http_report(const HttpBenchOptions& options, const HttpBenchReport& report);
nlohmann::json http_report_json(const HttpBenchOptions& options, const HttpBenchReport& report,
                                const std::string& commit);

}  // namespace cellm::bench
