// `cellm bench serve` over HTTP, through the binary: against cellm's server
// started in-process on the real SmolLM2 (with the in-process Runner figure of
// the same load beside it), and on a random-weight shape, which has no
// tokenizer and is served with numeric token text; a --dataset load with and
// without prompt lookup, and one against a fake URL. The JSON line's figures
// must agree with the load asked for and with each other; --kv-dtype reaches
// the server and the in-process run, and fp8 is refused on the CPU.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/testdata.h"

namespace cellm::bench {
namespace {

std::filesystem::path smollm2() {
  return cellm::testing::source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

std::string run_command(const std::string& cmd, int* rc) {
  std::string out;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "<popen failed>";
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  *rc = pclose(pipe);
  return out;
}

// Runs the command and returns the one JSON line it appended to a fresh file.
nlohmann::json run_json(const std::string& name, const std::string& args, std::string* out) {
  const std::string json = ::testing::TempDir() + "/" + name + ".jsonl";
  std::remove(json.c_str());
  int rc = -1;
  *out = run_command(std::string(CELLMDEV_BINARY) + " bench serve " + args + " --json " + json +
                         " --progress-bar off 2>&1",
                     &rc);
  EXPECT_EQ(rc, 0) << *out;
  std::ifstream in(json);
  std::string line;
  if (!std::getline(in, line)) {
    ADD_FAILURE() << "no JSON line in " << json << "\n" << *out;
    return nlohmann::json::object();
  }
  std::string extra;
  EXPECT_FALSE(std::getline(in, extra)) << "one run, one line";
  return nlohmann::json::parse(line);
}

// What any successful run of `requests` x `out` tokens must satisfy.
void check_figures(const nlohmann::json& j, int requests, int in_len, int out_len) {
  EXPECT_EQ(j["bench"], "serve_http");
  EXPECT_EQ(j["completed"], requests);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["length_mismatches"], 0);
  EXPECT_EQ(j["output_tokens"], requests * out_len);
  EXPECT_EQ(j["requests"], requests);
  EXPECT_EQ(j["input_len"], in_len);
  EXPECT_EQ(j["output_len"], out_len);
  EXPECT_TRUE(j.contains("commit"));
  EXPECT_TRUE(j.contains("gpu"));
  const double duration = j["duration_s"];
  EXPECT_GT(duration, 0);
  EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0);
  EXPECT_NEAR(j["output_tokens_per_s"].get<double>(), requests * out_len / duration, 1e-6);
  EXPECT_GT(j["total_tokens_per_s"].get<double>(), j["output_tokens_per_s"].get<double>());
  EXPECT_NEAR(j["request_throughput"].get<double>(), requests / duration, 1e-6);
  for (const char* m : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    const std::string k(m);
    ASSERT_TRUE(j.contains(k + "_p50")) << k;
    EXPECT_GT(j[k + "_mean"].get<double>(), 0) << k;
    EXPECT_LE(j[k + "_p50"].get<double>(), j[k + "_p90"].get<double>()) << k;
    EXPECT_LE(j[k + "_p90"].get<double>(), j[k + "_p99"].get<double>()) << k;
    ASSERT_EQ(j[k + "_quantiles"].size(), 101u) << k;
  }
  // A request's first token comes before its end, and no request outlasts the run.
  EXPECT_LE(j["ttft_ms_p99"].get<double>(), j["e2e_ms_quantiles"][100].get<double>());
  EXPECT_LE(j["e2e_ms_quantiles"][100].get<double>(), duration * 1e3 + 1e-6);
}

TEST(BenchHttpE2eTest, SmolLM2OverHttpBesideTheInProcessFigure) {
  ASSERT_TRUE(std::filesystem::exists(smollm2())) << "run scripts/fetch-model smollm2";
  std::string out;
  const nlohmann::json j =
      run_json("bench_http_smollm2",
               "--http --model " + smollm2().string() +
                   " --backend cpu --num-prompts 8 --random-input-len 16 --random-output-len 8"
                   " --max-concurrency 4 --warmup 1 --kv-dtype bf16",
               &out);
  check_figures(j, 8, 16, 8);
  EXPECT_EQ(j["kv_dtype"], "bf16");
  EXPECT_EQ(j["target"], "in-process");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["prompt_format"], "ids");
  EXPECT_EQ(j["input_tokens"], 8 * 16);  // the server's usage counts the ids sent
  // The Runner ran the same load in the same process.
  ASSERT_TRUE(j.contains("inprocess")) << out;
  const nlohmann::json& in = j["inprocess"];
  EXPECT_EQ(in["bench"], "serve");
  EXPECT_EQ(in["completed"], 8);
  EXPECT_EQ(in["output_tokens"], 64);
  EXPECT_EQ(in["kv_dtype"], "bf16");  // the in-process run got the flag too
  ASSERT_TRUE(j.contains("http_over_inprocess"));
  EXPECT_NEAR(j["http_over_inprocess"].get<double>(),
              j["output_tokens_per_s"].get<double>() / in["output_tokens_per_s"].get<double>(),
              1e-9);
  EXPECT_NE(out.find("| HTTP / in-process output throughput |"), std::string::npos) << out;
}

TEST(BenchHttpE2eTest, AJsonSchemaLoadIsServedConstrainedAndSaysSo) {
  ASSERT_TRUE(std::filesystem::exists(smollm2())) << "run scripts/fetch-model smollm2";
  const std::filesystem::path schema =
      cellm::testing::source_dir() / "bench" / "schemas" / "tool_weather.json";
  std::string out;
  const nlohmann::json j =
      run_json("bench_http_schema",
               "--http --model " + smollm2().string() + " --prompt-format text --json-schema " +
                   schema.string() +
                   " --backend cpu --num-prompts 2 --random-input-len 8 --random-output-len 6"
                   " --max-concurrency 2 --warmup 0",
               &out);
  EXPECT_EQ(j["response_format"], "json_schema") << out;
  EXPECT_EQ(j["json_schema_file"], schema.string());
  EXPECT_EQ(j["completed"], 2) << out;
  EXPECT_EQ(j["failed"], 0) << out;
  EXPECT_GT(j["output_tokens"].get<int>(), 0);
  // Constrained and unconstrained loads are not compared in-process.
  EXPECT_FALSE(j.contains("inprocess"));
  EXPECT_NE(out.find("json_schema"), std::string::npos) << out;
}

TEST(BenchHttpE2eTest, AJsonSchemaLoadOnARandomWeightShapeIsRefusedSayingWhy) {
  int rc = -1;
  const std::string schema =
      (cellm::testing::source_dir() / "bench" / "schemas" / "person.json").string();
  const std::string out = run_command(std::string(CELLMDEV_BINARY) +
                                          " bench serve --http --model smollm2-135m --backend cpu"
                                          " --num-prompts 1 --json-schema " +
                                          schema + " 2>&1",
                                      &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("needs a model with a tokenizer"), std::string::npos) << out;
}

TEST(BenchHttpE2eTest, RandomWeightShapeServesTokenIdsAndNumericText) {
  std::string out;
  const nlohmann::json j = run_json("bench_http_shape",
                                    "--http --model smollm2-135m --backend cpu --num-prompts 4"
                                    " --input-len 8 --output-len 4 --max-concurrency 2"
                                    " --warmup 0 --no-inprocess",
                                    &out);
  check_figures(j, 4, 8, 4);
  EXPECT_EQ(j["model"], "smollm2-135m");
  EXPECT_EQ(j["input_tokens"], 4 * 8);
  EXPECT_FALSE(j.contains("inprocess"));
  EXPECT_FALSE(j.contains("http_over_inprocess"));
}

TEST(BenchHttpE2eTest, TextPromptsToAModelWithoutTokenizerFailAtWarmUpSayingWhy) {
  int rc = -1;
  const std::string out = run_command(std::string(CELLMDEV_BINARY) +
                                          " bench serve --http --model smollm2-135m --backend cpu"
                                          " --num-prompts 2 --input-len 4 --output-len 2"
                                          " --prompt-format text --progress-bar off 2>&1",
                                      &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("warm-up request 0 failed"), std::string::npos) << out;
  EXPECT_NE(out.find("no tokenizer"), std::string::npos) << out;
}

// The server is assembled as `cellm serve --kv-dtype fp8` would be, on either
// form of model, so the CPU refuses it; a --url server keeps its own K/V.
TEST(BenchHttpE2eTest, KvDtypeFp8OnTheCpuIsRefusedOnEveryRouteSayingWhy) {
  ASSERT_TRUE(std::filesystem::exists(smollm2())) << "run scripts/fetch-model smollm2";
  for (const std::string& model : {smollm2().string(), std::string("smollm2-135m")}) {
    int rc = -1;
    const std::string out =
        run_command(std::string(CELLMDEV_BINARY) + " bench serve --http --model " + model +
                        " --backend cpu --num-prompts 1 --input-len 4"
                        " --output-len 2 --kv-dtype fp8"
                        " --progress-bar off 2>&1",
                    &rc);
    EXPECT_NE(rc, 0) << model << ": " << out;
    EXPECT_NE(out.find("--kv-dtype fp8: the CPU program keeps K/V in f32"), std::string::npos)
        << model << ": " << out;
  }
  int rc = -1;
  const std::string out = run_command(std::string(CELLMDEV_BINARY) +
                                          " bench serve --url http://127.0.0.1:9 --kv-dtype fp8"
                                          " 2>&1",
                                      &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("a --url server keeps its own"), std::string::npos) << out;
}

TEST(BenchHttpE2eTest, UrlDrivesAnyOpenAiEndpointAndReadsItsUsage) {
  // A fake endpoint (tests/bench/fake_stream_server.cpp) that streams " tok"
  // chunks and reports usage: the --url path, /v1/models discovery included.
  FILE* fake = popen((std::string(CELLM_FAKE_SERVER) + " 0 1 deep").c_str(), "r");
  ASSERT_NE(fake, nullptr);
  int port = 0;
  int pid = 0;
  ASSERT_EQ(std::fscanf(fake, "port %d pid %d", &port, &pid), 2) << "the fake server did not start";
  std::string out;
  const nlohmann::json j = run_json(
      "bench_http_url",
      "--url http://127.0.0.1:" + std::to_string(port) +
          "/v1 --num-prompts 6 --input-len 8 --output-len 5 --max-concurrency 3 --warmup 1",
      &out);
  ::kill(pid, SIGTERM);
  pclose(fake);
  check_figures(j, 6, 8, 5);
  EXPECT_EQ(j["model"], "fake");  // the first id of GET /v1/models
  EXPECT_EQ(j["backend"], "remote");
  EXPECT_EQ(j["target"], "http://127.0.0.1:" + std::to_string(port) + "/v1");
  EXPECT_EQ(j["input_tokens"], 6 * 8);    // the fake's usage counts the ids it got
  EXPECT_FALSE(j.contains("inprocess"));  // off by default against a URL
}

// Writes `lines` to a fresh file under the test's temporary directory.
std::string write_dataset(const std::string& name, const std::string& lines) {
  const std::string path = ::testing::TempDir() + "/" + name + ".jsonl";
  std::ofstream(path) << lines;
  return path;
}

// Two copy tasks, short enough for the CPU: prompt lookup has the passage to
// draft from.
std::string copy_dataset() {
  return write_dataset(
      "bench_http_copy_requests",
      R"({"messages": [{"role": "user", "content": "Repeat exactly: the red fox runs over the green hill and the red fox runs home."}], "max_tokens": 16})"
      "\n"
      R"({"prompt": "one two three four five six seven, one two three four five six seven, one two three", "max_tokens": 16})"
      "\n");
}

TEST(BenchHttpE2eTest, ADatasetWithPromptLookupOrItsOwnDraftKeepsThePlainOutput) {
  ASSERT_TRUE(std::filesystem::exists(smollm2())) << "run scripts/fetch-model smollm2";
  const std::string dataset = copy_dataset();
  const std::string common = "--http --model " + smollm2().string() + " --backend cpu --dataset " +
                             dataset + " --num-prompts 3 --max-concurrency 1 --warmup 1";
  std::string plain_out;
  const nlohmann::json plain = run_json("bench_http_dataset_plain", common, &plain_out);
  std::string spec_out;
  const nlohmann::json spec =
      run_json("bench_http_dataset_ngram", common + " --speculate ngram", &spec_out);
  for (const nlohmann::json* j : {&plain, &spec}) {
    EXPECT_EQ((*j)["completed"], 3);
    EXPECT_EQ((*j)["failed"], 0);
    EXPECT_EQ((*j)["dataset"], dataset);
    EXPECT_EQ((*j)["dataset_requests"], 2);
    EXPECT_EQ((*j)["ignore_eos"], false);
    EXPECT_EQ((*j)["usage_missing"], 0);
    EXPECT_FALSE(j->contains("inprocess"));  // the Runner load cannot send a dataset
    // Three requests of at most 16 tokens (lines 1, 2, 1), from usage.
    EXPECT_GT((*j)["output_tokens"].get<int>(), 0);
    EXPECT_LE((*j)["output_tokens"].get<int>(), 3 * 16);
    EXPECT_GT((*j)["input_tokens"].get<int>(), 3 * 10);  // the template's tokens and the text
  }
  EXPECT_EQ(plain["speculate"], "off");
  EXPECT_FALSE(plain.contains("spec_proposed_tokens")) << plain_out;
  EXPECT_EQ(spec["speculate"], "ngram");
  EXPECT_EQ(spec["speculate_tokens"], 4);
  EXPECT_TRUE(spec["draft_model"].is_null());
  ASSERT_TRUE(spec.contains("spec_proposed_tokens")) << spec_out;
  const std::int64_t proposed = spec["spec_proposed_tokens"];
  const std::int64_t accepted = spec["spec_accepted_tokens"];
  EXPECT_GT(proposed, 0) << spec_out;
  EXPECT_GE(accepted, 0);
  EXPECT_LE(accepted, proposed);
  EXPECT_DOUBLE_EQ(spec["spec_acceptance_rate"].get<double>(),
                   static_cast<double>(accepted) / static_cast<double>(proposed));
  // Greedy speculation keeps exactly the tokens plain decoding draws.
  EXPECT_EQ(spec["output_tokens"], plain["output_tokens"]);
  EXPECT_EQ(spec["input_tokens"], plain["input_tokens"]);
  EXPECT_NE(spec_out.find("| draft tokens proposed / accepted |"), std::string::npos) << spec_out;

  // The model as its own draft: what it drafts is what it then draws, so
  // nearly every draft is kept (exactly every one, unless a near-tie rounds
  // apart between the draft's one-row step and the target's wider one).
  std::string draft_out;
  const nlohmann::json draft = run_json(
      "bench_http_dataset_draft",
      common + " --speculate draft --speculate-tokens 3 --draft-model " + smollm2().string(),
      &draft_out);
  EXPECT_EQ(draft["speculate"], "draft");
  EXPECT_EQ(draft["speculate_tokens"], 3);
  EXPECT_EQ(draft["draft_model"], smollm2().string());
  ASSERT_TRUE(draft.contains("spec_proposed_tokens")) << draft_out;
  EXPECT_GT(draft["spec_proposed_tokens"].get<std::int64_t>(), 0) << draft_out;
  EXPECT_GE(draft["spec_acceptance_rate"].get<double>(), 0.9) << draft_out;
  EXPECT_EQ(draft["output_tokens"], plain["output_tokens"]);
}

TEST(BenchHttpE2eTest, ADatasetOverAUrlUsesBothRoutesUsageAndTheMetricsCounters) {
  // The fake streams chat as two tokens a chunk, reports usage.prompt_tokens
  // 1000 + messages for chat and 1 for a text prompt, and counts 5 drafts
  // proposed and 4 accepted per finished stream on /metrics.
  FILE* fake = popen((std::string(CELLM_FAKE_SERVER) + " 0 1").c_str(), "r");
  ASSERT_NE(fake, nullptr);
  int port = 0;
  int pid = 0;
  ASSERT_EQ(std::fscanf(fake, "port %d pid %d", &port, &pid), 2) << "the fake server did not start";
  const std::string dataset = write_dataset(
      "bench_http_url_dataset_requests",
      R"({"messages": [{"role": "user", "content": "a"}], "max_tokens": 6})"
      "\n"
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "b"}], "max_tokens": 3})"
      "\n"
      R"({"prompt": "c", "max_tokens": 5})"
      "\n");
  std::string out;
  const nlohmann::json j =
      run_json("bench_http_url_dataset",
               "--url http://127.0.0.1:" + std::to_string(port) + " --dataset " + dataset +
                   " --num-prompts 5 --max-concurrency 2 --warmup 2",
               &out);
  ::kill(pid, SIGTERM);
  pclose(fake);
  EXPECT_EQ(j["completed"], 5) << out;
  // Lines 1, 2, 3, 1, 2: usage's tokens, though chat sent half as many chunks.
  EXPECT_EQ(j["output_tokens"], 6 + 3 + 5 + 6 + 3);
  EXPECT_EQ(j["input_tokens"], 1001 + 1002 + 1 + 1001 + 1002);
  EXPECT_EQ(j["length_mismatches"], 0);
  EXPECT_FALSE(j.contains("speculate"));  // a URL server's settings are its own
  // The timed run's five streams, not the two of the warm-up.
  EXPECT_EQ(j["spec_proposed_tokens"], 5 * 5);
  EXPECT_EQ(j["spec_accepted_tokens"], 4 * 5);
  EXPECT_DOUBLE_EQ(j["spec_acceptance_rate"].get<double>(), 0.8);
}

TEST(BenchHttpE2eTest, DatasetAndSpeculationMistakesAreRefusedBeforeLoading) {
  const std::string good = copy_dataset();
  const std::string bad_json =
      write_dataset("bench_http_bad", R"({"prompt": "a", "max_tokens": 2})"
                                      "\n\n"
                                      R"({"prompt": "b", "max_tokens": 2,})"
                                      "\n");
  const std::string empty = write_dataset("bench_http_empty", "\n");
  const std::string http = std::string(CELLMDEV_BINARY) + " bench serve --http --backend cpu ";
  const std::string model = " --model " + smollm2().string();
  struct Case {
    std::string args;
    std::string says;
  };
  const Case cases[] = {
      {model + " --dataset /no/such/file.jsonl", "/no/such/file.jsonl: cannot read the file"},
      {model + " --dataset " + bad_json, bad_json + " line 3 is not valid JSON"},
      {model + " --dataset " + empty, "holds no requests"},
      {" --model smollm2-135m --dataset " + good, "--dataset needs a model with a tokenizer"},
      {model + " --dataset " + good + " --random-input-len 8", "--input-len (--random-input-len)"},
      {model + " --dataset " + good + " --prompt-format text", "--prompt-format"},
      {model + " --speculate draft", "--speculate draft needs the draft model"},
      {model + " --speculate ngram --draft-model " + smollm2().string(),
       "only used with --speculate draft"},
      {model + " --speculate ngram --inprocess", "--inprocess with --speculate"},
  };
  for (const Case& c : cases) {
    int rc = -1;
    const std::string out = run_command(http + c.args + " 2>&1", &rc);
    EXPECT_NE(rc, 0) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << c.args << "\n" << out;
    EXPECT_EQ(out.find("starting cellm's server"), std::string::npos) << c.args << "\n" << out;
  }
  int rc = -1;
  const std::string url = run_command(std::string(CELLMDEV_BINARY) +
                                          " bench serve --url http://127.0.0.1:9 --speculate ngram"
                                          " 2>&1",
                                      &rc);
  EXPECT_NE(rc, 0) << url;
  EXPECT_NE(url.find("--speculate configures the server"), std::string::npos) << url;
  const std::string no_http = run_command(
      std::string(CELLMDEV_BINARY) + " bench serve --model smollm2-135m --dataset " + good + " 2>&1",
      &rc);
  EXPECT_NE(rc, 0) << no_http;
  EXPECT_NE(no_http.find("--dataset applies over HTTP only"), std::string::npos) << no_http;
}

TEST(BenchHttpE2eTest, HttpOptionsWithoutHttpAreRefused) {
  int rc = -1;
  const std::string out = run_command(
      std::string(CELLMDEV_BINARY) + " bench serve --model smollm2-135m --plot x.png 2>&1", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--plot applies over HTTP only"), std::string::npos) << out;
  const std::string both = run_command(
      std::string(CELLMDEV_BINARY) + " bench serve --http --url http://127.0.0.1:9 2>&1", &rc);
  EXPECT_NE(rc, 0) << both;
  EXPECT_NE(both.find("not both"), std::string::npos) << both;
}

TEST(BenchHttpE2eTest, AnUnreachableUrlFailsWithItsAddress) {
  int rc = -1;
  // Port 9 (discard) on loopback: nothing listens there on a test machine.
  const std::string out =
      run_command(std::string(CELLMDEV_BINARY) + " bench serve --url http://127.0.0.1:9 2>&1", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("127.0.0.1:9"), std::string::npos) << out;
}

}  // namespace
}  // namespace cellm::bench
