// `cellm serve [MODEL]`: the OpenAI-compatible HTTP server (src/server).
#include <cstdio>
#include <string>

#include "app/draft_factory.h"
#include "app/model_path.h"
#include "cli/commands.h"
#include "cli/generate.h"
#include "server/serve_main.h"

namespace cellm::cli {

Command add_serve(CLI::App& app) {
  auto args = std::make_shared<server::ServeArgs>();
  auto model = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("serve", "serve the OpenAI-compatible HTTP API");
  cmd->add_option("model", *model, app::model_search_help());
  cmd->add_option("--host", args->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "port (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--backend", args->backend, "auto, cpu or cuda")->capture_default_str();
  cmd->add_flag("--keep-quantized", args->keep_quantized, kKeepQuantizedHelp);
  add_quantize_option(*cmd, args->quantize);
  add_kv_dtype_option(*cmd, args->kv_dtype);
  cmd->add_option("--max-sessions", args->max_sessions,
                  "sequences generating at once (0: 64, or as many as the KV memory holds at the "
                  "context); prefix-cache snapshots get sessions of their own")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--max-session-tokens", args->max_session_tokens,
                  "per-session token limit (0: the model's context, as memory allows)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-tokens-default", args->max_tokens_default,
                  "max_tokens of a request that sends none, capped by what the context leaves "
                  "(0: what the context leaves)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--prefill-chunk", args->prefill_chunk,
                  "prompt tokens a request prefills per engine step (0: 256); larger chunks "
                  "serve more tokens/s under load, with longer gaps for the requests decoding")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-batch-tokens", args->max_batch_tokens,
                  "tokens per engine step (0: the decoding sessions plus two prefill chunks)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--speculate", args->speculate,
                  "speculative decoding for small batches: off, ngram (prompt lookup: drafts "
                  "copied from the prompt and output, verified in one step) or draft (drafts "
                  "from --draft-model)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "ngram", "draft"}));
  cmd->add_option("--draft-model", args->draft_model,
                  "with --speculate draft: a smaller model sharing the target's tokenizer "
                  "(Hugging Face folder or .gguf file), run beside it on the same backend");
  cmd->add_option("--speculate-tokens", args->speculate_tokens,
                  "most drafts verified per step and session (the number adapts to acceptance)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  cmd->add_option("--prefix-cache", args->prefix_cache_entries, "prefix-cache entries (0: off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-queue", args->max_queue, "waiting requests before 429")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--body-limit", args->body_limit, "largest request body in bytes (413 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 40));
  cmd->add_option("--drain-timeout", args->drain_timeout_s,
                  "seconds running requests may finish after SIGTERM/SIGINT before they are "
                  "cancelled")
      ->capture_default_str()
      ->check(CLI::Range(0, 24 * 3600));
  cmd->add_option("--served-model-name", args->served_model_name, "name reported by /v1/models");
  cmd->add_option("--api-key", args->api_keys,
                  "require 'Authorization: Bearer KEY' on every route but /, /health and "
                  "(with --metrics-open) /metrics; repeat for several keys")
      ->allow_extra_args(false);
  cmd->add_option("--api-key-file", args->api_key_file,
                  "read accepted keys from PATH, one per line (blank lines and # comments "
                  "skipped); an unreadable or empty file is an error");
  cmd->add_flag("--metrics-open", args->metrics_open,
                "serve /metrics without a key even when keys are required (default: /metrics "
                "needs a key too)");
  cmd->add_option("--cors", args->cors_origins,
                  "allow browser calls from ORIGIN (scheme://host[:port], or * for any); "
                  "repeatable; without it no CORS headers are sent")
      ->allow_extra_args(false);
  return [args, model] {
    // A usage error, refused before the server listens.
    if (const Status s = app::check_speculation_options(args->speculate, args->draft_model);
        !s.is_ok()) {
      std::fprintf(stderr, "cellm: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    // Resolved by run_serve after it listens, so a miss shows in /health too.
    args->model = *model;
    return server::run_serve(*args);
  };
}

}  // namespace cellm::cli
