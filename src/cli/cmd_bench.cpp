// `cellm bench step`: decode and prefill timings against the device's own
// rooflines (see bench/bench_step.h). `cellm bench serve`: a synthetic serving
// load through the Runner in-process (bench/bench_serve.h) or, with --http or
// --url, as streaming HTTP requests to cellm's server started in-process or to
// any OpenAI-compatible endpoint (bench/http_serve.h). `cellm bench mask`:
// constrained decoding's mask cost per token and per served step
// (bench/bench_mask.h).
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "bench/bench_mask.h"
#include "bench/bench_serve.h"
#include "bench/bench_step.h"
#include "cli/commands.h"
#include "cli/generate.h"
#ifdef CELLM_HAVE_SERVER
#include "bench/dataset.h"
#include "bench/http_serve.h"
#endif

namespace cellm::cli {
namespace {

// "inf" (or "infinity") means every request arrives at once.
CLI::Option* add_rate_option(CLI::App* serve, bench::ServeBenchOptions& opts) {
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

// Options of the HTTP mode, parsed whatever the mode so that --url alone
// selects it.
struct HttpFlags {
  bool http = false;
  std::string url;
  std::string served_model;
  std::string api_key;
  std::string prompt_format = "ids";
  std::int32_t vocab_size = 0;
  bool ignore_eos = true;
  bool inprocess = false;  // read only when --inprocess or --no-inprocess was given
  std::int32_t prefix_cache_entries = 0;
  std::string json_schema;
  double request_timeout_s = 1800;
  std::string progress_bar = "auto";
  std::string plot;
  std::string dataset;
  std::string speculate = "off";
  std::string draft_model;
  std::int32_t speculate_tokens = 4;
};

CLI::App* add_serve(CLI::App* bench, bench::ServeBenchOptions& o, HttpFlags& h) {
  CLI::App* serve = bench->add_subcommand(
      "serve",
      "N requests through the Runner in-process, or over HTTP (--http: cellm's server started "
      "in-process; --url: any OpenAI-compatible server): throughput, TTFT, TPOT, ITL, E2E");
  serve
      ->add_option("--model", o.model,
                   "shape name (llama-3.2-1b, llama-3.1-8b, qwen3-0.6b, smollm2-135m, "
                   "gemma3-270m; random weights, no tokenizer) or a model path")
      ->capture_default_str();
  serve->add_option("--backend", o.backend, "auto, cpu or cuda")->capture_default_str();
  serve->add_flag("--keep-quantized", o.keep_quantized, kKeepQuantizedHelp);
  add_quantize_option(*serve, o.quantize);
  add_kv_dtype_option(*serve, o.kv_dtype);
  serve->add_option("--requests,--num-prompts", o.requests, "requests to send")
      ->capture_default_str();
  serve
      ->add_option("--input-len,--random-input-len", o.input_len,
                   "prompt tokens per request (after the prefix)")
      ->capture_default_str();
  serve
      ->add_option("--output-len,--random-output-len", o.output_len,
                   "tokens each request generates (no stop token)")
      ->capture_default_str();
  serve
      ->add_option("--range-ratio,--random-range-ratio", o.range_ratio,
                   "draw lengths uniformly from [L*(1-r), L*(1+r)]; 0 fixes them")
      ->capture_default_str();
  serve->add_option("--prefix-len", o.prefix_len, "random tokens shared by every prompt")
      ->capture_default_str();
  serve->add_flag("!--no-prefix-reuse", o.reuse_prefix,
                  "in-process: prefill the shared prefix with every request instead of cloning "
                  "it once");
  add_rate_option(serve, o);
  serve
      ->add_option("--max-concurrency", o.max_concurrency,
                   "requests in flight at once (0: no limit); sizes the KV pool")
      ->capture_default_str();
  serve
      ->add_option("--prefill-chunk", o.prefill_chunk,
                   "prompt tokens a session prefills per step (0: cellm serve's default, 256)")
      ->capture_default_str();
  serve
      ->add_option("--max-batch-tokens", o.max_batch_tokens,
                   "tokens per engine step (0: concurrency + 2 prefill chunks)")
      ->capture_default_str();
  serve
      ->add_option("--progress", o.progress_s,
                   "seconds between progress lines on stderr (when no bar is drawn); 0: none")
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

  serve->add_flag("--http", h.http,
                  "send the load over HTTP to cellm's server, started in-process on 127.0.0.1");
  serve->add_option("--url", h.url,
                    "send the load over HTTP to this OpenAI-compatible server "
                    "(http://host:port[/v1]) instead");
  serve->add_option("--served-model-name", h.served_model,
                    "HTTP: the request's model field (default: the first of GET /v1/models)");
  serve->add_option("--api-key", h.api_key, "HTTP: sent as Authorization: Bearer KEY");
  serve->add_option("--prompt-format", h.prompt_format, "HTTP: ids (token-id prompts) or text")
      ->check(CLI::IsMember({"ids", "text"}))
      ->capture_default_str();
  serve->add_option("--vocab-size", h.vocab_size,
                    "--url with token ids: draw them below this (0: 32000)");
  serve->add_flag("--ignore-eos,!--no-ignore-eos", h.ignore_eos,
                  "HTTP: run every request to its max_tokens past EOS (default: on for random "
                  "prompts, off with --dataset)");
  serve->add_option("--dataset", h.dataset,
                    "HTTP: JSONL requests instead of random prompts, one a line: "
                    "{\"messages\": [...], \"max_tokens\": N} (chat) or {\"prompt\": \"...\", "
                    "\"max_tokens\": N}; cycled when --num-prompts exceeds the lines; needs a "
                    "model with a tokenizer");
  serve
      ->add_option("--speculate", h.speculate,
                   "--http: the server's speculative decoding, as cellm serve takes it: off, "
                   "ngram (prompt lookup) or draft (--draft-model)")
      ->check(CLI::IsMember({"off", "ngram", "draft"}))
      ->capture_default_str();
  serve->add_option("--draft-model", h.draft_model,
                    "--http with --speculate draft: the draft model (sharing the tokenizer)");
  serve
      ->add_option("--speculate-tokens", h.speculate_tokens,
                   "--http: most drafts verified per step and session")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  serve->add_flag("--inprocess,!--no-inprocess", h.inprocess,
                  "HTTP: also run the load through the Runner in-process and report the ratio "
                  "(default: on with --http, off with --url)");
  serve
      ->add_option("--prefix-cache-entries", h.prefix_cache_entries,
                   "--http: the server's prefix cache (random prompts share nothing)")
      ->capture_default_str();
  serve->add_option("--json-schema", h.json_schema,
                    "HTTP: send every request with response_format json_schema of this file (a "
                    "JSON Schema, or a bench/schemas file); needs a model with a tokenizer");
  serve->add_option("--request-timeout", h.request_timeout_s, "HTTP: seconds per request")
      ->capture_default_str();
  serve
      ->add_option("--progress-bar", h.progress_bar,
                   "HTTP: auto (a bar when stderr is a terminal), on, or off (lines)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  serve->add_option("--plot", h.plot,
                    "HTTP: draw TTFT/ITL distributions and throughput to this PNG "
                    "(bench/plot_serve.py, needs matplotlib)");
  return serve;
}

int run_serve(const bench::ServeBenchOptions& o, const HttpFlags& h, CLI::App* serve) {
  const bool over_http = h.http || !h.url.empty();
  if (!over_http) {
    for (const char* name :
         {"--served-model-name", "--api-key", "--prompt-format", "--vocab-size", "--no-ignore-eos",
          "--inprocess", "--prefix-cache-entries", "--request-timeout", "--progress-bar", "--plot",
          "--json-schema", "--dataset", "--speculate", "--draft-model", "--speculate-tokens"}) {
      if (serve->count(name) > 0) {
        std::fprintf(stderr, "cellm bench serve: %s applies over HTTP only: add --http or --url\n",
                     name);
        return 1;
      }
    }
    auto report = bench::run_serve_bench(o, stdout);
    if (!report.ok()) {
      std::fprintf(stderr, "cellm bench serve: %s\n", report.status().to_string().c_str());
      return 1;
    }
    return report->failed > 0 ? 3 : 0;
  }
#ifdef CELLM_HAVE_SERVER
  if (h.http && !h.url.empty()) {
    std::fprintf(stderr,
                 "cellm bench serve: give --http (cellm's server in-process) or --url, "
                 "not both\n");
    return 1;
  }
  if (!h.url.empty() && serve->count("--kv-dtype") > 0) {
    std::fprintf(stderr,
                 "cellm bench serve: --kv-dtype sets the K/V of cellm's own server (--http) or "
                 "of the in-process run; a --url server keeps its own\n");
    return 1;
  }
  bench::HttpBenchOptions ho;
  ho.load = o;
  ho.url = h.url;
  ho.served_model = h.served_model;
  ho.api_key = h.api_key;
  ho.prompt_format =
      h.prompt_format == "text" ? bench::PromptFormat::kText : bench::PromptFormat::kTokenIds;
  ho.vocab_size = h.vocab_size;
  if (!h.dataset.empty()) {
    std::vector<std::string> given;
    for (const char* name : {"--input-len", "--output-len", "--range-ratio", "--prefix-len",
                             "--prompt-format", "--vocab-size"}) {
      if (serve->count(name) > 0) given.emplace_back(name);
    }
    if (const Status s = bench::check_dataset_options(given); !s.is_ok()) {
      std::fprintf(stderr, "cellm bench serve: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    auto dataset = bench::read_dataset(h.dataset);
    if (!dataset.ok()) {
      std::fprintf(stderr, "cellm bench serve: %s\n",
                   std::string(dataset.status().message()).c_str());
      return 1;
    }
    ho.dataset_path = h.dataset;
    ho.dataset = std::move(*dataset);
  }
  // A dataset's outputs end where the model ends them unless asked otherwise.
  ho.ignore_eos = serve->count("--ignore-eos") > 0 ? h.ignore_eos : h.dataset.empty();
  ho.speculate = h.speculate;
  ho.draft_model = h.draft_model;
  ho.speculate_tokens = h.speculate_tokens;
  if (serve->count("--inprocess") + serve->count("--no-inprocess") > 0) {
    ho.compare_inprocess = h.inprocess;
  }
  ho.prefix_cache_entries = h.prefix_cache_entries;
  ho.request_timeout_s = h.request_timeout_s;
  ho.progress = h.progress_bar == "on"    ? bench::ProgressMode::kBar
                : h.progress_bar == "off" ? bench::ProgressMode::kLines
                                          : bench::ProgressMode::kAuto;
  ho.plot_path = h.plot;
  if (!h.json_schema.empty()) {
    auto schema = bench::read_json_schema(h.json_schema);
    if (!schema.ok()) {
      std::fprintf(stderr, "cellm bench serve: %s\n", schema.status().to_string().c_str());
      return 1;
    }
    ho.json_schema_file = h.json_schema;
    ho.json_schema = std::move(*schema);
  }
  auto report = bench::run_http_serve_bench(ho, stdout);
  if (!report.ok()) {
    std::fprintf(stderr, "cellm bench serve: %s\n", report.status().to_string().c_str());
    return 1;
  }
  return report->failed > 0 ? 3 : 0;
#else
  (void)serve;
  std::fprintf(stderr,
               "cellm bench serve: --http and --url need the HTTP server, which this build lacks "
               "(configure with -DCELLM_SERVER=ON; cpp-httplib from scripts/setup)\n");
  return 1;
#endif
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto opts = std::make_shared<bench::StepBenchOptions>();
  auto serve_opts = std::make_shared<bench::ServeBenchOptions>();
  auto http = std::make_shared<HttpFlags>();
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
  step->add_option("--backend", opts->backend, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  step->add_option("--cpu-program", opts->cpu_program,
                   "CPU program: fast (default) or reference (float32)")
      ->check(CLI::IsMember({"fast", "reference"}));
  step->add_option("--threads", opts->threads, "CPU threads (0: every core)")
      ->check(CLI::NonNegativeNumber);
  step->add_flag("--keep-quantized", opts->keep_quantized, kKeepQuantizedHelp);
  add_quantize_option(*step, opts->quantize);
  add_kv_dtype_option(*step, opts->kv_dtype);
  step->add_option("--verify-drafts", opts->verify_drafts,
                   "also time speculative verification steps: each session feeds 1 + K rows "
                   "(K drafts, 1..16), against the plain step (CUDA)")
      ->delimiter(',');
  step->add_option("--speculate", opts->speculate,
                   "decode points with speculative decoding on, as serve runs it (CUDA)")
      ->check(CLI::IsMember({"ngram"}));
  auto no_prefill = std::make_shared<bool>(false);
  step->add_flag("--no-prefill", *no_prefill, "decode points only (e.g. under a profiler)");
  CLI::App* serve = add_serve(bench, *serve_opts, *http);
  auto mask_opts = std::make_shared<bench::MaskBenchOptions>();
  CLI::App* mask = bench->add_subcommand(
      "mask",
      "constrained decoding: the token mask's host cost per token (median, p99) over a "
      "schema set, and the served step time with N constrained sessions over a fake "
      "executor whose forward sleeps");
  mask->add_option("--model", mask_opts->models, "GGUF models whose tokenizers to use")
      ->delimiter(',')
      ->capture_default_str();
  mask->add_option("--schemas", mask_opts->schemas,
                   "folder of {\"schema\", \"example\"} JSON files")
      ->capture_default_str();
  mask->add_option("--json", mask_opts->json_path, "append JSON lines to this file");
  mask->add_option("--machine", mask_opts->machine, "machine name recorded in the JSON lines");
  mask->add_option("--sessions", mask_opts->sessions,
                   "constrained sessions of the served-step part (0: skip it)")
      ->capture_default_str();
  mask->add_option("--forward-ms", mask_opts->forward_ms, "the fake forward's sleep")
      ->capture_default_str();
  CLI::Option* step_batch = step->get_option("--batch");
  CLI::Option* step_context = step->get_option("--context");
  CLI::Option* step_prompt = step->get_option("--prompt");
  return [opts, serve_opts, http, quick, no_prefill, serve, mask, mask_opts, step_batch,
          step_context, step_prompt] {
    if (serve->parsed()) return run_serve(*serve_opts, *http, serve);
    if (mask->parsed()) {
      const Status s = bench::run_mask_bench(*mask_opts, stdout);
      if (!s.is_ok()) {
        std::fprintf(stderr, "cellm bench mask: %s\n", s.to_string().c_str());
        return 1;
      }
      return 0;
    }
    // The CPU bench keeps only what was given of the GPU sweep.
    opts->batches_given = step_batch->count() > 0 || *quick;
    opts->contexts_given = step_context->count() > 0 || *quick;
    opts->prompts_given = step_prompt->count() > 0 || *quick || *no_prefill;
    if (*quick) {
      opts->batches = {1, 16, 64};
      opts->contexts = {512, 2048};
      opts->prompts = {512, 2048};
    }
    if (*no_prefill) opts->prompts.clear();
    Status s = bench::run_step_bench(*opts, stdout);
    if (!s.is_ok()) {
      std::fprintf(stderr, "cellm bench: %s\n", s.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace cellm::cli
