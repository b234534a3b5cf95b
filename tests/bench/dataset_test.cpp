// `cellm bench serve --dataset`: the JSONL parser (good lines and every
// refusal, each naming the file's line), cycling, the session bound and the
// options a dataset replaces.
#include "bench/dataset.h"

#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace cellm::bench {
namespace {

std::string message_of(std::string_view text) {
  auto r = parse_dataset(text, "ds.jsonl");
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? std::string() : std::string(r.status().message());
}

bool has(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(BenchDatasetTest, ReadsChatAndCompletionLinesSkippingBlankOnes) {
  const std::string text =
      "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
      "{\"role\": \"user\", \"content\": \"Say hi\"}], \"max_tokens\": 12}\n"
      "\n"
      "   \r\n"
      "{\"prompt\": \"Once upon\", \"max_tokens\": 3, \"stop\": \"\\n\"}\n"
      "{\"max_tokens\": 7, \"prompt\": \"x\", \"stop\": [\"a\", \"b\"]}";  // no final newline
  auto r = parse_dataset(text, "ds.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 3u);
  const DatasetRequest& chat = (*r)[0];
  EXPECT_TRUE(chat.chat);
  EXPECT_EQ(chat.line, 1);
  EXPECT_EQ(chat.max_tokens, 12);
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[1]["content"], "Say hi");
  EXPECT_EQ(chat.text_bytes, std::string("Be brief.").size() + std::string("Say hi").size());
  EXPECT_TRUE(chat.stop.is_null());
  const DatasetRequest& prompt = (*r)[1];
  EXPECT_FALSE(prompt.chat);
  EXPECT_EQ(prompt.line, 4);  // blank lines still count
  EXPECT_EQ(prompt.prompt, "Once upon");
  EXPECT_EQ(prompt.max_tokens, 3);
  EXPECT_EQ(prompt.stop, nlohmann::json::array({"\n"}));  // a string becomes a list
  EXPECT_EQ((*r)[2].line, 5);
  EXPECT_EQ((*r)[2].stop, nlohmann::json::array({"a", "b"}));
}

TEST(BenchDatasetTest, EveryRefusalNamesTheFileAndLine) {
  const std::string ok = R"({"prompt": "a", "max_tokens": 1})";
  struct Case {
    std::string bad;
    std::string says;
  };
  const Case cases[] = {
      {R"({"prompt": "a", "max_tokens": 1)", "not valid JSON"},
      {R"(["prompt", 1])", "a request is a JSON object, got array"},
      {R"({"prompt": "a", "max_tokens": 1, "temperature": 0.5})", "unknown key \"temperature\""},
      {R"({"max_tokens": 1})", "found neither"},
      {R"({"prompt": "a", "messages": [], "max_tokens": 1})", "not both"},
      {R"({"messages": [], "max_tokens": 1})", "non-empty array"},
      {R"({"messages": "hi", "max_tokens": 1})", "non-empty array"},
      {R"({"messages": [{"role": "user"}], "max_tokens": 1})", "message 0"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": 1, "content": "b"}],
           "max_tokens": 1})",
       "message 1"},
      {R"({"prompt": "", "max_tokens": 1})", "\"prompt\" must be a non-empty string"},
      {R"({"prompt": ["a"], "max_tokens": 1})", "\"prompt\" must be a non-empty string"},
      {R"({"prompt": "a"})", "\"max_tokens\" is missing"},
      {R"({"prompt": "a", "max_tokens": 0})", "\"max_tokens\" must be an integer"},
      {R"({"prompt": "a", "max_tokens": 2.5})", "\"max_tokens\" must be an integer"},
      {R"({"prompt": "a", "max_tokens": "9"})", "\"max_tokens\" must be an integer"},
      {R"({"prompt": "a", "max_tokens": 1, "stop": []})", "\"stop\""},
      {R"({"prompt": "a", "max_tokens": 1, "stop": [""]})", "\"stop\""},
      {R"({"prompt": "a", "max_tokens": 1, "stop": 3})", "\"stop\""},
  };
  for (const Case& c : cases) {
    // The bad request is the third line, after a good one and a blank one.
    std::string bad = c.bad;
    for (char& ch : bad) {
      if (ch == '\n') ch = ' ';  // one line, even when the case is wrapped above
    }
    const std::string m = message_of(ok + "\n\n" + bad + "\n" + ok + "\n");
    EXPECT_TRUE(has(m, "ds.jsonl line 3")) << c.bad << " -> " << m;
    EXPECT_TRUE(has(m, c.says)) << c.bad << " -> " << m;
  }
}

TEST(BenchDatasetTest, AFileWithoutRequestsIsRefusedShowingTheFormat) {
  for (const char* empty : {"", "\n", "  \n\t\n\r\n"}) {
    const std::string m = message_of(empty);
    EXPECT_TRUE(has(m, "ds.jsonl holds no requests")) << m;
    EXPECT_TRUE(has(m, "\"max_tokens\"")) << m;
  }
}

TEST(BenchDatasetTest, ReadsAFileAndNamesAMissingOne) {
  const std::string path = ::testing::TempDir() + "/bench_dataset_test.jsonl";
  {
    std::ofstream out(path);
    out << R"({"prompt": "a b c", "max_tokens": 4})"
        << "\n";
  }
  auto r = read_dataset(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].prompt, "a b c");
  std::remove(path.c_str());
  auto missing = read_dataset(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(has(std::string(missing.status().message()), path));
  // A parse error names the path given on the command line.
  {
    std::ofstream out(path);
    out << "{}\n";
  }
  auto bad = read_dataset(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(has(std::string(bad.status().message()), "--dataset " + path + " line 1"))
      << bad.status().message();
  std::remove(path.c_str());
}

TEST(BenchDatasetTest, RequestsAreTakenInOrderAndCycled) {
  auto file = parse_dataset(
      "{\"prompt\": \"one\", \"max_tokens\": 1}\n{\"prompt\": \"two\", \"max_tokens\": 2}\n", "f");
  ASSERT_TRUE(file.ok());
  const std::vector<DatasetRequest> five = cycle_requests(*file, 5);
  ASSERT_EQ(five.size(), 5u);
  const char* expected[] = {"one", "two", "one", "two", "one"};
  for (std::size_t i = 0; i < five.size(); ++i) EXPECT_EQ(five[i].prompt, expected[i]) << i;
  EXPECT_EQ(cycle_requests(*file, 1).size(), 1u);
  EXPECT_TRUE(cycle_requests(*file, 0).empty());
  EXPECT_TRUE(cycle_requests({}, 3).empty());
}

TEST(BenchDatasetTest, TheSessionBoundCoversEveryRequestsTextAndOutput) {
  auto file = parse_dataset(
      "{\"prompt\": \"" + std::string(300, 'x') +
          "\", \"max_tokens\": 10}\n"
          "{\"messages\": [{\"role\": \"user\", \"content\": \"short\"}], \"max_tokens\": 900}\n",
      "f");
  ASSERT_TRUE(file.ok());
  const int bound = dataset_session_tokens(*file);
  // A token is at least a byte, so a byte a token bounds the prompt.
  EXPECT_GE(bound, 300 + 10);
  EXPECT_GE(bound, 5 + 900);
  // One request alone needs no more than the two together.
  EXPECT_LE(dataset_session_tokens({(*file)[0]}), bound);
}

TEST(BenchDatasetTest, OptionsOfRandomPromptsAreRefusedBesideADataset) {
  EXPECT_TRUE(check_dataset_options({}).is_ok());
  EXPECT_TRUE(
      check_dataset_options({"--num-prompts", "--max-concurrency", "--temperature"}).is_ok());
  const std::pair<const char*, const char*> refused[] = {
      {"--input-len", "--random-input-len"},     {"--output-len", "--random-output-len"},
      {"--range-ratio", "--random-range-ratio"}, {"--prefix-len", "random prompts"},
      {"--prompt-format", "token prompts"},      {"--vocab-size", "token prompts"},
  };
  for (const auto& [name, says] : refused) {
    const Status s = check_dataset_options({"--seed", name});
    ASSERT_FALSE(s.is_ok()) << name;
    const std::string m(s.message());
    EXPECT_TRUE(has(m, name)) << m;
    EXPECT_TRUE(has(m, says)) << m;
    EXPECT_TRUE(has(m, "--dataset")) << m;
  }
}

}  // namespace
}  // namespace cellm::bench
