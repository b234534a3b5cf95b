// The pure half of `cellm bench serve`: option checks, the synthetic load
// (lengths, prompts, Poisson arrivals), pool sizing, statistics and the
// printed and JSON reports. The Runner-driving half is bench_serve_run.cpp.
#include "bench/bench_serve.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "app/step_budget.h"

namespace cellm::bench {
namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// Separate streams, so that changing the request count or the arrival rate
// does not change the prompts of the requests that remain.
constexpr std::uint64_t kPromptStream = 0x9e3779b97f4a7c15ULL;
constexpr std::uint64_t kArrivalStream = 0xc2b2ae3d27d4eb4fULL;

int concurrency(const ServeBenchOptions& o) {
  return o.max_concurrency > 0 ? std::min(o.max_concurrency, o.requests) : o.requests;
}

std::string rate_text(double rate) {
  return std::isinf(rate) ? std::string("inf") : fmt::format("{:g}", rate);
}

}  // namespace

Status validate(const ServeBenchOptions& o) {
  if (o.model.empty()) return invalid_argument("--model is empty: give a shape name or a path");
  if (o.quantize != model::Quantize::kNone && !std::filesystem::exists(o.model)) {
    return invalid_argument(
        "--quantize {} needs a model path (a Hugging Face folder or .gguf file); '{}' names a "
        "shape, whose random weights are not quantized",
        model::quantize_name(o.quantize), o.model);
  }
  if (o.requests <= 0) return invalid_argument("--requests must be at least 1, got {}", o.requests);
  if (o.input_len <= 0) {
    return invalid_argument("--input-len must be at least 1 token, got {}", o.input_len);
  }
  if (o.output_len <= 0) {
    return invalid_argument("--output-len must be at least 1 token, got {}", o.output_len);
  }
  if (!(o.range_ratio >= 0.0 && o.range_ratio < 1.0)) {
    return invalid_argument("--range-ratio must lie in [0, 1), got {}", o.range_ratio);
  }
  if (o.prefix_len < 0) {
    return invalid_argument("--prefix-len must be 0 (none) or positive, got {}", o.prefix_len);
  }
  if (std::isnan(o.request_rate) || o.request_rate <= 0.0) {
    return invalid_argument("--request-rate must be positive requests/s or inf, got {}",
                            o.request_rate);
  }
  if (o.max_concurrency < 0) {
    return invalid_argument("--max-concurrency must be 0 (no limit) or positive, got {}",
                            o.max_concurrency);
  }
  if (o.prefill_chunk < 0) {
    return invalid_argument("--prefill-chunk must be 0 (cellm serve's default, {}) or a number "
                            "of tokens, got {}",
                            app::kDefaultPrefillChunk, o.prefill_chunk);
  }
  if (o.max_batch_tokens < 0) {
    return invalid_argument("--max-batch-tokens must be 0 (derived) or positive, got {}",
                            o.max_batch_tokens);
  }
  if (!(o.progress_s >= 0) || std::isinf(o.progress_s)) {
    return invalid_argument("--progress must be 0 (off) or a number of seconds, got {}",
                            o.progress_s);
  }
  if (o.warmup_requests < 0) {
    return invalid_argument("--warmup must be 0 or more requests, got {}", o.warmup_requests);
  }
  if (!(o.temperature >= 0.0f) || std::isinf(o.temperature)) {
    return invalid_argument("--temperature must be 0 (greedy) or positive, got {}", o.temperature);
  }
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) {
    return invalid_argument("--top-p must lie in (0, 1] (1: off), got {}", o.top_p);
  }
  if (o.top_k < 0) {
    return invalid_argument("--top-k must be 0 (off) or positive, got {}", o.top_k);
  }
  if ((o.top_p < 1.0f || o.top_k > 0) && o.temperature == 0.0f) {
    return invalid_argument(
        "--top-p and --top-k shape a sampled draw: give --temperature > 0 with them");
  }
  if (!(o.gpu_memory_fraction > 0.0 && o.gpu_memory_fraction <= 1.0)) {
    return invalid_argument("--gpu-memory-fraction must lie in (0, 1], got {}",
                            o.gpu_memory_fraction);
  }
  const std::int64_t longest = static_cast<std::int64_t>(o.prefix_len) +
                               length_range(o.input_len, o.range_ratio).hi +
                               length_range(o.output_len, o.range_ratio).hi;
  if (longest > kIntMax / 2) {
    return invalid_argument("--prefix-len {} + --input-len {} + --output-len {} is too long",
                            o.prefix_len, o.input_len, o.output_len);
  }
  const PoolNeed need = pool_need(o);
  if (need.cells > kIntMax) {
    return invalid_argument(
        "{} concurrent sessions x {} tokens need {} KV cells, more than any pool can index: "
        "lower --max-concurrency or the lengths",
        need.sessions, need.session_tokens, need.cells);
  }
  // The budget cellm serve would take for these sessions (the executor's
  // widest step can only shrink the chunk, never make it refuse).
  const Result<app::StepBudget> budget =
      app::step_budget(o.prefill_chunk, o.max_batch_tokens, need.sessions);
  if (!budget.ok()) {
    return invalid_argument("--prefill-chunk {} and --max-batch-tokens {}: {}", o.prefill_chunk,
                            o.max_batch_tokens, budget.status().message());
  }
  return Status::ok();
}

LengthRange length_range(int length, double range_ratio) {
  const int lo = static_cast<int>(std::floor(length * (1.0 - range_ratio)));
  const int hi = static_cast<int>(std::ceil(length * (1.0 + range_ratio)));
  return {std::max(1, lo), std::max(1, hi)};
}

std::vector<double> poisson_arrivals(int count, double rate, std::uint64_t seed) {
  std::vector<double> at(static_cast<std::size_t>(std::max(count, 0)), 0.0);
  if (std::isinf(rate)) return at;
  std::mt19937_64 rng(seed ^ kArrivalStream);
  std::exponential_distribution<double> gap(rate);
  double t = 0.0;
  for (double& a : at) {
    t += gap(rng);
    a = t;
  }
  return at;
}

std::vector<RequestSpec> make_requests(const ServeBenchOptions& o, std::int32_t vocab_size) {
  std::mt19937_64 rng(o.seed ^ kPromptStream);
  std::uniform_int_distribution<Token> token(0, std::max(vocab_size, 1) - 1);
  const LengthRange in = length_range(o.input_len, o.range_ratio);
  const LengthRange out = length_range(o.output_len, o.range_ratio);
  std::uniform_int_distribution<int> in_len(in.lo, in.hi);
  std::uniform_int_distribution<int> out_len(out.lo, out.hi);
  std::vector<Token> prefix(static_cast<std::size_t>(o.prefix_len));
  for (Token& t : prefix) t = token(rng);
  std::vector<RequestSpec> requests(static_cast<std::size_t>(std::max(o.requests, 0)));
  for (RequestSpec& r : requests) {
    const int n = in_len(rng);
    r.output_len = out_len(rng);
    r.prompt = prefix;
    r.prompt.reserve(prefix.size() + static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) r.prompt.push_back(token(rng));
  }
  return requests;
}

int effective_prefill_chunk(const ServeBenchOptions& o) {
  return o.prefill_chunk > 0 ? o.prefill_chunk : static_cast<int>(app::kDefaultPrefillChunk);
}

PoolNeed pool_need(const ServeBenchOptions& o) {
  PoolNeed need;
  // With a shared prefix the runner's cache holds two snapshots, and a third
  // while a new one replaces the oldest.
  need.sessions = concurrency(o) + (o.prefix_len > 0 && o.reuse_prefix ? 3 : 0);
  need.session_tokens = o.prefix_len + length_range(o.input_len, o.range_ratio).hi +
                        length_range(o.output_len, o.range_ratio).hi;
  need.cells = static_cast<std::int64_t>(need.sessions) * need.session_tokens + 1;
  return need;
}

Status check_pool(const ServeBenchOptions& o, const PoolNeed& need, std::int64_t pool_cells,
                  std::int64_t max_context) {
  if (need.session_tokens > max_context) {
    return out_of_resources(
        "a request of up to {} tokens (--prefix-len {} + --input-len {} + --output-len {}, "
        "range ratio {}) exceeds the model's context of {}: shorten the lengths",
        need.session_tokens, o.prefix_len, o.input_len, o.output_len, o.range_ratio, max_context);
  }
  if (need.cells > pool_cells) {
    return out_of_resources(
        "{} sessions x {} tokens need {} KV cells (scratch included) but the pool of {} holds "
        "{}: lower --max-concurrency (now {}), --input-len or --output-len{}",
        need.sessions, need.session_tokens, need.cells, o.model, pool_cells,
        o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : std::string("unlimited"),
        o.backend == "cpu" ? "" : ", or raise --gpu-memory-fraction");
  }
  return Status::ok();
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

std::string latency_row(std::string_view name, const LatencySummary& s) {
  if (s.count == 0) return fmt::format("| {} | -- | -- | -- | -- |\n", name);
  return fmt::format("| {} | {:.2f} | {:.2f} | {:.2f} | {:.2f} |\n", name, s.mean, s.p50, s.p90,
                     s.p99);
}

LatencySummary summarize(std::vector<double> values) {
  LatencySummary s;
  s.count = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0.0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.p50 = percentile(values, 50);
  s.p90 = percentile(values, 90);
  s.p99 = percentile(values, 99);
  return s;
}

namespace {

// Mean milliseconds of `steps` steps that took `sum_us` together ("-" for none).
std::string mean_ms(std::int64_t sum_us, std::int64_t steps) {
  return steps > 0 ? fmt::format("{:.2f}", static_cast<double>(sum_us) / 1e3 / steps) : "-";
}

}  // namespace

std::string progress_line(const EngineMetrics& e, int requests) {
  return fmt::format(
      "{}/{} requests done, {} tokens generated, {} prefilled; {} steps, mean ms "
      "decode-only {} / mixed {} / prefill-only {}",
      e.generations_completed, requests, e.total_generated_tokens, e.prefill_tokens_total, e.steps,
      mean_ms(e.decode_only_latency_sum_us, e.decode_only_steps()),
      mean_ms(e.mixed_latency_sum_us, e.mixed_steps()),
      mean_ms(e.prefill_only_latency_sum_us, e.prefill_only_steps()));
}

std::string format_report(const ServeBenchOptions& o, const ServeBenchReport& r) {
  std::string t;
  auto row = [&t](std::string_view name, const std::string& value) {
    t += fmt::format("| {} | {} |\n", name, value);
  };
  t += fmt::format("\n| {} on {} ({}) | |\n|---|---|\n", r.model, r.device, r.backend);
  row("requests completed / failed", fmt::format("{} / {}", r.completed, r.failed));
  if (!r.first_error.empty()) row("first failure", r.first_error);
  row("lengths in / out / prefix",
      fmt::format("{} / {} / {}{}", o.input_len, o.output_len, o.prefix_len,
                  o.range_ratio > 0 ? fmt::format(" (range ratio {:g})", o.range_ratio) : ""));
  row("request rate / max concurrency",
      fmt::format("{} req/s / {}", rate_text(o.request_rate),
                  o.max_concurrency > 0 ? std::to_string(o.max_concurrency) : "unlimited"));
  row("K/V dtype", std::string(dtype_name(o.kv_dtype)));
  row("duration", fmt::format("{:.2f} s", r.duration_s));
  row("input / output tokens", fmt::format("{} / {}", r.input_tokens, r.output_tokens));
  row("tokens prefilled", fmt::format("{}", r.prefilled_tokens));
  row("request throughput", fmt::format("{:.2f} req/s", r.request_throughput));
  row("output throughput", fmt::format("{:.1f} tok/s", r.output_tokens_per_s));
  row("total throughput", fmt::format("{:.1f} tok/s", r.total_tokens_per_s));

  t += kLatencyTableHeader;
  auto lat = [&t](std::string_view name, const LatencySummary& s) { t += latency_row(name, s); };
  lat("TTFT", r.ttft_ms);
  lat("TPOT", r.tpot_ms);
  lat("ITL", r.itl_ms);
  lat("E2E", r.e2e_ms);

  const EngineMetrics& e = r.engine;
  t += "\n| engine | |\n|---|---|\n";
  row("steps (decode-only / mixed / prefill-only)",
      fmt::format("{} ({} / {} / {})", e.steps, e.decode_only_steps(), e.mixed_steps(),
                  e.prefill_only_steps()));
  row("mean tokens per step", fmt::format("{:.1f}", e.mean_step_tokens()));
  row("mean decode sessions per step", fmt::format("{:.1f}", e.mean_admitted_decode_sessions()));
  row("mean step",
      fmt::format("{:.2f} ms", e.steps > 0 ? e.step_latency_sum_us / 1e3 / e.steps : 0.0));
  row("mean step decode-only / mixed / prefill-only",
      fmt::format("{} / {} / {} ms", mean_ms(e.decode_only_latency_sum_us, e.decode_only_steps()),
                  mean_ms(e.mixed_latency_sum_us, e.mixed_steps()),
                  mean_ms(e.prefill_only_latency_sum_us, e.prefill_only_steps())));
  row("decode-only rate", fmt::format("{:.1f} tok/s", e.decode_only_tokens_per_sec()));
  row("engine idle", fmt::format("{:.1f}%", 100.0 * e.idle_fraction()));
  row("peak concurrent generations", fmt::format("{}", e.peak_concurrent_generations));
  return t;
}

nlohmann::json report_json(const ServeBenchOptions& o, const ServeBenchReport& r,
                           const std::string& commit) {
  nlohmann::json j{{"bench", "serve"},
                   {"gpu", r.device},
                   {"kernels", r.kernels},
                   {"commit", commit},
                   {"model", o.model},
                   {"backend", r.backend},
                   {"kv_dtype", dtype_name(o.kv_dtype)},  // as asked: the CPU's K/V are f32
                   {"quantize", model::quantize_name(o.quantize)},
                   {"keep_quantized", o.keep_quantized || o.quantize == model::Quantize::kFp8},
                   {"requests", o.requests},
                   {"input_len", o.input_len},
                   {"output_len", o.output_len},
                   {"range_ratio", o.range_ratio},
                   {"prefix_len", o.prefix_len},
                   {"reuse_prefix", o.reuse_prefix},
                   {"request_rate", rate_text(o.request_rate)},
                   {"max_concurrency", o.max_concurrency},
                   {"prefill_chunk", effective_prefill_chunk(o)},
                   {"max_batch_tokens", o.max_batch_tokens},
                   {"temperature", o.temperature},
                   {"top_p", o.top_p},
                   {"top_k", o.top_k},
                   {"seed", o.seed},
                   {"completed", r.completed},
                   {"failed", r.failed},
                   {"duration_s", r.duration_s},
                   {"input_tokens", r.input_tokens},
                   {"output_tokens", r.output_tokens},
                   {"prefilled_tokens", r.prefilled_tokens},
                   {"request_throughput", r.request_throughput},
                   {"output_tokens_per_s", r.output_tokens_per_s},
                   {"total_tokens_per_s", r.total_tokens_per_s},
                   {"engine_steps", r.engine.steps},
                   {"engine_mean_step_tokens", r.engine.mean_step_tokens()},
                   {"engine_mean_decode_sessions", r.engine.mean_admitted_decode_sessions()},
                   {"engine_idle_fraction", r.engine.idle_fraction()},
                   {"engine_peak_concurrent", r.engine.peak_concurrent_generations}};
  if (!r.first_error.empty()) j["first_error"] = r.first_error;
  auto put = [&j](const std::string& name, const LatencySummary& s) {
    if (s.count == 0) return;  // absent, never a made-up zero
    j[name + "_mean"] = s.mean;
    j[name + "_p50"] = s.p50;
    j[name + "_p90"] = s.p90;
    j[name + "_p99"] = s.p99;
  };
  put("ttft_ms", r.ttft_ms);
  put("tpot_ms", r.tpot_ms);
  put("itl_ms", r.itl_ms);
  put("e2e_ms", r.e2e_ms);
  return j;
}

}  // namespace cellm::bench
