// stream_completion: loads a model and streams a completion of a prompt to
// stdout, token by token, through cellm's public API (<cellm/engine.h>).
//
//   stream_completion MODEL PROMPT [MAX_TOKENS] [--chat]
//
// MODEL is a .gguf file or a Hugging Face folder. With --chat the prompt is
// sent as a user message through the model's chat template. Sampling follows
// the model's defaults (greedy when it ships none). Exit status 0 when the
// generation ended normally, 1 on any error (the reason goes to stderr).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <string_view>
#include <vector>

#include <cellm/engine.h>
#include <cellm/runner.h>

namespace {

int usage() {
  std::fprintf(stderr, "usage: stream_completion MODEL PROMPT [MAX_TOKENS] [--chat]\n");
  return 2;
}

int fail(std::string_view what, const cellm::Status& status) {
  std::fprintf(stderr, "stream_completion: %.*s: %s\n", static_cast<int>(what.size()), what.data(),
               status.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string_view> args;
  bool chat = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--chat") {
      chat = true;
    } else {
      args.emplace_back(argv[i]);
    }
  }
  if (args.size() < 2 || args.size() > 3) return usage();
  long max_tokens = 64;
  if (args.size() == 3) {
    char* end = nullptr;
    const std::string text(args[2]);
    max_tokens = std::strtol(text.c_str(), &end, 10);
    if (end == text.c_str() || *end != '\0' || max_tokens <= 0) {
      std::fprintf(stderr, "stream_completion: MAX_TOKENS must be a positive integer, got '%s'\n",
                   text.c_str());
      return 2;
    }
  }

  // The library logs its loading steps at info level; keep stdout and
  // stderr for the completion and for problems.
  if (cellm::Status s = cellm::set_log_level("warn"); !s.is_ok()) return fail("log level", s);

  cellm::EngineOptions options;
  options.model = std::string(args[0]);
  options.max_sessions = 1;  // one generation at a time: the smallest KV pool
  auto opened = cellm::Engine::open(options);
  if (!opened.ok()) return fail("loading the model", opened.status());
  cellm::Engine& engine = **opened;

  std::string prompt(args[1]);
  bool add_special = true;
  if (chat) {
    const cellm::ChatMessage message{"user", prompt};
    auto rendered = engine.render_chat({&message, 1});
    if (!rendered.ok()) return fail("rendering the chat template", rendered.status());
    prompt = *rendered;
    add_special = false;  // the template writes BOS itself
  }
  auto tokens = engine.encode(prompt, add_special);
  if (!tokens.ok()) return fail("encoding the prompt", tokens.status());
  if (tokens->empty()) {
    std::fprintf(stderr, "stream_completion: the prompt encodes to no tokens; give a non-empty one\n");
    return 2;
  }

  // Callbacks run on the engine thread, one at a time and in order: the
  // stream needs no lock. The main thread only waits for on_done.
  cellm::TextStream stream = engine.text_stream();
  std::string error;
  std::promise<cellm::RequestOutcome> done;
  cellm::Request request;
  request.prompt = std::move(*tokens);
  request.config = engine.generation_config(max_tokens);
  cellm::RequestCallbacks callbacks;
  callbacks.on_update = [&stream, &error](std::int32_t /*choice*/,
                                          const cellm::GenerationUpdate& update) {
    std::string text;
    for (cellm::Token t : update.tokens) text += stream.push(t);
    if (update.finish_reason) {
      text += stream.finish();
      error = update.error_message;
    }
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  callbacks.on_done = [&done](const cellm::RequestOutcome& outcome) { done.set_value(outcome); };
  auto submitted = engine.runner().submit(std::move(request), std::move(callbacks));
  if (!submitted.ok()) return fail("submitting the request", submitted.status());
  const cellm::RequestOutcome outcome = done.get_future().get();
  std::fputc('\n', stdout);

  const cellm::FinishReason reason = outcome.finish_reasons.at(0);
  if (reason == cellm::FinishReason::kFailed || reason == cellm::FinishReason::kCancelled) {
    std::fprintf(stderr, "stream_completion: the generation ended %s%s%s\n",
                 std::string(cellm::finish_reason_name(reason)).c_str(), error.empty() ? "" : ": ",
                 error.c_str());
    return 1;
  }
  std::fprintf(stderr, "[%s on %s: %lld prompt tokens, %lld generated, %s]\n",
               engine.model_name().c_str(), engine.backend_name().c_str(),
               static_cast<long long>(outcome.usage.prompt_tokens),
               static_cast<long long>(outcome.usage.completion_tokens),
               std::string(cellm::finish_reason_name(reason)).c_str());
  return 0;
}
