// The client side of `cellm bench serve` over HTTP: one keep-alive connection
// that sends streaming /v1/completions (or /v1/chat/completions) requests and
// times what comes back
// (first text, each later text chunk, the end), and a load driver that runs
// up to `concurrency` such connections, each on its own thread, releasing
// request i no earlier than its arrival time.
//
// Thread-safety: a StreamingClient belongs to one thread. run_http_load
// starts and joins its own workers; `on_done` is called from them (it must be
// thread-safe) and the records are read only after it returns.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/load_plan.h"
#include "cellm/status.h"

namespace cellm::bench {

using BenchClock = std::chrono::steady_clock;

// What one request gave.
struct RequestRecord {
  bool ok = false;
  std::string error;          // why it failed (HTTP status, an error event, a cut stream)
  double sent_s = 0;          // when it was sent, after the run's start
  double ttft_ms = -1;        // first non-empty text; -1: none came
  double e2e_ms = 0;          // sent to the stream's end
  std::vector<float> itl_ms;  // gaps between text chunks after the first
  std::int64_t text_chunks = 0;
  std::int64_t prompt_tokens = -1;      // from usage; -1: the server sent none
  std::int64_t completion_tokens = -1;  // from usage; -1: the server sent none
  std::string finish_reason;
};

// Interprets one event's data of a streaming completion. Pure, for tests.
struct StreamEvent {
  enum class Kind : std::uint8_t { kChunk, kDone, kError, kMalformed };
  Kind kind = Kind::kChunk;
  bool has_text = false;  // a choice carried non-empty text (or a chat delta's content)
  std::string finish_reason;
  std::int64_t prompt_tokens = -1;
  std::int64_t completion_tokens = -1;
  std::string message;  // kError / kMalformed
};
StreamEvent interpret_event(std::string_view data);

class StreamingClient {
 public:
  StreamingClient(const Endpoint& endpoint, std::string api_key, double timeout_s);
  ~StreamingClient();
  StreamingClient(const StreamingClient&) = delete;
  StreamingClient& operator=(const StreamingClient&) = delete;

  // POSTs `body` to {v1}/{route} ("completions" or "chat/completions") and
  // reads the event stream to its end. `start` is the run's start (for
  // sent_s); `expected_tokens` sizes the gap buffer up front so that no token
  // allocates.
  RequestRecord stream_completion(const std::string& route, const std::string& body,
                                  BenchClock::time_point start, std::int64_t expected_tokens);
  // GET {v1}/{path}, parsed.
  Result<nlohmann::json> get_json(const std::string& path);
  // GET `path` from the server's root (e.g. "/metrics"), as text.
  Result<std::string> get_text(const std::string& path);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Live counters of a load, for the progress display (any thread).
struct LoadProgress {
  std::atomic<std::int64_t> done{0};
  std::atomic<std::int64_t> failed{0};
  std::atomic<std::int64_t> text_chunks{0};
};

// One request of a load: where it goes under {v1}/, its JSON body, and the
// tokens it should bring back (a buffer size, not a check).
struct HttpRequestSpec {
  std::string route = "completions";
  std::string body;
  std::int64_t expected_tokens = 0;
};

// Sends requests[i] no earlier than start + arrivals[i] seconds, at most
// `concurrency` at once, one worker thread and connection per slot.
// Returns the records in request order; `start` receives the run's start.
std::vector<RequestRecord> run_http_load(const Endpoint& endpoint, const std::string& api_key,
                                         double timeout_s,
                                         const std::vector<HttpRequestSpec>& requests,
                                         const std::vector<double>& arrivals, int concurrency,
                                         LoadProgress& progress, BenchClock::time_point* start);

}  // namespace cellm::bench
