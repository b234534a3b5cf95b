#include "cli/generate.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/model_path.h"
#include "cli/commands.h"
#include "text/detokenizer.h"
#include "text/stop_cut.h"
#include "text/tokenizer.h"

namespace cellm::cli {

std::optional<std::filesystem::path> find_model_or_report(const std::string& model) {
  Result<std::filesystem::path> found = app::resolve_model(model, app::ModelSearch::from_process());
  if (!found.ok()) {
    std::fprintf(stderr, "cellm: %s\n", std::string(found.status().message()).c_str());
    return std::nullopt;
  }
  return *found;
}

SamplingGiven SamplingArgs::given() const {
  SamplingGiven g;
  g.temperature = temperature_option != nullptr && temperature_option->count() > 0;
  g.top_p = top_p_option != nullptr && top_p_option->count() > 0;
  g.top_k = top_k_option != nullptr && top_k_option->count() > 0;
  g.repetition_penalty =
      repetition_penalty_option != nullptr && repetition_penalty_option->count() > 0;
  return g;
}

void add_quantize_option(CLI::App& cmd, model::Quantize& out) {
  cmd.add_option_function<std::string>(
         "--quantize",
         [&out](const std::string& name) {
           Result<model::Quantize> q = model::parse_quantize(name);
           if (!q.ok()) throw CLI::ValidationError(std::string(q.status().message()));
           out = *q;
         },
         kQuantizeHelp)
      ->type_name("fp8|none");
}

void add_kv_dtype_option(CLI::App& cmd, DType& out) {
  cmd.add_option_function<std::string>(
         "--kv-dtype",
         [&out](const std::string& name) {
           Result<DType> dtype = parse_kv_dtype(name);
           if (!dtype.ok()) throw CLI::ValidationError(std::string(dtype.status().message()));
           out = *dtype;
         },
         kKvDtypeHelp)
      ->type_name("bf16|fp8|f32");
}

void add_model_options(CLI::App& cmd, ModelArgs& args) {
  cmd.add_option("model", args.model, app::model_search_help());
  cmd.add_option("--backend", args.backend, "auto, cpu or cuda")->capture_default_str();
  cmd.add_option("--cpu-program", args.cpu_program,
                 "CPU program: fast (quantized SIMD kernels, default) or reference (float32)")
      ->check(CLI::IsMember({"fast", "reference"}));
  cmd.add_option("--threads", args.threads, "CPU threads (0: every core)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_flag("--keep-quantized", args.keep_quantized, kKeepQuantizedHelp);
  add_quantize_option(cmd, args.quantize);
  add_kv_dtype_option(cmd, args.kv_dtype);
  cmd.add_option("--max-sessions", args.max_sessions, "sessions the KV pool is sized for")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd.add_option("--max-session-tokens", args.max_session_tokens,
                 "per-session token limit (0: the model's context, as memory allows)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--speculate", args.speculate,
                 "speculative decoding: off, ngram (drafts copied from the prompt and output) "
                 "or draft (drafts from --draft-model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "ngram", "draft"}));
  cmd.add_option("--draft-model", args.draft_model,
                 "with --speculate draft: a smaller model sharing the tokenizer (folder or .gguf)");
  cmd.add_option("--speculate-tokens", args.speculate_tokens, "most drafts verified per step")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
}

void add_sampling_options(CLI::App& cmd, SamplingArgs& args) {
  cmd.add_option("-n,--max-tokens", args.max_tokens, "tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  // Unset: the model's default (generation_config.json / GGUF), else the value shown.
  args.temperature_option =
      cmd.add_option("--temperature", args.temperature, "0 = greedy (unset: the model's default)")
          ->capture_default_str()
          ->check(CLI::Range(0.0f, 10.0f));
  args.top_p_option =
      cmd.add_option("--top-p", args.top_p, "nucleus mass kept, 1 = off (unset: the model's)")
          ->capture_default_str()
          ->check(CLI::Range(0.0f, 1.0f));
  args.top_k_option =
      cmd.add_option("--top-k", args.top_k, "tokens kept, 0 = off (unset: the model's)")
          ->capture_default_str()
          ->check(CLI::NonNegativeNumber);
  // Hugging Face's rule over prompt and output: > 1 discourages repeats.
  args.repetition_penalty_option =
      cmd.add_option("--repetition-penalty", args.repetition_penalty,
                     "divides positive logits of seen tokens (multiplies negative ones), 1 = off "
                     "(unset: the model's)")
          ->capture_default_str()
          ->check(CLI::Range(0.01f, 100.0f));
  cmd.add_option("--seed", args.seed, "makes sampling reproducible");
}

std::unique_ptr<app::Engine> load_engine(const ModelArgs& args, bool show_progress,
                                         std::int32_t prefix_cache_entries) {
  app::EngineOptions options;
  std::optional<std::filesystem::path> model = find_model_or_report(args.model);
  if (!model) return nullptr;
  options.model = *model;
  options.backend = args.backend;
  options.cpu_program = args.cpu_program;
  options.program.keep_quantized = args.keep_quantized;
  options.quantize = args.quantize;
  options.kv_dtype = args.kv_dtype;
  options.threads = args.threads;
  options.max_sessions = args.max_sessions;
  options.max_session_tokens = args.max_session_tokens;
  options.speculate = args.speculate;
  options.speculate_tokens = args.speculate_tokens;
  options.draft_model = args.draft_model;
  options.prefix_cache_entries = prefix_cache_entries;
  app::ProgressCallback progress;
  if (show_progress) {
    progress = [](const app::LoadProgress& p) {
      std::fprintf(stderr, "\r\033[2Kloading: %3.0f%% %s", p.fraction * 100.0, p.stage.c_str());
      if (p.fraction >= 1.0) std::fputc('\n', stderr);
      std::fflush(stderr);
    };
  }
  auto engine = app::Engine::load(options, progress);
  if (!engine.ok()) {
    if (show_progress) std::fputc('\n', stderr);
    std::fprintf(stderr, "cellm: %s\n", engine.status().to_string().c_str());
    return nullptr;
  }
  return std::move(engine).value();
}

StreamResult stream_generation(app::Engine& engine, std::vector<Token> prompt,
                               const SamplingArgs& sampling,
                               const std::function<void(std::string_view)>& sink,
                               const std::atomic<bool>* cancel) {
  StreamResult result;
  Request request;
  request.prompt = std::move(prompt);
  GenConfig& config = request.config;
  config.max_new_tokens = sampling.max_tokens;
  config.sampling.temperature = sampling.temperature;
  config.sampling.repetition_penalty = sampling.repetition_penalty;
  config.sampling.top_p = sampling.top_p;
  config.sampling.top_k = sampling.top_k;
  apply_sampling_defaults(engine.generation_defaults(), sampling.given(), config.sampling);
  config.seed = sampling.seed;
  config.stop_tokens = engine.stop_tokens();
  config.stop_strings = sampling.stop;

  text::StreamingDetokenizer detok(engine.tokenizer(), /*skip_special=*/true);
  // Holds back text that may begin a stop string; cuts at the engine's match.
  text::StopCut cut(sampling.stop);
  RequestCallbacks callbacks;
  // Both run on the engine thread; this thread reads `result` only after
  // the handle reports done.
  callbacks.on_update = [&](std::int32_t, const GenerationUpdate& update) {
    std::string text;
    for (Token t : update.tokens) {
      result.tokens.push_back(t);
      text += detok.push(static_cast<std::int32_t>(t));
    }
    if (!update.finish_reason) {
      std::string piece = cut.push(text);
      if (!piece.empty()) {
        result.text += piece;
        sink(piece);
      }
    } else {
      text += detok.finish();
      std::optional<std::int64_t> from_match;
      if (update.stop_string)
        from_match = update.stop_string->text_bytes - update.stop_string->offset;
      std::string rest = cut.finish(text, from_match);
      if (!rest.empty()) {
        result.text += rest;
        sink(rest);
      }
      result.reason = *update.finish_reason;
      result.error = update.error_message;
    }
  };
  callbacks.on_done = [&](const RequestOutcome& outcome) {
    if (!outcome.metrics.empty()) result.metrics = outcome.metrics[0];
    result.cached_tokens = outcome.usage.cached_tokens;
  };
  Result<RequestHandle> handle = engine.runner().submit(std::move(request), std::move(callbacks));
  if (!handle.ok()) {
    result.reason = FinishReason::kFailed;
    result.error = handle.status().to_string();
    return result;
  }
  if (cancel == nullptr) {
    handle->wait();
  } else {
    // A signal handler sets the flag and nothing wakes this (the user's)
    // thread then, so look every few ms; the engine never waits for it.
    bool cancelled = false;
    while (!handle->done()) {
      if (!cancelled && cancel->load()) {
        handle->cancel();
        cancelled = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return result;
}

std::string metrics_json(const StreamResult& result, const app::Engine& engine) {
  const GenerationMetrics& m = result.metrics;
  nlohmann::json j{{"model", engine.model_name()},
                   {"backend", engine.backend_name()},
                   {"finish_reason", std::string(finish_reason_name(result.reason))},
                   {"prompt_tokens", m.n_prompt_tokens},
                   {"prefilled_tokens", m.n_prefilled_tokens},
                   {"generated_tokens", m.n_generated_tokens},
                   {"ttft_ms", static_cast<double>(m.ttft_us()) / 1000.0},
                   {"e2e_ms", static_cast<double>(m.e2e_us()) / 1000.0},
                   {"itl_mean_ms", m.itl_mean_us() / 1000.0},
                   {"decode_tokens_per_s", m.decode_tokens_per_sec()},
                   {"prefill_tokens_per_s", m.prefill_tokens_per_sec()}};
  if (m.n_draft_tokens > 0) {
    j["draft_tokens"] = m.n_draft_tokens;
    j["accepted_draft_tokens"] = m.n_accepted_draft_tokens;
  }
  if (!result.error.empty()) j["error"] = result.error;
  return j.dump();
}

}  // namespace cellm::cli
