// `cellm chat [MODEL]`: a multi-turn conversation through the model's chat
// template. On a terminal: line editing and a persisted history (libedit),
// Ctrl-C stops an answer, slash commands (/help). From a pipe: one message
// per line, answers alone on stdout. The conversation logic lives in
// chat_session (unit-tested), the engine side in chat_model, the terminal
// side in line_reader; this file wires them together.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "app/chat_probe.h"
#include "cli/chat_model.h"
#include "cli/chat_session.h"
#include "cli/commands.h"
#include "cli/generate.h"
#include "cli/line_reader.h"
#include "core/env.h"

namespace cellm::cli {
namespace {

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling;
  std::string system;
  bool no_history = false;
};

void say(const std::string& text) {
  std::fprintf(stderr, "%s\n", text.c_str());
}

// The chat template decides whether chat can work at all: refuse before
// spending the time and memory of loading the weights. Returns the model's
// arguments with MODEL resolved to its path, or nullopt after saying why not.
std::optional<ModelArgs> model_that_can_chat(const ModelArgs& args) {
  std::optional<std::filesystem::path> path = find_model_or_report(args.model);
  if (!path) return std::nullopt;
  const Status usable = app::probe_chat_template(*path);
  if (!usable.is_ok()) {
    if (usable.code() == StatusCode::kNotFound || usable.code() == StatusCode::kNotSupported) {
      say(fmt::format("cellm: {}, so it cannot chat; use `cellm run` to complete text with it",
                      usable.message()));
    } else {
      say("cellm: " + usable.to_string());
    }
    return std::nullopt;
  }
  ModelArgs resolved = args;
  resolved.model = path->string();
  return resolved;
}

// One turn: make it fit, stream the answer, keep it. False only when the
// chat cannot go on.
bool take_turn(app::Engine& engine, ChatModel& model, Conversation& conversation,
               const SamplingArgs& sampling, bool terminal) {
  const std::int64_t limit = engine.max_session_tokens();
  auto count = [&](const nlohmann::ordered_json& m) { return model.count_tokens(m); };
  auto fit = fit_conversation(conversation, count, sampling.max_tokens, limit);
  if (!fit.ok()) {
    say("cellm: " + fit.status().to_string());
    conversation.pop_last();
    return true;
  }
  if (!fit->fits) {
    say(fmt::format(
        "cellm: that message does not fit: it takes {} tokens{}, and with room for "
        "an answer of --max-tokens {} the session's {} are exceeded; type something "
        "shorter (or lower --max-tokens, or raise --max-session-tokens)",
        fit->prompt_tokens, conversation.system().empty() ? "" : " with the system message",
        sampling.max_tokens, limit));
    conversation.pop_last();
    return true;
  }
  if (fit->dropped_turns > 0) {
    say(fmt::format("[dropped the {} oldest turn{} to fit the session's {} tokens]",
                    fit->dropped_turns, fit->dropped_turns == 1 ? "" : "s", limit));
  }

  std::optional<InterruptCatcher> catcher;
  if (!terminal) catcher.emplace();  // on a terminal it spans the whole chat
  interrupt_flag().store(false);
  Result<ChatModel::Answer> answer = [&] {
    AnswerInputGuard quiet(terminal);
    auto a = model.answer(
        conversation.messages(), sampling,
        [](std::string_view piece) {
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        &interrupt_flag());
    std::fputc('\n', stdout);
    std::fflush(stdout);
    return a;
  }();
  if (!answer.ok()) {
    say("cellm: " + answer.status().to_string());
    conversation.pop_last();
    return answer.status().code() != StatusCode::kUnavailable;
  }
  if (answer->reason == FinishReason::kCancelled) {
    if (answer->text.empty()) {
      say("[stopped before the answer began; the question was dropped]");
      conversation.pop_last();
      return true;
    }
    // What was shown stays, as it would in a conversation that was cut off.
    say("[stopped; the partial answer stays in the conversation]");
  } else if (answer->reason == FinishReason::kNewTokenLimit) {
    say(fmt::format("[cut at {} tokens; --max-tokens sets the limit]", answer->tokens));
  }
  conversation.add_assistant(std::move(answer->text));
  return true;
}

int chat(const ChatArgs& args) {
  if (args.model.max_session_tokens > 0 &&
      args.sampling.max_tokens >= args.model.max_session_tokens) {
    say(
        fmt::format("cellm: --max-tokens {} leaves no room for the conversation in "
                    "--max-session-tokens {}; lower the first or raise the second",
                    args.sampling.max_tokens, args.model.max_session_tokens));
    return 2;
  }
  const std::optional<ModelArgs> model_args = model_that_can_chat(args.model);
  if (!model_args) return 1;
  auto engine = load_engine(*model_args, /*show_progress=*/true);
  if (!engine) return 1;
  if (!engine->has_chat_template()) {  // the probe's verdict, as the engine saw it
    say(fmt::format("cellm: {} has no usable chat template; use `cellm run` instead",
                    engine->model_name()));
    return 1;
  }
  if (args.sampling.max_tokens >= engine->max_session_tokens()) {
    say(
        fmt::format("cellm: --max-tokens {} leaves no room for the conversation in a session of "
                    "{} tokens; lower it, or raise --max-session-tokens",
                    args.sampling.max_tokens, engine->max_session_tokens()));
    return 2;
  }
  auto model = ChatModel::open(*engine);
  if (!model.ok()) {
    say("cellm: " + model.status().to_string());
    return 1;
  }

  auto reader =
      make_line_reader(args.no_history ? std::filesystem::path() : default_history_file(), &say);
  const bool terminal = reader->interactive();
  std::optional<InterruptCatcher> catcher;
  if (terminal) catcher.emplace();
  const std::string home = env_string("HOME").value_or("");
  Conversation conversation(args.system);
  say(fmt::format("chatting with {} on {}; /help lists the commands, Ctrl-D or /quit leaves",
                  engine->model_name(), engine->backend_name()));
  while (true) {
    ReadResult read = reader->read("> ");
    if (read.kind == ReadResult::Kind::kEnd) break;
    if (read.kind == ReadResult::Kind::kInterrupted) {
      if (read.line.empty()) say("(to leave, type /quit or press Ctrl-D)");
      continue;
    }
    const ChatInput input = parse_chat_input(read.line);
    if (input.kind == ChatInputKind::kEmpty) continue;
    reader->remember(read.line);
    if (input.kind != ChatInputKind::kMessage) {
      const CommandReply reply = run_chat_command(conversation, input, home);
      if (!reply.text.empty()) say(reply.text);
      if (reply.quit) break;
      continue;
    }
    conversation.add_user(input.text);
    if (!take_turn(*engine, *model, conversation, args.sampling, terminal)) return 1;
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
  cmd->add_flag("--no-history", args->no_history,
                "keep no line history on disk (default: $XDG_STATE_HOME/cellm/chat_history)");
  return [args] { return chat(*args); };
}

}  // namespace cellm::cli
