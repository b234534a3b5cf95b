// Generation and engine metrics: raw counters the runner records plus the
// derived rates and means computed from them, and plain-text reports.
//
// Thread-safety: plain values. The runner hands out copies; a copy may be read
// on any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>

#include "cellm/types.h"

namespace cellm {

using MetricsClock = std::chrono::steady_clock;

// One generation (one generate_async call). Time points left default mean the
// event did not happen.
struct GenerationMetrics {
  SessionId sid = 0;
  MetricsClock::time_point t_submit;       // caller thread, before queueing
  MetricsClock::time_point t_first_step;   // first batch that carried its work
  MetricsClock::time_point t_first_token;  // first delivered token
  MetricsClock::time_point t_end;          // terminal update

  std::int64_t n_prompt_tokens = 0;     // the caller's delta only
  std::int64_t n_prefilled_tokens = 0;  // executed initial input, carried token included
  std::int64_t n_generated_tokens = 0;
  std::int64_t n_prefill_steps = 0;  // steps, not chunks
  std::int64_t n_decode_steps = 0;
  // Speculative decoding: draft tokens verified and kept (0 when it is off).
  std::int64_t n_draft_tokens = 0;
  std::int64_t n_accepted_draft_tokens = 0;

  // Inter-token latency summary. A burst of k tokens counts k samples: within
  // the first burst they are zero-latency; a later burst's samples share the
  // single gap since the previous delivery.
  std::int64_t itl_count = 0;
  std::int64_t itl_sum_us = 0;
  std::int64_t itl_min_us = std::numeric_limits<std::int64_t>::max();
  std::int64_t itl_max_us = 0;

  std::int64_t ttft_us() const;          // submit -> first token
  std::int64_t queue_wait_us() const;    // submit -> first step
  std::int64_t prefill_span_us() const;  // first step -> first token
  std::int64_t decode_span_us() const;   // first token -> end
  std::int64_t e2e_us() const;           // submit -> end
  double itl_mean_us() const;
  std::int64_t min_itl_us() const;  // 0 when there are no samples
  // Tokens per second over the ITL samples; infinite when every sample was
  // zero-latency.
  double decode_tokens_per_sec() const;
  double prefill_tokens_per_sec() const;  // prompt tokens over the prefill span
};

// One runner. Token totals count only batches that executed successfully;
// latencies count every batch.
struct EngineMetrics {
  std::int64_t steps = 0;
  std::int64_t steps_failed = 0;
  std::int64_t decode_sessions_total = 0;   // per step, sessions with a decode
  std::int64_t prefill_sessions_total = 0;  // per step, sessions with prefill
  std::int64_t ready_total = 0;             // per step, live generations past their first token
  std::int64_t step_latency_sum_us = 0;     // execute() only
  std::int64_t step_latency_max_us = 0;
  std::int64_t decode_tokens_total = 0;
  std::int64_t prefill_tokens_total = 0;
  std::int64_t decode_only_tokens = 0;  // decode tokens of steps without prefill
  std::int64_t steps_with_decode = 0;
  std::int64_t steps_with_prefill = 0;
  // These three partition step_latency_sum_us.
  std::int64_t decode_only_latency_sum_us = 0;
  std::int64_t mixed_latency_sum_us = 0;
  std::int64_t prefill_only_latency_sum_us = 0;
  // Per step, the sum over its sessions of the end of the furthest slice.
  std::int64_t context_sum = 0;
  std::int64_t context_max = 0;                 // the largest single-step sum
  std::int64_t decode_session_time_sum_us = 0;  // step latency x decode sessions
  std::int64_t sessions_refused = 0;
  std::int64_t peak_concurrent_generations = 0;
  std::int64_t generations_started = 0;  // on arrival at the engine
  std::int64_t generations_completed = 0;
  std::int64_t finished_stop_token = 0;
  std::int64_t finished_stop_string = 0;
  std::int64_t finished_token_limit = 0;
  std::int64_t finished_cancelled = 0;
  std::int64_t finished_failed = 0;
  // Only generations that delivered a token.
  std::int64_t ttft_count = 0;
  std::int64_t ttft_sum_us = 0;
  std::int64_t ttft_min_us = std::numeric_limits<std::int64_t>::max();
  std::int64_t ttft_max_us = 0;
  std::int64_t total_prompt_tokens = 0;
  std::int64_t total_generated_tokens = 0;
  MetricsClock::time_point t_first_step;  // start of the first step
  MetricsClock::time_point t_last_step;   // end of the last step
  std::int64_t init_us = 0;               // Executor::initialize, outside the wall window

  std::int64_t wall_us() const;
  double mean_admitted_decode_sessions() const;  // per step
  double mean_ready_decode_sessions() const;     // per step
  double mean_decode_step_sessions() const;      // per step that had decodes
  double mean_step_sessions() const;
  double admitted_ratio() const;  // decodes admitted / generations ready
  std::int64_t model_input_tokens() const;
  std::int64_t total_tokens() const;  // prompt + generated, as callers see them
  double mean_step_tokens() const;
  double idle_fraction() const;  // share of the wall not spent in execute()
  double generated_tokens_per_sec() const;
  double model_input_tokens_per_sec() const;
  std::int64_t mixed_steps() const;
  std::int64_t decode_only_steps() const;
  std::int64_t prefill_only_steps() const;
  double mean_ttft_us() const;
  std::int64_t min_ttft_us() const;  // 0 when no generation delivered a token
  double mean_decode_us_per_token() const;
  double mean_decode_only_step_us() const;
  double mean_mixed_step_us() const;
  double mean_prefill_only_step_us() const;
  // Decode tokens over the time of decode-only steps: the one decode rate that
  // is comparable across engines (prefill work does not dilute it).
  double decode_only_tokens_per_sec() const;
  double mean_context_per_step() const;
};

// Multi-line human-readable reports; empty quantities print "--".
std::string format_report(const GenerationMetrics& m);
std::string format_report(const EngineMetrics& m);

}  // namespace cellm
