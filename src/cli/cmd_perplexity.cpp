// `cellm perplexity [MODEL] --file TEXT`: the model's perplexity over a text
// (app/perplexity.h: windows of --context tokens, each window's second half
// scored, all windows batched through the engine as requests). Prints
// "perplexity P ± E over N tokens (W windows of C)"; --json appends the
// figures as one JSON line to a file.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <nlohmann/json.hpp>

#include "app/perplexity.h"
#include "cli/commands.h"
#include "cli/generate.h"
#include "core/env.h"

namespace cellm::cli {
namespace {

struct PerplexityArgs {
  ModelArgs model;
  std::string file;
  int context = 512;
  int max_windows = 0;
  std::string json;
};

int run(const PerplexityArgs& args) {
  std::ifstream in(args.file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cellm: --file %s: cannot read it\n", args.file.c_str());
    return 1;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ModelArgs model = args.model;
  // A window is one session; leave room for its one generated token.
  model.max_session_tokens = std::max(model.max_session_tokens, args.context + 1);
  auto engine = load_engine(model, /*show_progress=*/true);
  if (!engine) return 1;
  auto tokens = engine->encode(text, /*add_special=*/false);
  if (!tokens.ok()) {
    std::fprintf(stderr, "cellm: %s\n", tokens.status().to_string().c_str());
    return 1;
  }
  app::PerplexityOptions o;
  o.context = args.context;
  o.max_windows = args.max_windows;
  if (engine->spec().bos_token_id) o.bos = static_cast<Token>(*engine->spec().bos_token_id);
  auto r = app::measure_perplexity(engine->runner(), *tokens, o);
  if (!r.ok()) {
    std::fprintf(stderr, "cellm: %s\n", r.status().to_string().c_str());
    return 1;
  }
  // exp(mean ± stderr): the interval of the perplexity the stderr implies.
  const double err = r->perplexity * (std::exp(r->nll_stderr) - 1.0);
  std::printf("perplexity %.4f ± %.4f over %lld tokens (%d windows of %d)\n", r->perplexity, err,
              static_cast<long long>(r->scored), r->windows, args.context);
  if (!args.json.empty()) {
    nlohmann::json j{
        {"bench", "perplexity"},
        {"model", engine->model_name()},
        {"file", args.file},
        {"context", args.context},
        {"windows", r->windows},
        {"scored_tokens", r->scored},
        {"perplexity", r->perplexity},
        {"nll_mean", r->nll_mean},
        {"nll_stderr", r->nll_stderr},
        {"backend", args.model.backend},
        {"keep_quantized", args.model.keep_quantized},
        {"quantize", model::quantize_name(args.model.quantize)},
        {"kv_dtype", dtype_name(args.model.kv_dtype)},
        {"cpu_program", args.model.cpu_program.empty() ? "fast" : args.model.cpu_program},
        {"commit", knobs().commit.value_or("unknown")}};
    std::ofstream out(args.json, std::ios::app);
    out << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

Command add_perplexity(CLI::App& app) {
  auto args = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand("perplexity", "the model's perplexity over a text file");
  add_model_options(*cmd, args->model);
  cmd->add_option("--file", args->file, "the text (UTF-8)")->required();
  cmd->add_option("--context", args->context, "tokens a window (its second half is scored)")
      ->capture_default_str()
      ->check(CLI::Range(4, 1 << 20));
  cmd->add_option("--max-windows", args->max_windows, "score at most this many windows (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", args->json, "append the figures as a JSON line to this file");
  return [args] { return run(*args); };
}

}  // namespace cellm::cli
