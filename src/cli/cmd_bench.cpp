// `cellm bench step`: decode and prefill timings against the device's own
// rooflines (see app/bench_step.h). `cellm bench serve`: a synthetic serving
// load through the Runner (see app/bench_serve.h).
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "app/bench_serve.h"
#include "app/bench_step.h"
#include "cli/commands.h"

namespace cellm::cli {
namespace {

// "inf" (or "infinity") means every request arrives at once.
CLI::Option* add_rate_option(CLI::App* serve, app::ServeBenchOptions& opts) {
  return serve
      ->add_option_function<std::string>(
          "--request-rate",
          [&opts](const std::string& text) {
            if (text == "inf" || text == "infinity") {
              opts.request_rate = std::numeric_limits<double>::infinity();
              return;
            }
            std::size_t used = 0;
            double rate = 0;
            try {
              rate = std::stod(text, &used);
            } catch (const std::exception&) {
              used = 0;
            }
            if (used != text.size() || !(rate > 0) || std::isinf(rate)) {
              throw CLI::ValidationError(
                  "--request-rate",
                  "must be a positive number of requests/s or inf, got '" + text + "'");
            }
            opts.request_rate = rate;
          },
          "requests per second, Poisson arrivals; inf: all at once")
      ->default_str("inf");
}

CLI::App* add_serve(CLI::App* bench, app::ServeBenchOptions& o) {
  CLI::App* serve = bench->add_subcommand(
      "serve", "N requests through the Runner: throughput, TTFT, TPOT, ITL and E2E latency");
  serve
      ->add_option("--model", o.model,
                   "shape name (llama-3.2-1b, llama-3.1-8b, qwen3-0.6b, smollm2-135m, "
                   "gemma3-270m; random weights on the GPU) or a model path")
      ->capture_default_str();
  serve->add_option("--backend", o.backend, "for a model path: auto, cpu or cuda")
      ->capture_default_str();
  serve->add_option("--requests", o.requests, "requests to send")->capture_default_str();
  serve->add_option("--input-len", o.input_len, "prompt tokens per request (after the prefix)")
      ->capture_default_str();
  serve->add_option("--output-len", o.output_len, "tokens each request generates (no stop token)")
      ->capture_default_str();
  serve
      ->add_option("--range-ratio", o.range_ratio,
                   "draw lengths uniformly from [L*(1-r), L*(1+r)]; 0 fixes them")
      ->capture_default_str();
  serve->add_option("--prefix-len", o.prefix_len, "random tokens shared by every prompt")
      ->capture_default_str();
  serve->add_flag("!--no-prefix-reuse", o.reuse_prefix,
                  "prefill the shared prefix with every request instead of cloning it once");
  add_rate_option(serve, o);
  serve
      ->add_option("--max-concurrency", o.max_concurrency,
                   "requests in flight at once (0: no limit); sizes the KV pool")
      ->capture_default_str();
  serve->add_option("--prefill-chunk", o.prefill_chunk, "scheduler prefill chunk in tokens")
      ->capture_default_str();
  serve
      ->add_option("--max-batch-tokens", o.max_batch_tokens,
                   "tokens per engine step (0: concurrency + 2 prefill chunks)")
      ->capture_default_str();
  serve->add_option("--progress", o.progress_s, "seconds between progress lines on stderr; 0: none")
      ->capture_default_str();
  serve->add_option("--warmup", o.warmup_requests, "untimed requests before the run")
      ->capture_default_str();
  serve->add_option("--temperature", o.temperature, "0: greedy")->capture_default_str();
  serve->add_option("--top-p", o.top_p, "nucleus mass kept (1: off; needs --temperature)")
      ->capture_default_str();
  serve->add_option("--top-k", o.top_k, "most likely tokens kept (0: off; needs --temperature)")
      ->capture_default_str();
  serve->add_option("--seed", o.seed, "prompts, lengths, arrivals and sampling")
      ->capture_default_str();
  serve
      ->add_option("--gpu-memory-fraction", o.gpu_memory_fraction,
                   "share of the GPU for weights, workspace and the KV pool")
      ->capture_default_str();
  serve->add_option("--json", o.json_path, "append a JSON line to this file");
  return serve;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto opts = std::make_shared<app::StepBenchOptions>();
  auto serve_opts = std::make_shared<app::ServeBenchOptions>();
  auto quick = std::make_shared<bool>(false);
  CLI::App* bench = app.add_subcommand("bench", "measure the engine on this machine");
  bench->require_subcommand(1);
  CLI::App* step = bench->add_subcommand("step", "decode ms/step and prefill tokens/s");
  step->add_option("--model", opts->model,
                   "shape name (llama-3.2-1b, llama-3.1-8b, qwen3-0.6b, smollm2-135m, gemma3-270m; "
                   "random weights) or a model path")
      ->capture_default_str();
  step->add_option("--batch", opts->batches, "decode batch sizes")->delimiter(',');
  step->add_option("--context", opts->contexts, "decode contexts")->delimiter(',');
  step->add_option("--prompt", opts->prompts, "prefill prompt lengths")->delimiter(',');
  step->add_option("--steps", opts->steps, "timed decode steps per point")->capture_default_str();
  step->add_option("--json", opts->json_path, "append JSON lines to this file");
  step->add_flag("--quick", *quick, "batches 1,16,64 and contexts 512,2048 only");
  step->add_option("--warmup", opts->warmup_steps, "untimed decode steps before each point")
      ->capture_default_str();
  step->add_option("--sampling", opts->sampling,
                   "decode lines: greedy, sampled (temperature 1, seeded) or both")
      ->check(CLI::IsMember({"greedy", "sampled", "both"}))
      ->capture_default_str();
  auto no_prefill = std::make_shared<bool>(false);
  step->add_flag("--no-prefill", *no_prefill, "decode points only (e.g. under a profiler)");
  CLI::App* serve = add_serve(bench, *serve_opts);
  return [opts, serve_opts, quick, no_prefill, serve] {
    if (serve->parsed()) {
      auto report = app::run_serve_bench(*serve_opts, stdout);
      if (!report.ok()) {
        std::fprintf(stderr, "cellm bench serve: %s\n", report.status().to_string().c_str());
        return 1;
      }
      return report->failed > 0 ? 3 : 0;
    }
    if (*quick) {
      opts->batches = {1, 16, 64};
      opts->contexts = {512, 2048};
      opts->prompts = {512, 2048};
    }
    if (*no_prefill) opts->prompts.clear();
    Status s = app::run_step_bench(*opts, stdout);
    if (!s.is_ok()) {
      std::fprintf(stderr, "cellm bench: %s\n", s.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace cellm::cli
