// `cellm run [MODEL] -p PROMPT`: one prompt, its continuation streamed to
// stdout as it is generated; --chat wraps the prompt in the model's chat
// template; --stop STR (repeatable) ends it where STR appears (the engine
// matches it; STR itself is not printed); --json prints the metrics as one
// JSON line on stderr.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/generate.h"

namespace cellm::cli {
namespace {

struct RunArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string prompt;
  std::string system;
  bool chat = false;
  bool json = false;
};

int run(const RunArgs& args) {
  // The engine's own check, before the model loads: a bad --stop is an
  // error at start-up, not a failed generation.
  GenConfig probe;
  probe.stop_strings = args.sampling.stop;
  if (Status s = check_gen_config(probe); !s.is_ok()) {
    std::fprintf(stderr, "cellm: --stop: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  auto engine = load_engine(args.model, /*show_progress=*/!args.json);
  if (!engine) return 1;
  std::string text = args.prompt;
  bool add_special = true;
  if (args.chat) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!args.system.empty()) messages.push_back({{"role", "system"}, {"content", args.system}});
    messages.push_back({{"role", "user"}, {"content", args.prompt}});
    auto rendered = engine->render_chat(messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) {
      std::fprintf(stderr, "cellm: %s\n", rendered.status().to_string().c_str());
      return 1;
    }
    text = *rendered;
    add_special = false;  // the template already placed BOS where the model wants it
  }
  auto delta = engine->encode(text, add_special);
  if (!delta.ok()) {
    std::fprintf(stderr, "cellm: %s\n", delta.status().to_string().c_str());
    return 1;
  }
  if (delta->empty()) {
    std::fprintf(stderr, "cellm: the prompt encodes to no tokens; give a non-empty prompt\n");
    return 1;
  }
  if (static_cast<std::int64_t>(delta->size()) >= engine->max_session_tokens()) {
    std::fprintf(stderr,
                 "cellm: the prompt has %zu tokens but a session holds at most %d; shorten it or "
                 "raise --max-session-tokens\n",
                 delta->size(), engine->max_session_tokens());
    return 1;
  }
  StreamResult result =
      stream_generation(*engine, std::move(*delta), args.sampling, [](std::string_view piece) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      });
  std::fputc('\n', stdout);
  if (args.json) std::fprintf(stderr, "%s\n", metrics_json(result, *engine).c_str());
  if (result.reason == FinishReason::kFailed) {
    std::fprintf(stderr, "cellm: generation failed: %s\n", result.error.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "generate a continuation of one prompt");
  add_model_options(*cmd, args->model);
  add_sampling_options(*cmd, args->sampling);
  cmd->add_option("-p,--prompt", args->prompt, "the prompt")->required();
  cmd->add_option("--stop", args->sampling.stop,
                  "end the generation where this text appears (not printed); repeatable, at "
                  "most 16, 1 to 256 bytes each")
      ->allow_extra_args(false);
  cmd->add_flag("--chat", args->chat, "format the prompt with the model's chat template");
  cmd->add_option("--system", args->system, "system message (with --chat)");
  cmd->add_flag("--json", args->json, "print the metrics as JSON on stderr");
  return [args] { return run(*args); };
}

}  // namespace cellm::cli
