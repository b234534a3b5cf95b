// The Runner-driving half of `cellm bench serve`: assemble a program and a
// CudaExecutor sized for the load, start a Runner over it, release requests
// at their arrival times under the concurrency cap, and collect each one's
// latencies from its callbacks and GenerationMetrics.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <unistd.h>

#include <fmt/ranges.h>

#include "app/backend_select.h"
#include "app/executor_factory.h"
#include "app/step_budget.h"
#include "bench/bench_serve.h"
#include "bench/random_model.h"
#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "core/env.h"
#include "core/log.h"
#include "executor/cuda_executor.h"
#include "model/loader.h"
#include "model/shapes.h"
#ifdef CELLM_HAVE_CUDA
#include "backend/cuda/cuda_program.h"
#include "backend/cuda/device_probe.h"
#endif

namespace cellm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

// The program, the executor over it and where they run.
struct Assembly {
  model::LoadedModel model;  // a path model's weights, kept beside its program
  model::ModelSpec spec;
  std::shared_ptr<program::Program> program;
  std::unique_ptr<executor::CudaExecutor> executor;
  std::string backend;
  std::string device;
};

// The CPU pool holds every reservation in host memory (f32 K and V); refuse a
// load that would take more than half of the machine instead of swapping.
Status check_host_pool(const model::ModelSpec& spec, const PoolNeed& need) {
  const double bytes = static_cast<double>(need.cells) * spec.num_layers * spec.num_kv_heads *
                       spec.head_dim * 2.0 * sizeof(float);
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return Status::ok();
  const double host = static_cast<double>(pages) * static_cast<double>(page);
  if (bytes > host / 2) {
    return out_of_resources(
        "{} sessions x {} tokens need a CPU KV pool of {:.1f} GiB, more than half of this "
        "machine's {:.1f} GiB: lower --max-concurrency or the lengths",
        need.sessions, need.session_tokens, bytes / (1ull << 30), host / (1ull << 30));
  }
  return Status::ok();
}

Result<Assembly> assemble(const ServeBenchOptions& o, const PoolNeed& need) {
  Assembly a;
  program::ProgramOptions popts;
  popts.kv_memory_fraction = o.gpu_memory_fraction;
  popts.keep_quantized = o.keep_quantized || o.quantize == model::Quantize::kFp8;
  // The program's widest forward stays the one `cellm serve` builds: a
  // step wider than it runs as several forwards there, and so here.
  // A path loads its weights; a shape name gets random ones (on the GPU, or
  // on the CPU with --backend cpu, where small shapes run in reasonable time).
  CELLM_ASSIGN_OR_RETURN(app::BackendChoice backend, app::choose_backend(o.backend));
  CELLM_RETURN_IF_ERROR(app::check_kv_dtype(o.kv_dtype, backend));
  popts.kv_dtype = app::program_kv_dtype(o.kv_dtype);
  const bool is_path = std::filesystem::exists(o.model);
  if (is_path) {
    model::LoadOptions load;
    load.dequant_dtype = app::dequant_dtype_for(backend);
    load.quantize = o.quantize;
    load.gpu_keeps_blocks = backend.name == "cuda" && popts.keep_quantized;
    CELLM_ASSIGN_OR_RETURN(a.model, model::load_model(o.model, load));
    a.spec = a.model.spec;
  } else {
    auto shape = model::named_shape(o.model);
    if (!shape.ok()) {
      return invalid_argument("--model {}: no such file or folder, and not a shape name ({})",
                              o.model, fmt::join(model::shape_names(), ", "));
    }
    a.spec = *shape;
  }
  a.backend = backend.name;
  a.device = "cpu";
#ifdef CELLM_HAVE_CUDA
  if (backend.sizes_pool_from_memory) {
    CELLM_ASSIGN_OR_RETURN(a.device, cuda::device_name());
  }
#endif
  CELLM_RETURN_IF_ERROR(check_pool(o, need, need.cells, a.spec.max_context));
  if (!backend.sizes_pool_from_memory) {
    CELLM_RETURN_IF_ERROR(check_host_pool(a.spec, need));
    popts.kv_cells = static_cast<std::int32_t>(need.cells);
    // The widest forward must stay narrower than the pool.
    popts.max_step = std::min<std::int32_t>(popts.max_step, popts.kv_cells - 1);
  }
  if (is_path) {
    // The program `cellm serve` builds (on the CPU the fast program over the
    // GGUF blocks; backend.load alone would give the reference program).
    app::CudaExecutorConfig config;
    config.backend = o.backend;
    config.kv_dtype = o.kv_dtype;
    CELLM_ASSIGN_OR_RETURN(a.program, app::build_program(backend, a.model, config, popts));
  } else {
    CELLM_ASSIGN_OR_RETURN(a.program, random_program(a.spec, o.seed, popts, backend.name));
  }
  const std::int64_t cells = a.program->constant(program::kMaxCellsConstant).value_or(0);
  CELLM_RETURN_IF_ERROR(check_pool(o, need, cells, a.spec.max_context));
  CELLM_ASSIGN_OR_RETURN(
      a.executor, executor::CudaExecutor::create(a.program, need.sessions, need.session_tokens));
  return a;
}

// One request as the driver and its callbacks see it. The callback fields are
// written on the engine thread and read by the driver only after on_done has
// handed the index over under the driver's mutex.
struct Tracked {
  Clock::time_point sent;
  Clock::time_point first_token;
  Clock::time_point last_delivery;
  Clock::time_point end;
  std::int64_t delivered = 0;
  std::int64_t prefilled = 0;
  std::vector<double> gaps_ms;
  std::optional<FinishReason> reason;
  std::string error;
  RequestHandle handle;  // driver thread only
};

// Releases requests at their arrival times, never more than `cap` in flight,
// through Runner::submit: the path the server's requests take.
class LoadDriver {
 public:
  LoadDriver(Runner& runner, GenConfig base) : runner_(runner), base_(std::move(base)) {}

  // Calls `tick` every `every` while a run waits (a progress report).
  void set_ticker(Clock::duration every, std::function<void()> tick) {
    tick_every_ = every;
    tick_ = std::move(tick);
  }

  // Runs every request to its end; returns the moment the first was released.
  Clock::time_point run(const std::vector<RequestSpec>& requests,
                        const std::vector<double>& arrivals, int cap,
                        std::vector<Tracked>& tracked) {
    const std::size_t n = requests.size();
    const Clock::time_point start = Clock::now();
    std::size_t next = 0;
    std::size_t finished = 0;
    std::size_t in_flight = 0;
    auto due = [&](std::size_t i) {
      return start + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(arrivals[i]));
    };
    Clock::time_point next_tick = start + tick_every_;
    while (finished < n) {
      const Clock::time_point now = Clock::now();
      if (tick_ && now >= next_tick) {
        tick_();
        next_tick = now + tick_every_;
      }
      while (next < n && in_flight < static_cast<std::size_t>(cap) && due(next) <= now) {
        launch(next, requests[next], tracked[next]);
        ++next;
        ++in_flight;
      }
      std::deque<std::size_t> done;
      {
        std::unique_lock lock(mu_);
        auto any = [this] { return !settled_.empty(); };
        Clock::time_point until = tick_ ? next_tick : Clock::time_point::max();
        if (next < n && in_flight < static_cast<std::size_t>(cap))
          until = std::min(until, due(next));
        cv_.wait_until(lock, until, any);
        done.swap(settled_);
      }
      in_flight -= done.size();
      finished += done.size();
    }
    return start;
  }

 private:
  void settle(std::size_t i) {
    {
      std::lock_guard lock(mu_);
      settled_.push_back(i);
    }
    cv_.notify_one();
  }

  void launch(std::size_t i, const RequestSpec& r, Tracked& t) {
    t.sent = Clock::now();
    Request request;
    request.prompt = r.prompt;
    request.config = base_;
    request.config.max_new_tokens = r.output_len;
    if (request.config.seed) request.config.seed = *request.config.seed + i;
    RequestCallbacks cb;
    cb.on_update = [&t](std::int32_t, const GenerationUpdate& u) {
      const auto now = Clock::now();
      if (!u.tokens.empty()) {
        // A burst of k tokens is one gap and k - 1 zero gaps (the runner's
        // own ITL convention); the first burst has no gap.
        if (t.delivered > 0) {
          t.gaps_ms.push_back(ms_between(t.last_delivery, now));
        } else {
          t.first_token = now;
        }
        t.gaps_ms.insert(t.gaps_ms.end(), u.tokens.size() - 1, 0.0);
        t.delivered += static_cast<std::int64_t>(u.tokens.size());
        t.last_delivery = now;
      }
      if (u.finish_reason) {
        t.reason = *u.finish_reason;
        t.error = u.error_message;
        t.end = now;
      }
    };
    cb.on_done = [this, i, &t](const RequestOutcome& o) {
      t.prefilled = o.usage.prompt_tokens - o.usage.cached_tokens;
      settle(i);
    };
    Result<RequestHandle> h = runner_.submit(std::move(request), std::move(cb));
    if (!h.ok()) {
      t.reason = FinishReason::kFailed;
      t.error = std::string(h.status().message());
      settle(i);
      return;
    }
    t.handle = std::move(*h);
  }

  Clock::duration tick_every_{};
  std::function<void()> tick_;
  Runner& runner_;
  GenConfig base_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> settled_;
};

// The counters of `after` that accrued since `before`; extremes stay whole-run.
EngineMetrics since(const EngineMetrics& after, const EngineMetrics& before,
                    Clock::time_point start) {
  EngineMetrics d = after;
  d.steps -= before.steps;
  d.steps_failed -= before.steps_failed;
  d.decode_sessions_total -= before.decode_sessions_total;
  d.prefill_sessions_total -= before.prefill_sessions_total;
  d.ready_total -= before.ready_total;
  d.step_latency_sum_us -= before.step_latency_sum_us;
  d.decode_tokens_total -= before.decode_tokens_total;
  d.prefill_tokens_total -= before.prefill_tokens_total;
  d.decode_only_tokens -= before.decode_only_tokens;
  d.steps_with_decode -= before.steps_with_decode;
  d.steps_with_prefill -= before.steps_with_prefill;
  d.decode_only_latency_sum_us -= before.decode_only_latency_sum_us;
  d.mixed_latency_sum_us -= before.mixed_latency_sum_us;
  d.prefill_only_latency_sum_us -= before.prefill_only_latency_sum_us;
  d.context_sum -= before.context_sum;
  d.decode_session_time_sum_us -= before.decode_session_time_sum_us;
  d.sessions_refused -= before.sessions_refused;
  d.generations_started -= before.generations_started;
  d.generations_completed -= before.generations_completed;
  d.finished_stop_token -= before.finished_stop_token;
  d.finished_stop_string -= before.finished_stop_string;
  d.finished_token_limit -= before.finished_token_limit;
  d.finished_cancelled -= before.finished_cancelled;
  d.finished_failed -= before.finished_failed;
  d.ttft_count -= before.ttft_count;
  d.ttft_sum_us -= before.ttft_sum_us;
  d.total_prompt_tokens -= before.total_prompt_tokens;
  d.total_generated_tokens -= before.total_generated_tokens;
  d.t_first_step = start;
  return d;
}

// Folds the finished requests into the report.
void tally(const std::vector<RequestSpec>& requests, std::vector<Tracked>& tracked,
           Clock::time_point start, ServeBenchReport& r) {
  std::vector<double> ttft, tpot, itl, e2e;
  Clock::time_point last = start;
  for (std::size_t i = 0; i < tracked.size(); ++i) {
    Tracked& t = tracked[i];
    const RequestSpec& req = requests[i];
    std::string why;
    if (t.reason != FinishReason::kNewTokenLimit) {
      why = t.error.empty() ? fmt::format("ended {}", t.reason ? finish_reason_name(*t.reason)
                                                               : std::string_view("without end"))
                            : t.error;
    } else if (t.delivered != req.output_len) {
      why = fmt::format("delivered {} tokens, expected {}", t.delivered, req.output_len);
    }
    if (!why.empty()) {
      if (r.failed++ == 0) r.first_error = fmt::format("request {}: {}", i, why);
      continue;
    }
    ++r.completed;
    r.input_tokens += static_cast<std::int64_t>(req.prompt.size());
    r.output_tokens += req.output_len;
    r.prefilled_tokens += t.prefilled;
    last = std::max(last, t.end);
    ttft.push_back(ms_between(t.sent, t.first_token));
    e2e.push_back(ms_between(t.sent, t.end));
    if (req.output_len > 1) tpot.push_back((e2e.back() - ttft.back()) / (req.output_len - 1));
    itl.insert(itl.end(), t.gaps_ms.begin(), t.gaps_ms.end());
  }
  r.duration_s = std::chrono::duration<double>(last - start).count();
  if (r.duration_s > 0) {
    r.request_throughput = r.completed / r.duration_s;
    r.output_tokens_per_s = static_cast<double>(r.output_tokens) / r.duration_s;
    r.total_tokens_per_s = static_cast<double>(r.input_tokens + r.output_tokens) / r.duration_s;
  }
  r.ttft_ms = summarize(std::move(ttft));
  r.tpot_ms = summarize(std::move(tpot));
  r.itl_ms = summarize(std::move(itl));
  r.e2e_ms = summarize(std::move(e2e));
}

// Prefix-cache entries of a run with a shared prefix: the prefix's snapshot
// (or a request's that contains it) and room for the next.
constexpr std::int32_t kPrefixEntries = 2;

// Puts the shared prefix into the runner's prefix cache (a request of the
// prefix alone), so that every measured request finds it there.
Status prefill_prefix(Runner& runner, const std::vector<Token>& prefix) {
  Request request;
  request.prompt = prefix;
  request.config.max_new_tokens = 1;
  auto failure = std::make_shared<std::string>();
  RequestCallbacks cb;
  cb.on_update = [failure](std::int32_t, const GenerationUpdate& u) {
    if (u.finish_reason && *u.finish_reason != FinishReason::kNewTokenLimit) {
      *failure = u.error_message.empty() ? std::string(finish_reason_name(*u.finish_reason))
                                         : u.error_message;
    }
  };
  CELLM_ASSIGN_OR_RETURN(RequestHandle h, runner.submit(std::move(request), std::move(cb)));
  h.wait();
  if (!failure->empty() || runner.prefix_cache_size() < 1) {
    return internal_error("prefilling the {}-token prefix into the prefix cache failed: {}",
                          prefix.size(), failure->empty() ? "no snapshot" : *failure);
  }
  return Status::ok();
}

}  // namespace

Result<ServeBenchReport> run_serve_bench(const ServeBenchOptions& o, std::FILE* out) {
  CELLM_RETURN_IF_ERROR(validate(o));
  if (!o.json_path.empty()) {  // refuse before the long run, not after it
    std::ofstream probe(o.json_path, std::ios::app);
    if (!probe) return invalid_argument("--json {}: cannot open it for appending", o.json_path);
  }
  const PoolNeed need = pool_need(o);
  CELLM_ASSIGN_OR_RETURN(Assembly a, assemble(o, need));

  // The budget cellm serve's Engine takes (app/step_budget.h).
  CELLM_ASSIGN_OR_RETURN(
      const app::StepBudget budget,
      app::step_budget(o.prefill_chunk, o.max_batch_tokens, need.sessions,
                       static_cast<std::int64_t>(a.executor->preferred_batch_tokens())));
  const std::size_t chunk = budget.chunk;
  const std::size_t batch = budget.batch;
  auto scheduler = app::make_scheduler(budget);
  if (!scheduler) {
    return invalid_argument("no scheduler holds {} decodes beside a prefill chunk of {} in {} "
                            "tokens a step",
                            budget.decodes, chunk, batch);
  }
  const std::string header = fmt::format(
      "{} on {} ({}): {} requests, {} in / {} out, prefix {}, rate {} req/s, concurrency {}; "
      "{} sessions x {} tokens, steps up to {} tokens, prefill chunks of {}\n",
      o.model, a.device, a.backend, o.requests, o.input_len, o.output_len, o.prefix_len,
      std::isinf(o.request_rate) ? std::string("inf") : fmt::format("{:g}", o.request_rate),
      o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : std::string("unlimited"),
      need.sessions, need.session_tokens, batch, chunk);
  std::fputs(header.c_str(), out);
  std::fflush(out);

  // The shared prefix lives in the runner's prefix cache, as in the server;
  // a second entry lets a new request's snapshot arrive before the oldest goes.
  const bool share_prefix = o.prefix_len > 0 && o.reuse_prefix;
  Runner runner(*a.executor, std::move(scheduler),
                RunnerOptions{share_prefix ? kPrefixEntries : 0});
  if (auto probe = runner.open_session_async().get(); !probe) {  // waits for initialize()
    runner.shutdown();
    return internal_error("the {} executor failed to initialize (see the log)", a.backend);
  }
  const std::vector<RequestSpec> requests = make_requests(o, a.spec.vocab_size);
  if (share_prefix) {
    std::vector<Token> shared(requests[0].prompt.begin(),
                              requests[0].prompt.begin() + o.prefix_len);
    if (Status st = prefill_prefix(runner, shared); !st.is_ok()) {
      runner.shutdown();
      return st;
    }
  }
  GenConfig base;
  base.sampling.temperature = o.temperature;
  base.sampling.top_p = o.top_p;
  base.sampling.top_k = o.top_k;
  if (o.temperature > 0) base.seed = o.seed;
  const int cap = need.sessions - (share_prefix ? 3 : 0);
  LoadDriver driver(runner, base);

  if (o.warmup_requests > 0) {
    ServeBenchOptions w = o;
    w.requests = o.warmup_requests;
    w.output_len = std::min(o.output_len, 4);
    w.range_ratio = 0;
    std::vector<RequestSpec> warm = make_requests(w, a.spec.vocab_size);
    std::vector<Tracked> tracked(warm.size());
    const auto t0 = driver.run(warm, std::vector<double>(warm.size(), 0.0), cap, tracked);
    ServeBenchReport check;
    tally(warm, tracked, t0, check);
    if (check.failed > 0) {
      runner.shutdown();
      return internal_error("a warm-up request failed, so the run would too: {}",
                            check.first_error);
    }
  }
  // A command round trip: the engine answers it only after publishing the
  // metrics of the step that ended the last warm-up request.
  runner.accepts_async(nullptr).get();
  const EngineMetrics before = runner.metrics();
  if (o.progress_s > 0) {
    const Clock::time_point t0 = Clock::now();
    driver.set_ticker(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.progress_s)),
        [&runner, &before, t0, n = o.requests] {
          const EngineMetrics m = since(runner.metrics(), before, t0);
          std::fprintf(stderr, "bench serve: %.0f s: %s\n",
                       std::chrono::duration<double>(Clock::now() - t0).count(),
                       progress_line(m, n).c_str());
        });
  }
  const std::vector<double> arrivals = poisson_arrivals(o.requests, o.request_rate, o.seed);
  std::vector<Tracked> tracked(requests.size());
  const Clock::time_point start = driver.run(requests, arrivals, cap, tracked);
  runner.shutdown();
  const EngineMetrics after = runner.metrics();  // final once the runner has stopped

  ServeBenchReport r;
  r.model = o.model;
  r.backend = a.backend;
  r.device = a.device;
#ifdef CELLM_HAVE_CUDA
  if (const cuda::CudaProgramKnobs* knobs = cuda::cuda_program_knobs(*a.program)) {
    r.kernels = cuda::describe(knobs->kernels);
  }
#endif
  tally(requests, tracked, start, r);
  r.engine = since(after, before, start);
  const std::string table = format_report(o, r);
  std::fputs(table.c_str(), out);
  if (!o.json_path.empty()) {
    std::ofstream json(o.json_path, std::ios::app);
    json << report_json(o, r, env_string("CELLM_COMMIT").value_or("unknown")).dump() << "\n";
    if (!json) return data_loss("--json {}: writing the result failed", o.json_path);
  }
  return r;
}

}  // namespace cellm::bench
