// Server-side metrics in the Prometheus text format (names prefixed
// "cellm:"): requests by endpoint and outcome, latency histograms (time to
// first token, inter-token latency, end to end), token counters and
// prefix-cache hits. Gauges that live elsewhere (running and waiting
// requests, KV cells) are passed to render().
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace cellm::server {

enum class Endpoint : std::uint8_t { kCompletions, kChat };
enum class Outcome : std::uint8_t { kOk, kInvalid, kQueueFull, kUnavailable, kCancelled, kFailed };
inline constexpr int kEndpointCount = 2;
inline constexpr int kOutcomeCount = 6;

const char* endpoint_label(Endpoint e);
const char* outcome_label(Outcome o);

// A cumulative histogram over fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends the _bucket/_sum/_count lines of `name`.
  void render(const std::string& name, std::string* out) const;
  std::uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> buckets_;  // non-cumulative; the last is +Inf
  double sum_ = 0.0;
  std::uint64_t count_ = 0;
};

struct Gauges {
  std::int64_t running_requests = 0;
  std::int64_t waiting_requests = 0;
  std::int64_t running_sequences = 0;
  std::int64_t kv_cells_used = -1;  // -1: not reported
  std::int64_t kv_cells_total = -1;
  std::int64_t snapshot_sessions = -1;  // -1: not reported
  std::int64_t spec_draft_tokens = -1;     // -1: speculation off
  std::int64_t spec_accepted_tokens = -1;
  bool ready = false;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void record_request(Endpoint endpoint, Outcome outcome);
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_e2e(double seconds);
  void add_tokens(std::int64_t prompt, std::int64_t generated);
  // One prefix-cache lookup; cached_tokens > 0 is a hit.
  void record_prefix_lookup(std::int64_t cached_tokens);

  std::string render(const Gauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::array<std::array<std::uint64_t, kOutcomeCount>, kEndpointCount> requests_{};
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  std::int64_t prompt_tokens_ = 0;
  std::int64_t generated_tokens_ = 0;
  std::int64_t prefix_queries_ = 0;
  std::int64_t prefix_hits_ = 0;
  std::int64_t prefix_hit_tokens_ = 0;
};

}  // namespace cellm::server
