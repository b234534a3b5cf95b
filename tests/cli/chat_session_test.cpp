// The conversation logic of `cellm chat` without a terminal or an engine:
// trimming the oldest turns against a token counter whose counts are known
// by construction, parsing typed lines, and each slash command's effect on
// the conversation (including /save's file, read back).
#include "cli/chat_session.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace cellm::cli {
namespace {

// One token per character of content plus 3 per message: a stand-in for a
// template's rendering whose size is easy to reason about.
constexpr std::int64_t kPerMessage = 3;
Result<std::int64_t> count_chars(const nlohmann::ordered_json& messages) {
  std::int64_t n = 0;
  for (const auto& m : messages) {
    n += kPerMessage + static_cast<std::int64_t>(m["content"].get<std::string>().size());
  }
  return n;
}

std::int64_t cost(const std::string& content) {
  return kPerMessage + static_cast<std::int64_t>(content.size());
}

// "u7" padded with dots to `width` characters (so every turn costs the same).
std::string padded(char role, int index, std::size_t width) {
  std::string name(1, role);
  name += std::to_string(index);
  name.resize(width, '.');
  return name;
}

// user/assistant pairs "u0.."/"a0.."... of `width` characters each.
Conversation with_turns(int pairs, std::size_t width, std::string system = {}) {
  Conversation c(std::move(system));
  for (int i = 0; i < pairs; ++i) {
    c.add_user(padded('u', i, width));
    c.add_assistant(padded('a', i, width));
  }
  return c;
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("cellm_chat_session_test_" + std::to_string(::getpid()) + "_" + name);
}

TEST(ConversationTest, MessagesPutTheSystemMessageFirstOnlyWhenSet) {
  Conversation c;
  c.add_user("hi");
  c.add_assistant("hello");
  EXPECT_EQ(c.messages(), nlohmann::ordered_json::parse(
                              R"([{"role":"user","content":"hi"},
                                  {"role":"assistant","content":"hello"}])"));
  c.set_system("be brief");
  ASSERT_EQ(c.messages().size(), 3u);
  EXPECT_EQ(c.messages()[0]["role"], "system");
  EXPECT_EQ(c.messages()[0]["content"], "be brief");
  EXPECT_EQ(c.user_turns(), 1u);
}

TEST(ConversationTest, DroppingTurnsTakesEachQuestionWithItsAnswer) {
  Conversation c = with_turns(3, 4);
  c.add_user("last");
  c.drop_oldest_turns(2);
  ASSERT_EQ(c.turns().size(), 3u);
  EXPECT_EQ(c.turns()[0].content, "u2..");
  EXPECT_EQ(c.turns()[1].content, "a2..");
  EXPECT_EQ(c.turns()[2].content, "last");
  c.drop_oldest_turns(10);
  EXPECT_TRUE(c.turns().empty());
}

TEST(FitConversationTest, LeavesAConversationThatFitsAlone) {
  Conversation c = with_turns(2, 10, "sys");
  c.add_user("q");
  const std::int64_t total = *count_chars(c.messages());
  auto fit = fit_conversation(c, count_chars, 50, total + 50);  // exactly fits
  ASSERT_TRUE(fit.ok()) << fit.status().to_string();
  EXPECT_TRUE(fit->fits);
  EXPECT_EQ(fit->dropped_turns, 0u);
  EXPECT_EQ(fit->prompt_tokens, total);
  EXPECT_EQ(c.user_turns(), 3u);
}

TEST(FitConversationTest, DropsTheFewestOldestTurnsAndKeepsTheSystemMessage) {
  const std::size_t width = 20;
  const std::int64_t pair = 2 * cost(std::string(width, 'x'));
  for (int pairs : {1, 2, 3, 7, 16}) {
    for (int must_drop = 1; must_drop <= pairs; ++must_drop) {
      Conversation c = with_turns(pairs, width, "system text");
      c.add_user("the question");
      const std::int64_t total = *count_chars(c.messages());
      // One token short of fitting after dropping must_drop - 1 turns.
      const std::int64_t answer = 40;
      const std::int64_t limit = total - pair * (must_drop - 1) - 1 + answer;
      auto fit = fit_conversation(c, count_chars, answer, limit);
      ASSERT_TRUE(fit.ok()) << fit.status().to_string();
      ASSERT_TRUE(fit->fits) << pairs << " pairs, drop " << must_drop;
      EXPECT_EQ(fit->dropped_turns, static_cast<std::size_t>(must_drop)) << pairs << " pairs";
      EXPECT_EQ(fit->prompt_tokens, total - pair * must_drop);
      EXPECT_LE(fit->prompt_tokens + answer, limit);
      EXPECT_EQ(c.system(), "system text");
      EXPECT_EQ(c.user_turns(), static_cast<std::size_t>(pairs - must_drop + 1));
      EXPECT_EQ(c.turns().back().content, "the question");
      if (must_drop < pairs) {
        EXPECT_EQ(c.turns().front().content, padded('u', must_drop, width));
      }
    }
  }
}

TEST(FitConversationTest, RefusesALastMessageThatCannotFitAndChangesNothing) {
  Conversation c = with_turns(3, 8, "sys");
  const std::string question(100, 'q');
  c.add_user(question);
  const auto before = c.messages();
  const std::int64_t alone = cost("sys") + cost(question);
  auto fit = fit_conversation(c, count_chars, 10, alone + 10 - 1);
  ASSERT_TRUE(fit.ok());
  EXPECT_FALSE(fit->fits);
  EXPECT_EQ(fit->dropped_turns, 0u);
  EXPECT_EQ(fit->prompt_tokens, alone);
  EXPECT_EQ(c.messages(), before);
  // One more token and it fits, every older turn gone.
  fit = fit_conversation(c, count_chars, 10, alone + 10);
  ASSERT_TRUE(fit.ok());
  EXPECT_TRUE(fit->fits);
  EXPECT_EQ(fit->dropped_turns, 3u);
  EXPECT_EQ(c.turns().size(), 1u);
}

TEST(FitConversationTest, PassesCountErrorsOnUnchanged) {
  Conversation c = with_turns(2, 4);
  c.add_user("q");
  const auto before = c.messages();
  auto failing = [](const nlohmann::ordered_json&) -> Result<std::int64_t> {
    return invalid_argument("template exploded");
  };
  auto fit = fit_conversation(c, failing, 1, 1000);
  ASSERT_FALSE(fit.ok());
  EXPECT_EQ(fit.status().message(), "template exploded");
  EXPECT_EQ(c.messages(), before);
}

TEST(ParseChatInputTest, SortsLinesIntoMessagesCommandsAndBlanks) {
  EXPECT_EQ(parse_chat_input("").kind, ChatInputKind::kEmpty);
  EXPECT_EQ(parse_chat_input("  \t ").kind, ChatInputKind::kEmpty);
  auto m = parse_chat_input("  hello there \r");
  EXPECT_EQ(m.kind, ChatInputKind::kMessage);
  EXPECT_EQ(m.text, "hello there");
  m = parse_chat_input("//etc/hosts is a file");
  EXPECT_EQ(m.kind, ChatInputKind::kMessage);
  EXPECT_EQ(m.text, "/etc/hosts is a file");
  EXPECT_EQ(parse_chat_input("/quit").kind, ChatInputKind::kQuit);
  EXPECT_EQ(parse_chat_input("/exit").kind, ChatInputKind::kQuit);
  EXPECT_EQ(parse_chat_input("/reset").kind, ChatInputKind::kReset);
  EXPECT_EQ(parse_chat_input("/help").kind, ChatInputKind::kHelp);
  auto s = parse_chat_input("/system   You are   terse.  ");
  EXPECT_EQ(s.kind, ChatInputKind::kSystem);
  EXPECT_EQ(s.text, "You are   terse.");
  EXPECT_EQ(parse_chat_input("/system").text, "");
  auto save = parse_chat_input("/save out/chat.json");
  EXPECT_EQ(save.kind, ChatInputKind::kSave);
  EXPECT_EQ(save.text, "out/chat.json");
  auto unknown = parse_chat_input("/sytem be nice");
  EXPECT_EQ(unknown.kind, ChatInputKind::kUnknown);
  EXPECT_EQ(unknown.text, "/sytem");
  // A command word must stand alone: "/resets" is not /reset.
  EXPECT_EQ(parse_chat_input("/resets").kind, ChatInputKind::kUnknown);
}

TEST(RunChatCommandTest, ResetForgetsTurnsButKeepsTheSystemMessage) {
  Conversation c = with_turns(2, 4, "stay");
  c.add_user("q");
  const CommandReply reply = run_chat_command(c, parse_chat_input("/reset"));
  EXPECT_FALSE(reply.quit);
  EXPECT_NE(reply.text.find("3 turns"), std::string::npos) << reply.text;
  EXPECT_TRUE(c.turns().empty());
  EXPECT_EQ(c.system(), "stay");
}

TEST(RunChatCommandTest, SystemSetsAndShows) {
  Conversation c = with_turns(1, 4);
  EXPECT_NE(run_chat_command(c, parse_chat_input("/system")).text.find("no system message"),
            std::string::npos);
  run_chat_command(c, parse_chat_input("/system Answer in French."));
  EXPECT_EQ(c.system(), "Answer in French.");
  EXPECT_EQ(c.turns().size(), 2u);  // the turns stay
  const CommandReply shown = run_chat_command(c, parse_chat_input("/system"));
  EXPECT_NE(shown.text.find("Answer in French."), std::string::npos) << shown.text;
  EXPECT_EQ(c.system(), "Answer in French.");
}

TEST(RunChatCommandTest, SaveWritesTheMessagesAsJson) {
  Conversation c("sys \"quoted\"");
  c.add_user("héllo\nworld");
  c.add_assistant("hi");
  const auto path = temp_path("save.json");
  const CommandReply reply = run_chat_command(c, {ChatInputKind::kSave, path.string()});
  EXPECT_NE(reply.text.find("saved 3 messages"), std::string::npos) << reply.text;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const auto doc = nlohmann::ordered_json::parse(text.str());
  EXPECT_EQ(doc["messages"], c.messages());
  std::filesystem::remove(path);
}

TEST(RunChatCommandTest, SaveExpandsHomeAndReportsFailures) {
  Conversation c;
  c.add_user("q");
  const auto dir = temp_path("home");
  std::filesystem::create_directories(dir);
  CommandReply reply = run_chat_command(c, {ChatInputKind::kSave, "~/c.json"}, dir.string());
  EXPECT_TRUE(std::filesystem::exists(dir / "c.json")) << reply.text;
  reply = run_chat_command(c, {ChatInputKind::kSave, (dir / "missing" / "c.json").string()});
  EXPECT_NE(reply.text.find("could not save"), std::string::npos) << reply.text;
  EXPECT_NE(reply.text.find("missing"), std::string::npos) << reply.text;
  reply = run_chat_command(c, {ChatInputKind::kSave, ""});
  EXPECT_NE(reply.text.find("usage: /save PATH"), std::string::npos) << reply.text;
  std::filesystem::remove_all(dir);
}

TEST(RunChatCommandTest, QuitHelpAndUnknown) {
  Conversation c;
  EXPECT_TRUE(run_chat_command(c, parse_chat_input("/quit")).quit);
  const CommandReply help = run_chat_command(c, parse_chat_input("/help"));
  EXPECT_FALSE(help.quit);
  for (const char* cmd : {"/reset", "/system", "/save", "/quit"}) {
    EXPECT_NE(help.text.find(cmd), std::string::npos) << cmd;
  }
  const CommandReply unknown = run_chat_command(c, parse_chat_input("/frobnicate now"));
  EXPECT_FALSE(unknown.quit);
  EXPECT_NE(unknown.text.find("unknown command /frobnicate"), std::string::npos) << unknown.text;
  EXPECT_TRUE(c.turns().empty());
}

}  // namespace
}  // namespace cellm::cli
