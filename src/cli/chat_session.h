// The conversation side of `cellm chat`, free of terminals and engines so it
// can be unit-tested: the messages, the slash commands that edit or save
// them, and trimming the oldest turns so that the next answer fits the
// session (a full context never ends the chat).
//
// Thread-safety: plain values and pure functions; a Conversation is used by
// one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cellm/status.h"

namespace cellm::cli {

struct ChatMessage {
  std::string role;  // "user" or "assistant"
  std::string content;
};

// The system message and the turns after it: user messages, each followed by
// its answer, the last user message possibly still waiting for one.
class Conversation {
 public:
  explicit Conversation(std::string system = {}) : system_(std::move(system)) {}

  // Empty: none (the chat template may then add its own default).
  const std::string& system() const { return system_; }
  void set_system(std::string text) { system_ = std::move(text); }

  // Forgets every turn; the system message stays.
  void reset() { turns_.clear(); }
  void add_user(std::string text);
  void add_assistant(std::string text);
  // Removes the last message (a question that got no answer). No-op when empty.
  void pop_last();
  // Removes the oldest `n` user messages with their answers (all of them when
  // there are fewer).
  void drop_oldest_turns(std::size_t n);

  const std::vector<ChatMessage>& turns() const { return turns_; }
  std::size_t user_turns() const;

  // The OpenAI-style list: the system message when set, then the turns.
  nlohmann::ordered_json messages() const;
  // Writes {"messages": [...]} (messages() pretty-printed) to `path`,
  // replacing the file. The error names the path and the system's reason.
  Status save(const std::filesystem::path& path) const;

 private:
  std::string system_;
  std::vector<ChatMessage> turns_;
};

// Tokens of `messages` rendered through the chat template for the next answer
// (the generation prompt included).
using CountTokens = std::function<Result<std::int64_t>(const nlohmann::ordered_json& messages)>;

struct FitResult {
  bool fits = false;
  std::size_t dropped_turns = 0;  // oldest user messages (with answers) removed
  // The prompt's tokens: after trimming when it fits; else of the system
  // message and the last message alone (what did not fit).
  std::int64_t prompt_tokens = 0;
};

// Makes room for an answer of up to `answer_tokens` within `limit` positions
// by dropping the fewest oldest turns; never the system message or the last
// message. When even those two do not fit, the conversation is left as it
// was and fits is false. Count errors are returned as they are.
Result<FitResult> fit_conversation(Conversation& conversation, const CountTokens& count,
                                   std::int64_t answer_tokens, std::int64_t limit);

enum class ChatInputKind { kEmpty, kMessage, kQuit, kReset, kSystem, kSave, kHelp, kUnknown };

struct ChatInput {
  ChatInputKind kind = ChatInputKind::kEmpty;
  // kMessage: the text to send; kSystem, kSave: the argument (may be empty);
  // kUnknown: the command as typed ("/foo").
  std::string text;
};

// One typed line: blank lines are kEmpty, "/word ..." a command, "//..." a
// message that starts with "/", anything else a message. Surrounding
// whitespace is dropped.
ChatInput parse_chat_input(std::string_view line);

struct CommandReply {
  std::string text;  // what to tell the user (one or more lines, no trailing newline)
  bool quit = false;
};

// Runs a command (any kind but kMessage and kEmpty) on `conversation`.
// `home` expands a leading "~/" in /save's path (empty: no expansion).
CommandReply run_chat_command(Conversation& conversation, const ChatInput& input,
                              const std::string& home = {});

// The /help text.
std::string chat_help();

}  // namespace cellm::cli
