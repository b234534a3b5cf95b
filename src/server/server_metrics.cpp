#include "server/server_metrics.h"

#include <algorithm>

#include <fmt/format.h>

namespace cellm::server {
namespace {

void header(std::string* out, const char* name, const char* type, const char* help) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void scalar(std::string* out, const char* name, const char* type, const char* help, double value) {
  header(out, name, type, help);
  fmt::format_to(std::back_inserter(*out), "{} {}\n", name, value);
}

}  // namespace

const char* endpoint_label(Endpoint e) {
  switch (e) {
    case Endpoint::kCompletions: return "completions";
    case Endpoint::kChat: return "chat_completions";
  }
  return "unknown";
}

const char* outcome_label(Outcome o) {
  switch (o) {
    case Outcome::kOk: return "ok";
    case Outcome::kInvalid: return "invalid";
    case Outcome::kQueueFull: return "queue_full";
    case Outcome::kUnavailable: return "unavailable";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kFailed: return "failed";
  }
  return "unknown";
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  buckets_[static_cast<std::size_t>(it - bounds_.begin())] += 1;
  sum_ += value;
  count_ += 1;
}

void Histogram::render(const std::string& name, std::string* out) const {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += buckets_[i];
    fmt::format_to(std::back_inserter(*out), "{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i],
                   cumulative);
  }
  cumulative += buckets_.back();
  fmt::format_to(std::back_inserter(*out), "{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n",
                 name, cumulative, name, sum_, name, count_);
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
             10.0, 20.0, 40.0, 80.0}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
            1.0, 2.5, 5.0, 10.0}),
      e2e_({0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,
            5.0,  10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0}) {}

void ServerMetrics::record_request(Endpoint endpoint, Outcome outcome) {
  std::lock_guard lock(mu_);
  requests_[static_cast<int>(endpoint)][static_cast<int>(outcome)] += 1;
}

void ServerMetrics::observe_ttft(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
}

void ServerMetrics::observe_itl(double seconds) {
  std::lock_guard lock(mu_);
  itl_.observe(seconds);
}

void ServerMetrics::observe_e2e(double seconds) {
  std::lock_guard lock(mu_);
  e2e_.observe(seconds);
}

void ServerMetrics::add_tokens(std::int64_t prompt, std::int64_t generated) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void ServerMetrics::record_prefix_lookup(std::int64_t cached_tokens) {
  std::lock_guard lock(mu_);
  prefix_queries_ += 1;
  if (cached_tokens > 0) {
    prefix_hits_ += 1;
    prefix_hit_tokens_ += cached_tokens;
  }
}

std::string ServerMetrics::render(const Gauges& g) const {
  std::string out;
  std::lock_guard lock(mu_);
  header(&out, "cellm:requests_total", "counter",
         "Generation requests by endpoint and outcome (ok, invalid, queue_full, unavailable, "
         "cancelled, failed).");
  for (int e = 0; e < kEndpointCount; ++e) {
    for (int o = 0; o < kOutcomeCount; ++o) {
      fmt::format_to(std::back_inserter(out),
                     "cellm:requests_total{{endpoint=\"{}\",outcome=\"{}\"}} {}\n",
                     endpoint_label(static_cast<Endpoint>(e)),
                     outcome_label(static_cast<Outcome>(o)), requests_[e][o]);
    }
  }
  header(&out, "cellm:time_to_first_token_seconds", "histogram",
         "Time from the request's arrival to its first generated token.");
  ttft_.render("cellm:time_to_first_token_seconds", &out);
  header(&out, "cellm:inter_token_latency_seconds", "histogram",
         "Time between successive token deliveries of one choice.");
  itl_.render("cellm:inter_token_latency_seconds", &out);
  header(&out, "cellm:e2e_request_latency_seconds", "histogram",
         "Time from a generation request's arrival to its last byte.");
  e2e_.render("cellm:e2e_request_latency_seconds", &out);
  scalar(&out, "cellm:prompt_tokens_total", "counter", "Prompt tokens of started generations.",
         static_cast<double>(prompt_tokens_));
  scalar(&out, "cellm:generation_tokens_total", "counter",
         "Generated tokens reported to clients (usage.completion_tokens).",
         static_cast<double>(generated_tokens_));
  scalar(&out, "cellm:prefix_cache_queries_total", "counter", "Prefix-cache lookups.",
         static_cast<double>(prefix_queries_));
  scalar(&out, "cellm:prefix_cache_hits_total", "counter",
         "Prefix-cache lookups that reused cached prompt tokens.",
         static_cast<double>(prefix_hits_));
  scalar(&out, "cellm:prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens served from the prefix cache.", static_cast<double>(prefix_hit_tokens_));
  scalar(&out, "cellm:num_requests_running", "gauge", "Requests generating now.",
         static_cast<double>(g.running_requests));
  scalar(&out, "cellm:num_requests_waiting", "gauge", "Requests queued for capacity.",
         static_cast<double>(g.waiting_requests));
  scalar(&out, "cellm:num_sequences_running", "gauge", "Sequences (choices) generating now.",
         static_cast<double>(g.running_sequences));
  if (g.kv_cells_used >= 0) {
    scalar(&out, "cellm:kv_cells_used", "gauge", "KV cells holding tokens.",
           static_cast<double>(g.kv_cells_used));
  }
  if (g.kv_cells_total >= 0) {
    scalar(&out, "cellm:kv_cells_total", "gauge", "KV cells in the pool.",
           static_cast<double>(g.kv_cells_total));
  }
  if (g.snapshot_sessions >= 0) {
    scalar(&out, "cellm:prefix_snapshot_sessions", "gauge",
           "Sessions held by prefix-cache snapshots (not counted as running sequences).",
           static_cast<double>(g.snapshot_sessions));
  }
  if (g.spec_draft_tokens >= 0) {
    scalar(&out, "cellm:spec_decode_num_draft_tokens_total", "counter",
           "Draft tokens speculative decoding verified.", static_cast<double>(g.spec_draft_tokens));
    scalar(&out, "cellm:spec_decode_num_accepted_tokens_total", "counter",
           "Draft tokens the model agreed with and kept.",
           static_cast<double>(g.spec_accepted_tokens));
  }
  scalar(&out, "cellm:model_ready", "gauge", "1 once the model is loaded.", g.ready ? 1.0 : 0.0);
  return out;
}

}  // namespace cellm::server
