#include "cli/chat_session.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace cellm::cli {
namespace {

constexpr std::string_view kSpace = " \t\r\n\v\f";

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(kSpace);
  return s.substr(first, last - first + 1);
}

std::string turns_phrase(std::size_t n) {
  return fmt::format("{} turn{}", n, n == 1 ? "" : "s");
}

}  // namespace

void Conversation::add_user(std::string text) {
  turns_.push_back({"user", std::move(text)});
}

void Conversation::add_assistant(std::string text) {
  turns_.push_back({"assistant", std::move(text)});
}

void Conversation::pop_last() {
  if (!turns_.empty()) turns_.pop_back();
}

void Conversation::drop_oldest_turns(std::size_t n) {
  // Erase up to the (n+1)-th user message, so each dropped question takes its
  // answer with it.
  std::size_t users = 0;
  std::size_t end = 0;
  for (; end < turns_.size(); ++end) {
    if (turns_[end].role == "user" && users++ == n) break;
  }
  turns_.erase(turns_.begin(), turns_.begin() + static_cast<std::ptrdiff_t>(end));
}

std::size_t Conversation::user_turns() const {
  std::size_t n = 0;
  for (const ChatMessage& m : turns_) n += m.role == "user" ? 1 : 0;
  return n;
}

nlohmann::ordered_json Conversation::messages() const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  if (!system_.empty()) list.push_back({{"role", "system"}, {"content", system_}});
  for (const ChatMessage& m : turns_) list.push_back({{"role", m.role}, {"content", m.content}});
  return list;
}

Status Conversation::save(const std::filesystem::path& path) const {
  nlohmann::ordered_json doc = {{"messages", messages()}};
  // Invalid UTF-8 (a cut model answer) is replaced rather than refused, so
  // the rest of the conversation is still saved.
  const std::string text = doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return invalid_argument("cannot write {}: {}", path.string(), std::strerror(errno));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  if (std::fclose(f) != 0 || !written) {
    return invalid_argument("cannot write {}: {}", path.string(),
                            std::strerror(written ? errno : write_errno));
  }
  return Status::ok();
}

Result<FitResult> fit_conversation(Conversation& conversation, const CountTokens& count,
                                   std::int64_t answer_tokens, std::int64_t limit) {
  auto tokens_after_dropping = [&](std::size_t n) -> Result<std::int64_t> {
    if (n == 0) return count(conversation.messages());
    Conversation trial = conversation;
    trial.drop_oldest_turns(n);
    return count(trial.messages());
  };
  auto fits = [&](std::int64_t tokens) { return tokens + answer_tokens <= limit; };

  CELLM_ASSIGN_OR_RETURN(const std::int64_t now, tokens_after_dropping(0));
  if (fits(now)) return FitResult{true, 0, now};
  // Every user message but the last may go (the last is the one to answer).
  const std::size_t users = conversation.user_turns();
  const std::size_t droppable = users == 0 ? 0 : users - 1;
  CELLM_ASSIGN_OR_RETURN(const std::int64_t least, tokens_after_dropping(droppable));
  if (!fits(least)) return FitResult{false, 0, least};
  // Fewer messages render shorter, so the smallest count that fits is found
  // by bisection: lo does not fit, hi does.
  std::size_t lo = 0;
  std::size_t hi = droppable;
  std::int64_t hi_tokens = least;
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    CELLM_ASSIGN_OR_RETURN(const std::int64_t t, tokens_after_dropping(mid));
    if (fits(t)) {
      hi = mid;
      hi_tokens = t;
    } else {
      lo = mid;
    }
  }
  conversation.drop_oldest_turns(hi);
  return FitResult{true, hi, hi_tokens};
}

ChatInput parse_chat_input(std::string_view line) {
  const std::string_view text = trim(line);
  if (text.empty()) return {ChatInputKind::kEmpty, {}};
  if (text[0] != '/') return {ChatInputKind::kMessage, std::string(text)};
  if (text.size() > 1 && text[1] == '/')
    return {ChatInputKind::kMessage, std::string(text.substr(1))};
  const auto space = text.find_first_of(kSpace);
  const std::string_view word = text.substr(0, space);
  const std::string_view arg =
      space == std::string_view::npos ? std::string_view() : trim(text.substr(space));
  if (word == "/quit" || word == "/exit") return {ChatInputKind::kQuit, {}};
  if (word == "/reset") return {ChatInputKind::kReset, {}};
  if (word == "/system") return {ChatInputKind::kSystem, std::string(arg)};
  if (word == "/save") return {ChatInputKind::kSave, std::string(arg)};
  if (word == "/help" || word == "/?") return {ChatInputKind::kHelp, {}};
  return {ChatInputKind::kUnknown, std::string(word)};
}

CommandReply run_chat_command(Conversation& conversation, const ChatInput& input,
                              const std::string& home) {
  switch (input.kind) {
    case ChatInputKind::kQuit: return {"", true};
    case ChatInputKind::kReset: {
      const std::size_t forgotten = conversation.user_turns();
      conversation.reset();
      return {fmt::format("new conversation ({} forgotten{})", turns_phrase(forgotten),
                          conversation.system().empty() ? "" : "; the system message stays")};
    }
    case ChatInputKind::kSystem:
      if (input.text.empty()) {
        if (conversation.system().empty()) {
          return {
              "no system message (the chat template may add its own default); "
              "set one with /system TEXT"};
        }
        return {"system message: " + conversation.system()};
      }
      conversation.set_system(input.text);
      return {"system message set; it applies to the whole conversation from the next answer"};
    case ChatInputKind::kSave: {
      if (input.text.empty()) return {"usage: /save PATH (writes the conversation as JSON)"};
      std::string path = input.text;
      if (!home.empty() && path.rfind("~/", 0) == 0) path = home + path.substr(1);
      const std::size_t n = conversation.messages().size();
      Status saved = conversation.save(path);
      if (!saved.is_ok()) return {"could not save: " + std::string(saved.message())};
      return {fmt::format("saved {} message{} to {}", n, n == 1 ? "" : "s", path)};
    }
    case ChatInputKind::kHelp: return {chat_help()};
    case ChatInputKind::kUnknown:
      return {
          fmt::format("unknown command {}; /help lists the commands (start a message with "
                      "// to send one that begins with /)",
                      input.text)};
    case ChatInputKind::kEmpty:
    case ChatInputKind::kMessage: break;
  }
  return {};
}

std::string chat_help() {
  return "commands:\n"
         "  /reset          start a new conversation (the system message stays)\n"
         "  /system [TEXT]  set the system message, or show it without TEXT\n"
         "  /save PATH      write the conversation to PATH as JSON {\"messages\": [...]}\n"
         "  /help           this list\n"
         "  /quit           leave (so does Ctrl-D)\n"
         "  //TEXT          send a message that starts with /\n"
         "keys: Up/Down recall earlier lines; Ctrl-C stops an answer (what was shown stays in "
         "the conversation) or, at the prompt, clears the line";
}

}  // namespace cellm::cli
