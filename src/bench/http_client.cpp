// Streaming completions over cpp-httplib's client, timed per text chunk.
#include "bench/http_client.h"

#include <algorithm>
#include <thread>

#include <httplib.h>

#include "bench/sse.h"

namespace cellm::bench {
namespace {

double ms_between(BenchClock::time_point a, BenchClock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::int64_t int_or(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : -1;
}

constexpr std::size_t kMaxErrorText = 400;

}  // namespace

StreamEvent interpret_event(std::string_view data) {
  StreamEvent e;
  if (data == "[DONE]") {
    e.kind = StreamEvent::Kind::kDone;
    return e;
  }
  nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    e.kind = StreamEvent::Kind::kMalformed;
    e.message = "an event that is not a JSON object: " +
                std::string(data.substr(0, std::min<std::size_t>(data.size(), 120)));
    return e;
  }
  if (const auto err = j.find("error"); err != j.end() && !err->is_null()) {
    e.kind = StreamEvent::Kind::kError;
    const auto msg = err->is_object() ? err->find("message") : err->end();
    e.message = msg != err->end() && msg->is_string() ? msg->get<std::string>() : err->dump();
    return e;
  }
  if (const auto choices = j.find("choices"); choices != j.end() && choices->is_array()) {
    for (const nlohmann::json& c : *choices) {
      if (!c.is_object()) continue;
      const auto text = c.find("text");
      if (text != c.end() && text->is_string() && !text->get_ref<const std::string&>().empty()) {
        e.has_text = true;
      }
      // A chat chunk carries its text in delta.content (or, for a model that
      // thinks aloud, delta.reasoning_content: tokens all the same).
      if (const auto delta = c.find("delta"); delta != c.end() && delta->is_object()) {
        for (const char* key : {"content", "reasoning_content"}) {
          const auto part = delta->find(key);
          if (part != delta->end() && part->is_string() &&
              !part->get_ref<const std::string&>().empty()) {
            e.has_text = true;
          }
        }
      }
      const auto fin = c.find("finish_reason");
      if (fin != c.end() && fin->is_string()) e.finish_reason = fin->get<std::string>();
    }
  }
  if (const auto usage = j.find("usage"); usage != j.end() && usage->is_object()) {
    e.prompt_tokens = int_or(*usage, "prompt_tokens");
    e.completion_tokens = int_or(*usage, "completion_tokens");
  }
  return e;
}

struct StreamingClient::Impl {
  Impl(const Endpoint& e, std::string key, double timeout_s)
      : endpoint(e), client(e.host, e.port), api_key(std::move(key)) {
    client.set_keep_alive(true);
    client.set_connection_timeout(std::chrono::seconds(10));
    const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::duration<double>(timeout_s));
    client.set_read_timeout(timeout);
    client.set_write_timeout(timeout);
    // A request goes out as two writes (headers, then the body): with
    // Nagle's algorithm the body waited for the server's delayed
    // acknowledgement, 40 ms of TTFT on loopback (curl sets it by default).
    client.set_tcp_nodelay(true);
  }
  httplib::Headers headers() const {
    httplib::Headers h;
    if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
    return h;
  }

  Endpoint endpoint;
  httplib::Client client;
  std::string api_key;
};

StreamingClient::StreamingClient(const Endpoint& endpoint, std::string api_key, double timeout_s)
    : impl_(std::make_unique<Impl>(endpoint, std::move(api_key), timeout_s)) {}
StreamingClient::~StreamingClient() = default;

RequestRecord StreamingClient::stream_completion(const std::string& route, const std::string& body,
                                                 BenchClock::time_point start,
                                                 std::int64_t expected_tokens) {
  RequestRecord rec;
  rec.itl_ms.reserve(static_cast<std::size_t>(std::max<std::int64_t>(expected_tokens, 0)) + 8);
  SseParser parser;
  int status = 0;
  std::string error_body;
  bool done = false;
  BenchClock::time_point last_text{};

  httplib::Request req;
  req.method = "POST";
  req.path = impl_->endpoint.v1 + "/" + route;
  req.headers = impl_->headers();
  req.headers.emplace("Accept", "text/event-stream");
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&status](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  const BenchClock::time_point sent = BenchClock::now();
  rec.sent_s = std::chrono::duration<double>(sent - start).count();
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    if (status != 200) {
      if (error_body.size() < kMaxErrorText) error_body.append(data, n);
      return true;
    }
    // One clock read per read from the socket: the events it holds arrived together.
    const BenchClock::time_point now = BenchClock::now();
    return parser.feed(std::string_view(data, n), [&](std::string_view event) {
      const StreamEvent e = interpret_event(event);
      switch (e.kind) {
        case StreamEvent::Kind::kDone: done = true; return true;
        case StreamEvent::Kind::kError:
        case StreamEvent::Kind::kMalformed:
          if (rec.error.empty()) rec.error = e.message;
          return true;
        case StreamEvent::Kind::kChunk: break;
      }
      if (e.has_text) {
        if (rec.text_chunks == 0) {
          rec.ttft_ms = ms_between(sent, now);
        } else {
          rec.itl_ms.push_back(static_cast<float>(ms_between(last_text, now)));
        }
        last_text = now;
        ++rec.text_chunks;
      }
      if (!e.finish_reason.empty()) rec.finish_reason = e.finish_reason;
      if (e.completion_tokens >= 0) rec.completion_tokens = e.completion_tokens;
      if (e.prompt_tokens >= 0) rec.prompt_tokens = e.prompt_tokens;
      return true;
    });
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent_ok = impl_->client.send(req, res, err);
  rec.e2e_ms = ms_between(sent, BenchClock::now());
  if (!sent_ok) {
    rec.error = parser.failed() ? parser.error()
                                : std::string("the request failed: ") + httplib::to_string(err);
    return rec;
  }
  if (status != 200) {
    rec.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, kMaxErrorText);
    return rec;
  }
  if (!parser.finish()) {
    if (rec.error.empty()) rec.error = "the event stream ended inside an event";
  }
  if (rec.error.empty() && !done) rec.error = "the event stream ended without [DONE]";
  if (rec.error.empty() && rec.text_chunks == 0) rec.error = "no text came back";
  rec.ok = rec.error.empty();
  return rec;
}

Result<nlohmann::json> StreamingClient::get_json(const std::string& path) {
  const std::string full = impl_->endpoint.v1 + "/" + path;
  httplib::Result r = impl_->client.Get(full, impl_->headers());
  if (!r) {
    return unavailable("GET {}{}: {}", impl_->endpoint.scheme_host_port, full,
                       httplib::to_string(r.error()));
  }
  if (r->status != 200) {
    return unavailable("GET {}{}: HTTP {}: {}", impl_->endpoint.scheme_host_port, full, r->status,
                       r->body.substr(0, kMaxErrorText));
  }
  nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_discarded()) {
    return data_loss("GET {}{}: the answer is not JSON", impl_->endpoint.scheme_host_port, full);
  }
  return j;
}

Result<std::string> StreamingClient::get_text(const std::string& path) {
  httplib::Result r = impl_->client.Get(path, impl_->headers());
  if (!r) {
    return unavailable("GET {}{}: {}", impl_->endpoint.scheme_host_port, path,
                       httplib::to_string(r.error()));
  }
  if (r->status != 200) {
    return unavailable("GET {}{}: HTTP {}: {}", impl_->endpoint.scheme_host_port, path, r->status,
                       r->body.substr(0, kMaxErrorText));
  }
  return r->body;
}

std::vector<RequestRecord> run_http_load(const Endpoint& endpoint, const std::string& api_key,
                                         double timeout_s,
                                         const std::vector<HttpRequestSpec>& requests,
                                         const std::vector<double>& arrivals, int concurrency,
                                         LoadProgress& progress,
                                         BenchClock::time_point* start_out) {
  const std::size_t n = requests.size();
  std::vector<RequestRecord> records(n);
  std::atomic<std::size_t> next{0};
  const std::size_t workers =
      std::min<std::size_t>(n, concurrency > 0 ? static_cast<std::size_t>(concurrency) : n);
  const BenchClock::time_point start = BenchClock::now();
  if (start_out != nullptr) *start_out = start;
  std::vector<std::thread> threads;
  threads.reserve(workers);
  for (std::size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      StreamingClient client(endpoint, api_key, timeout_s);
      for (;;) {
        const std::size_t i = next.fetch_add(1);
        if (i >= n) return;
        std::this_thread::sleep_until(start + std::chrono::duration_cast<BenchClock::duration>(
                                                  std::chrono::duration<double>(arrivals[i])));
        const HttpRequestSpec& q = requests[i];
        records[i] = client.stream_completion(q.route, q.body, start, q.expected_tokens);
        progress.text_chunks.fetch_add(records[i].text_chunks, std::memory_order_relaxed);
        if (!records[i].ok) progress.failed.fetch_add(1, std::memory_order_relaxed);
        progress.done.fetch_add(1, std::memory_order_release);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return records;
}

}  // namespace cellm::bench
