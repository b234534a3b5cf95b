// The HTTP mode's driver: target, warm-up, timed load with progress, report,
// in-process comparison, JSON line and plot.
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <spawn.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include "bench/http_client.h"
#include "bench/http_serve.h"
#include "bench/inprocess_server.h"
#include "core/env.h"

extern char** environ;

namespace cellm::bench {
namespace {

// A vocabulary every common model has, for token ids sent to a --url peer
// whose vocabulary nobody gave.
constexpr std::int32_t kSafeVocab = 32000;

// Draws the progress on stderr until `stop`: a bar on a terminal, a line
// every `every_s` seconds otherwise (0: nothing).
class ProgressDisplay {
 public:
  ProgressDisplay(LoadProgress& p, std::int64_t total, ProgressMode mode, double every_s)
      : p_(p), total_(total) {
    bar_ = mode == ProgressMode::kBar || (mode == ProgressMode::kAuto && ::isatty(2) == 1);
    if (mode == ProgressMode::kOff || (!bar_ && !(every_s > 0))) return;
    period_ = bar_ ? std::chrono::milliseconds(200)
                   : std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::duration<double>(every_s));
    thread_ = std::thread([this] { loop(); });
  }
  ~ProgressDisplay() { stop(); }
  void stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void draw(bool last) {
    const std::int64_t done = p_.done.load();
    const double secs = std::chrono::duration<double>(BenchClock::now() - t0_).count();
    const double rate = secs > 0 ? static_cast<double>(p_.text_chunks.load()) / secs : 0.0;
    if (bar_) {
      constexpr int kWidth = 30;
      const int filled = total_ > 0 ? static_cast<int>(kWidth * done / total_) : kWidth;
      std::fprintf(stderr, "\r[%s%s] %lld/%lld requests, %lld failed, %.0f chunks/s, %.0f s%s",
                   std::string(static_cast<std::size_t>(filled), '#').c_str(),
                   std::string(static_cast<std::size_t>(kWidth - filled), '.').c_str(),
                   static_cast<long long>(done), static_cast<long long>(total_),
                   static_cast<long long>(p_.failed.load()), rate, secs, last ? "\n" : "");
    } else if (!last) {
      std::fprintf(stderr,
                   "bench serve: %.0f s: %lld/%lld requests done, %lld failed, %.0f chunks/s\n",
                   secs, static_cast<long long>(done), static_cast<long long>(total_),
                   static_cast<long long>(p_.failed.load()), rate);
    }
    std::fflush(stderr);
  }
  void loop() {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, period_, [this] { return stopped_; })) draw(false);
    if (bar_) draw(true);
  }

  LoadProgress& p_;
  std::int64_t total_;
  bool bar_ = false;
  BenchClock::time_point t0_ = BenchClock::now();
  std::chrono::milliseconds period_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::thread thread_;
};

struct Target {
  Endpoint endpoint;
  std::string model;
  std::int32_t vocab = kSafeVocab;
};

Result<std::string> first_model_id(const Endpoint& e, const std::string& key) {
  StreamingClient client(e, key, 30);
  CELLM_ASSIGN_OR_RETURN(nlohmann::json models, client.get_json("models"));
  const auto data = models.find("data");
  if (data == models.end() || !data->is_array() || data->empty() || !(*data)[0].is_object() ||
      !(*data)[0].contains("id") || !(*data)[0]["id"].is_string()) {
    return data_loss("GET {}{}/models lists no model: give --served-model-name", e.scheme_host_port,
                     e.v1);
  }
  return (*data)[0]["id"].get<std::string>();
}

struct Load {
  std::vector<HttpRequestSpec> requests;
  std::vector<RequestSpec> specs;  // what tally_http compares the records with
};

Load bodies_of(const HttpBenchOptions& o, const std::string& model,
               const std::vector<RequestSpec>& requests) {
  Load l;
  l.requests.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    l.requests.push_back({"completions", completion_body(o, model, requests[i], o.load.seed + i),
                          requests[i].output_len});
  }
  l.specs = requests;
  return l;
}

// The first `count` requests of the dataset, cycled; `max_tokens` > 0 caps
// each one's output (the warm-up's few tokens).
Load dataset_load(const HttpBenchOptions& o, const std::string& model, int count,
                  std::uint64_t seed, int max_tokens) {
  Load l;
  const std::vector<DatasetRequest> picked = cycle_requests(o.dataset, count);
  for (std::size_t i = 0; i < picked.size(); ++i) {
    const DatasetRequest& d = picked[i];
    const int out = max_tokens > 0 ? std::min(max_tokens, d.max_tokens) : d.max_tokens;
    l.requests.push_back({dataset_route(d), dataset_body(o, model, d, seed + i, out), out});
    RequestSpec spec;  // no prompt ids: the input is the server's usage count
    spec.output_len = out;
    l.specs.push_back(std::move(spec));
  }
  return l;
}

// The server's speculation counters now; nullopt when /metrics is missing or
// has none.
std::optional<HttpBenchReport::Speculation> read_spec_counters(const Endpoint& e,
                                                               const std::string& key) {
  StreamingClient client(e, key, 30);
  Result<std::string> page = client.get_text("/metrics");
  if (!page.ok()) return std::nullopt;
  return parse_spec_counters(*page);
}

// Runs bench/plot_serve.py over the JSON lines in `json_path`.
Status plot(const std::string& json_path, const std::string& png) {
  const std::filesystem::path script = CELLM_PLOT_SCRIPT;
  if (!std::filesystem::exists(script)) {
    return not_found("--plot: {} is missing (a build from another checkout?)", script.string());
  }
  std::string python = "python3";
  const std::filesystem::path venv = script.parent_path().parent_path() / ".venv/bin/python";
  if (std::filesystem::exists(venv)) python = venv.string();
  std::vector<std::string> args = {python, script.string(), "--out", png, json_path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawnp(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    return unavailable("--plot: cannot run {}", python);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return unavailable(
        "--plot: {} {} failed (is matplotlib installed? scripts/setup installs it into .venv)",
        python, script.string());
  }
  return Status::ok();
}

}  // namespace

Result<HttpBenchReport> run_http_serve_bench(const HttpBenchOptions& options, std::FILE* out) {
  HttpBenchOptions o = options;
  if (!o.dataset_path.empty() && o.dataset.empty()) {
    CELLM_ASSIGN_OR_RETURN(o.dataset, read_dataset(o.dataset_path));
  }
  CELLM_RETURN_IF_ERROR(validate(o));
  if (!o.load.json_path.empty()) {  // refuse before the long run, not after it
    std::ofstream probe(o.load.json_path, std::ios::app);
    if (!probe)
      return invalid_argument("--json {}: cannot open it for appending", o.load.json_path);
  }
  HttpBenchReport r;
  std::unique_ptr<InProcessServer> server;
  Target target;
  if (o.url.empty()) {
    std::fprintf(out, "starting cellm's server in-process for %s ...\n", o.load.model.c_str());
    std::fflush(out);
    CELLM_ASSIGN_OR_RETURN(server, InProcessServer::start(o));
    CELLM_ASSIGN_OR_RETURN(target.endpoint, parse_url(server->url()));
    target.model = o.served_model.empty() ? server->model_name() : o.served_model;
    target.vocab = server->vocab_size();
    r.target = "in-process";
    r.backend = server->backend();
    r.device = server->device();
  } else {
    CELLM_ASSIGN_OR_RETURN(target.endpoint, parse_url(o.url));
    if (o.served_model.empty()) {
      CELLM_ASSIGN_OR_RETURN(target.model, first_model_id(target.endpoint, o.api_key));
    } else {
      target.model = o.served_model;
    }
    if (o.vocab_size > 0) target.vocab = o.vocab_size;
    r.target = o.url;
    r.backend = "remote";
    r.device = "unknown";
  }
  r.model = target.model;
  const int cap = o.load.max_concurrency > 0 ? std::min(o.load.max_concurrency, o.load.requests)
                                             : o.load.requests;
  const std::string rate =
      std::isinf(o.load.request_rate) ? "inf" : fmt::format("{:g}", o.load.request_rate);
  const std::string shape =
      o.dataset.empty()
          ? fmt::format("{} in / {} out, {} prompts", o.load.input_len, o.load.output_len,
                        o.prompt_format == PromptFormat::kText ? "text" : "token-id")
          : fmt::format("from {} ({} lines)", o.dataset_path, o.dataset.size());
  std::fprintf(out, "%s at %s%s: %d requests %s, rate %s req/s, concurrency %d%s\n",
               target.model.c_str(), target.endpoint.scheme_host_port.c_str(),
               target.endpoint.v1.c_str(), o.load.requests, shape.c_str(), rate.c_str(), cap,
               o.speculate == "off" ? "" : (", speculate " + o.speculate).c_str());
  std::fflush(out);

  if (o.load.warmup_requests > 0) {
    Load load;
    if (o.dataset.empty()) {
      ServeBenchOptions w = o.load;
      w.requests = o.load.warmup_requests;
      w.output_len = std::min(o.load.output_len, 4);
      w.range_ratio = 0;
      w.seed = o.load.seed + 0x5eed;  // prompts of their own, never a cache hit for the run
      load = bodies_of(o, target.model, make_requests(w, target.vocab));
    } else {
      // The file's first requests, cut to a few tokens each. With
      // --prefix-cache-entries (off by default) the run's first prompts
      // would then be cache hits: its figures say so through TTFT.
      load = dataset_load(o, target.model, o.load.warmup_requests, o.load.seed + 0x5eed, 4);
    }
    LoadProgress p;
    const auto records =
        run_http_load(target.endpoint, o.api_key, o.request_timeout_s, load.requests,
                      std::vector<double>(load.requests.size(), 0.0), cap, p, nullptr);
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (!records[i].ok) {
        return internal_error("warm-up request {} failed, so the run would too: {}", i,
                              records[i].error);
      }
    }
  }

  const Load load =
      o.dataset.empty()
          ? bodies_of(o, target.model, make_requests(o.load, target.vocab))
          : dataset_load(o, target.model, o.load.requests, o.load.seed, /*max_tokens=*/0);
  const std::vector<double> arrivals =
      poisson_arrivals(o.load.requests, o.load.request_rate, o.load.seed);
  // The counters since the server started, before and after: the difference
  // is the timed run's (warm-up excluded).
  const auto spec_before = read_spec_counters(target.endpoint, o.api_key);
  LoadProgress progress;
  std::vector<RequestRecord> records;
  {
    ProgressDisplay display(progress, o.load.requests, o.progress, o.load.progress_s);
    records = run_http_load(target.endpoint, o.api_key, o.request_timeout_s, load.requests,
                            arrivals, cap, progress, nullptr);
  }
  tally_http(load.specs, records, r, /*exact_lengths=*/o.ignore_eos);
  if (const auto spec_after = read_spec_counters(target.endpoint, o.api_key);
      spec_before && spec_after) {
    r.speculation = HttpBenchReport::Speculation{spec_after->proposed - spec_before->proposed,
                                                 spec_after->accepted - spec_before->accepted};
  } else if (o.speculate != "off") {
    std::fprintf(out, "note: the server's /metrics gave no speculation counters\n");
  }
  server.reset();  // frees the device for the in-process run

  // The in-process load sends no response_format, draws random prompts and
  // does not speculate: no ratio for a constrained, dataset or speculative load.
  if (o.compare_inprocess.value_or(o.url.empty() && o.json_schema.empty() && o.dataset.empty() &&
                                   o.speculate == "off")) {
    std::fprintf(out, "\nthe same load through the Runner in-process:\n");
    ServeBenchOptions in = o.load;
    in.json_path.clear();
    in.reuse_prefix = true;
    auto inproc = run_serve_bench(in, out);
    if (!inproc.ok()) {
      return Status(inproc.status().code(),
                    fmt::format("the in-process run failed (--no-inprocess skips it): {}",
                                inproc.status().message()));
    }
    r.inprocess = std::move(*inproc);
  }
  const std::string table = format_http_report(o, r);
  std::fputs(table.c_str(), out);
  std::fflush(out);
  const nlohmann::json line =
      http_report_json(o, r, env_string("CELLM_COMMIT").value_or("unknown"));
  std::string json_path = o.load.json_path;
  std::optional<std::filesystem::path> scratch;
  if (json_path.empty() && !o.plot_path.empty()) {
    scratch = std::filesystem::temp_directory_path() /
              fmt::format("cellm-bench-serve-{}.jsonl", ::getpid());
    json_path = scratch->string();
  }
  if (!json_path.empty()) {
    std::ofstream json(json_path, std::ios::app);
    json << line.dump() << "\n";
    if (!json) return data_loss("--json {}: writing the result failed", json_path);
  }
  if (!o.plot_path.empty()) {
    const Status drawn = plot(json_path, o.plot_path);
    if (scratch) std::filesystem::remove(*scratch);
    CELLM_RETURN_IF_ERROR(drawn);
    std::fprintf(out, "plot written to %s\n", o.plot_path.c_str());
  }
  return r;
}

}  // namespace cellm::bench
