// `cellm bench serve` over HTTP, like `vllm bench serve`: start cellm's server
// in-process (inprocess_server.h) or take --url of any OpenAI-compatible
// endpoint, send the synthetic load of the in-process mode as streaming
// /v1/completions requests (http_client.h), report throughput and TTFT,
// TPOT, ITL and E2E percentiles (http_report.h) as a table and a JSON line,
// and, unless told otherwise for an in-process server, run the same load
// through the Runner in-process afterwards so that the HTTP overhead is a
// measured ratio.
//
// Thread-safety: runs on the calling thread (its workers are its own).
#pragma once

#include <cstdio>

#include "bench/http_report.h"
#include "bench/load_plan.h"
#include "cellm/status.h"

namespace cellm::bench {

// Runs the whole benchmark, printing to `out` (progress goes to stderr).
Result<HttpBenchReport> run_http_serve_bench(const HttpBenchOptions& options, std::FILE* out);

}  // namespace cellm::bench
