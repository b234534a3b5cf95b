// `cellm chat [MODEL]`: a multi-turn conversation on stdin/stdout through the
// model's chat template. Each turn renders the whole conversation and feeds
// only the tokens the session does not hold yet; if the rendering of the
// history differs from what the session holds, the session is cloned at the
// common prefix (no recomputation of what still matches).
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/generate.h"

namespace cellm::cli {
namespace {

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;
};

std::size_t common_prefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  const auto mismatch = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<std::size_t>(mismatch.first - a.begin());
}

int chat(const ChatArgs& args) {
  auto engine = load_engine(args.model, /*show_progress=*/true);
  if (!engine) return 1;
  if (!engine->has_chat_template()) {
    std::fprintf(stderr, "cellm: %s has no usable chat template; use `cellm run` instead\n",
                 engine->model_name().c_str());
    return 1;
  }
  auto session = engine->runner().open_session_async().get();
  if (!session) {
    std::fprintf(stderr, "cellm: could not open a session\n");
    return 1;
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!args.system.empty()) messages.push_back({{"role", "system"}, {"content", args.system}});
  std::vector<Token> held;  // what the session holds, its pending token included
  std::fprintf(stderr, "chatting with %s on %s; an empty line or end of input quits\n",
               engine->model_name().c_str(), engine->backend_name().c_str());
  std::string line;
  while (true) {
    std::fprintf(stderr, "> ");
    if (!std::getline(std::cin, line) || line.empty()) break;
    messages.push_back({{"role", "user"}, {"content", line}});
    auto rendered = engine->render_chat(messages, /*add_generation_prompt=*/true);
    if (!rendered.ok()) {
      std::fprintf(stderr, "cellm: %s\n", rendered.status().to_string().c_str());
      messages.erase(messages.end() - 1);
      continue;
    }
    auto full = engine->encode(*rendered, /*add_special=*/false);
    if (!full.ok()) {
      std::fprintf(stderr, "cellm: %s\n", full.status().to_string().c_str());
      return 1;
    }
    std::size_t keep = common_prefix(held, *full);
    if (keep < held.size()) {
      // The history re-renders differently from what was generated: continue
      // from a clone at the common (committed) prefix.
      keep = std::min<std::size_t>(keep, static_cast<std::size_t>(session->position()));
      auto clone = session->clone_async(static_cast<Position>(keep)).get();
      if (!clone) {
        std::fprintf(stderr, "cellm: could not rewind the conversation\n");
        return 1;
      }
      *session = std::move(*clone);
      held.resize(keep);
    }
    std::vector<Token> delta(full->begin() + static_cast<std::ptrdiff_t>(keep), full->end());
    if (delta.empty()) delta.push_back(full->back());
    if (static_cast<std::int64_t>(full->size()) + args.sampling.max_tokens >
        engine->max_session_tokens()) {
      std::fprintf(stderr, "cellm: the conversation no longer fits the context (%d tokens)\n",
                   engine->max_session_tokens());
      return 1;
    }
    held.insert(held.end(), delta.begin(), delta.end());
    StreamResult result = stream_generation(*engine, *session, std::move(delta), args.sampling,
                                            [](std::string_view piece) {
                                              std::fwrite(piece.data(), 1, piece.size(), stdout);
                                              std::fflush(stdout);
                                            });
    std::fputc('\n', stdout);
    if (result.reason == FinishReason::kFailed) {
      std::fprintf(stderr, "cellm: generation failed: %s\n", result.error.c_str());
      return 1;
    }
    held.insert(held.end(), result.tokens.begin(), result.tokens.end());
    messages.push_back({{"role", "assistant"}, {"content", result.text}});
  }
  return 0;
}

}  // namespace

Command add_chat(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "hold a conversation through the chat template");
  add_model_options(*cmd, args->model);
  add_sampling_options(*cmd, args->sampling);
  cmd->add_option("--system", args->system, "system message");
  return [args] { return chat(*args); };
}

}  // namespace cellm::cli
