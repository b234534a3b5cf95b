// The HTTP mode's pure parts: URL parsing, request bodies, tallying client
// records into figures, quantiles, and the JSON line.
#include "bench/http_report.h"

#include <cmath>
#include <fstream>
#include <numeric>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/load_plan.h"

namespace cellm::bench {
namespace {

TEST(BenchUrlTest, SplitsHostPortAndFindsTheV1Prefix) {
  auto e = parse_url("http://127.0.0.1:8000");
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 8000);
  EXPECT_EQ(e->v1, "/v1");
  e = parse_url("http://gpu-box:9000/v1/");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "gpu-box");
  EXPECT_EQ(e->v1, "/v1");
  e = parse_url("http://proxy/openai/v1");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->port, 80);
  EXPECT_EQ(e->v1, "/openai/v1");
  e = parse_url("http://[::1]:8080");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->host, "::1");
  EXPECT_EQ(e->port, 8080);
  for (const char* bad : {"https://x:1", "127.0.0.1:8000", "http://", "http://:80", "http://h:0",
                          "http://h:70000", "http://h:8o"}) {
    EXPECT_FALSE(parse_url(bad).ok()) << bad;
  }
  EXPECT_NE(std::string(parse_url("https://x").status().message()).find("http://"),
            std::string::npos);
}

TEST(BenchBodyTest, StreamsTokenIdsWithExactLengthsAndUsage) {
  HttpBenchOptions o;
  RequestSpec r;
  r.prompt = {5, 17, 3};
  r.output_len = 7;
  const nlohmann::json j = nlohmann::json::parse(completion_body(o, "m", r, 9));
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["prompt"], nlohmann::json({5, 17, 3}));
  EXPECT_EQ(j["max_tokens"], 7);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["temperature"], 0.0);
  EXPECT_FALSE(j.contains("seed"));  // greedy needs none

  o.prompt_format = PromptFormat::kText;
  o.ignore_eos = false;
  o.load.temperature = 0.7f;
  const nlohmann::json t = nlohmann::json::parse(completion_body(o, "m", r, 9));
  ASSERT_TRUE(t["prompt"].is_string());
  const std::string text = t["prompt"];
  EXPECT_EQ(std::count(text.begin(), text.end(), ' '), 2);  // three words
  EXPECT_FALSE(t.contains("ignore_eos"));
  EXPECT_EQ(t["seed"], 9);
}

TEST(BenchBodyTest, AJsonSchemaLoadAsksEveryRequestForIt) {
  HttpBenchOptions o;
  RequestSpec r;
  r.prompt = {5};
  r.output_len = 3;
  EXPECT_FALSE(nlohmann::json::parse(completion_body(o, "m", r, 1)).contains("response_format"));
  o.json_schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
  const nlohmann::json j = nlohmann::json::parse(completion_body(o, "m", r, 1));
  ASSERT_TRUE(j.contains("response_format")) << j.dump();
  EXPECT_EQ(j["response_format"]["type"], "json_schema");
  EXPECT_EQ(j["response_format"]["json_schema"]["schema"], nlohmann::json::parse(o.json_schema));
  EXPECT_TRUE(j["response_format"]["json_schema"]["name"].is_string());
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(BenchJsonSchemaTest, ReadsASchemaOrABenchSchemaFileAndRefusesWhatTheServerWould) {
  auto plain = read_json_schema(temp_file("plain.json", R"({"type":"object"})"));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(nlohmann::json::parse(*plain), nlohmann::json::parse(R"({"type":"object"})"));
  auto wrapped = read_json_schema(
      temp_file("wrapped.json", R"({"schema": {"type": "array", "items": {"type": "integer"}},
                          "example": [1, 2]})"));
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().to_string();
  EXPECT_EQ(nlohmann::json::parse(*wrapped)["type"], "array");
  for (const auto& [name, text, says] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"notjson.json", "{type", "not valid JSON"},
           {"array.json", "[1]", "is an object"},
           {"pattern.json", R"({"type":"string","pattern":"a+"})", "pattern"}}) {
    auto bad = read_json_schema(temp_file(name, text));
    ASSERT_FALSE(bad.ok()) << name;
    EXPECT_NE(std::string(bad.status().message()).find(says), std::string::npos)
        << bad.status().to_string();
  }
  EXPECT_FALSE(read_json_schema(::testing::TempDir() + "/no-such-file.json").ok());
}

TEST(BenchJsonSchemaTest, TheInProcessRatioIsRefusedForAConstrainedLoad) {
  HttpBenchOptions o;
  o.json_schema = R"({"type":"object"})";
  EXPECT_TRUE(validate(o).is_ok());
  o.compare_inprocess = true;
  const Status s = validate(o);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(std::string(s.message()).find("--json-schema"), std::string::npos) << s.to_string();
}

RequestRecord record(double sent_s, double ttft, std::vector<float> gaps, std::int64_t tokens) {
  RequestRecord r;
  r.ok = true;
  r.sent_s = sent_s;
  r.ttft_ms = ttft;
  r.itl_ms = std::move(gaps);
  r.text_chunks = static_cast<std::int64_t>(r.itl_ms.size()) + 1;
  r.e2e_ms = ttft + std::accumulate(r.itl_ms.begin(), r.itl_ms.end(), 0.0) + 1.0;
  r.completion_tokens = tokens;
  r.prompt_tokens = 4;
  return r;
}

TEST(BenchHttpTallyTest, FiguresFollowTheRecords) {
  std::vector<RequestSpec> reqs(3);
  for (RequestSpec& q : reqs) {
    q.prompt = {1, 2, 3, 4};
    q.output_len = 3;
  }
  std::vector<RequestRecord> recs;
  recs.push_back(record(0.0, 100, {10, 20}, 3));
  recs.push_back(record(0.5, 200, {30, 40}, 3));
  RequestRecord bad;
  bad.error = "HTTP 503: busy";
  recs.push_back(bad);

  HttpBenchReport r;
  tally_http(reqs, recs, r);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.failed, 1);
  EXPECT_NE(r.first_error.find("request 2: HTTP 503"), std::string::npos) << r.first_error;
  EXPECT_EQ(r.output_tokens, 6);
  EXPECT_EQ(r.input_tokens, 8);
  EXPECT_EQ(r.length_mismatches, 0);
  // The last stream ends at 0.5 s + 271 ms.
  EXPECT_NEAR(r.duration_s, 0.771, 1e-9);
  EXPECT_NEAR(r.output_tokens_per_s, 6 / 0.771, 1e-9);
  EXPECT_NEAR(r.total_tokens_per_s, 14 / 0.771, 1e-9);
  EXPECT_NEAR(r.request_throughput, 2 / 0.771, 1e-9);
  EXPECT_EQ(r.ttft_ms.count, 2u);
  EXPECT_DOUBLE_EQ(r.ttft_ms.mean, 150);
  EXPECT_EQ(r.itl_ms.count, 4u);
  EXPECT_DOUBLE_EQ(r.itl_ms.p50, 25);
  // TPOT = (E2E - TTFT) / (tokens - 1) = (30 + 1) / 2 and (70 + 1) / 2.
  EXPECT_DOUBLE_EQ(r.tpot_ms.mean, (15.5 + 35.5) / 2);
  ASSERT_EQ(r.itl_q.size(), 101u);
  EXPECT_DOUBLE_EQ(r.itl_q.front(), 10);
  EXPECT_DOUBLE_EQ(r.itl_q.back(), 40);
  EXPECT_TRUE(std::is_sorted(r.itl_q.begin(), r.itl_q.end()));
  // The timeline holds every output token once.
  ASSERT_FALSE(r.output_tps_timeline.empty());
  double tokens = 0;
  for (double v : r.output_tps_timeline) tokens += v * r.timeline_bin_s;
  EXPECT_NEAR(tokens, 6.0, 1e-9);
}

TEST(BenchHttpTallyTest, ShortCompletionsAreCountedAsMismatches) {
  std::vector<RequestSpec> reqs(1);
  reqs[0].prompt = {1};
  reqs[0].output_len = 8;
  std::vector<RequestRecord> recs = {record(0, 50, {5}, 2)};
  HttpBenchReport r;
  tally_http(reqs, recs, r);
  EXPECT_EQ(r.completed, 1);
  EXPECT_EQ(r.length_mismatches, 1);
  EXPECT_EQ(r.output_tokens, 2);  // usage, not the length asked for
  // Without usage, text chunks count the tokens.
  recs[0].completion_tokens = -1;
  HttpBenchReport chunks;
  tally_http(reqs, recs, chunks);
  EXPECT_EQ(chunks.output_tokens, 2);
}

TEST(BenchHttpJsonTest, CarriesOptionsFiguresQuantilesAndTheRatio) {
  HttpBenchOptions o;
  o.load.model = "llama-3.1-8b";
  o.load.max_concurrency = 256;
  HttpBenchReport r;
  r.target = "in-process";
  r.model = "llama-3.1-8b";
  r.device = "NVIDIA H200";
  r.backend = "cuda";
  r.completed = 2;
  r.output_tokens_per_s = 900;
  r.ttft_ms = summarize({1.0, 3.0});
  r.ttft_q = quantiles({1.0, 3.0});
  r.inprocess = ServeBenchReport{};
  r.inprocess->output_tokens_per_s = 1000;
  const nlohmann::json j = http_report_json(o, r, "abc123");
  EXPECT_EQ(j["bench"], "serve_http");
  EXPECT_EQ(j["commit"], "abc123");
  EXPECT_EQ(j["gpu"], "NVIDIA H200");
  EXPECT_EQ(j["model"], "llama-3.1-8b");
  EXPECT_EQ(j["max_concurrency"], 256);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_DOUBLE_EQ(j["http_over_inprocess"].get<double>(), 0.9);
  EXPECT_EQ(j["inprocess"]["bench"], "serve");
  // The in-process server's K/V, at the top and in the Runner figure's line.
  EXPECT_EQ(j["kv_dtype"], "bf16");
  EXPECT_EQ(j["inprocess"]["kv_dtype"], "bf16");
  EXPECT_DOUBLE_EQ(j["ttft_ms_p50"].get<double>(), 2.0);
  EXPECT_EQ(j["ttft_ms_quantiles"].size(), 101u);
  EXPECT_FALSE(j.contains("itl_ms_p50"));  // nothing measured, nothing made up
  r.inprocess.reset();
  EXPECT_FALSE(http_report_json(o, r, "x").contains("http_over_inprocess"));
  EXPECT_EQ(j["response_format"], "text");
  EXPECT_FALSE(j.contains("json_schema_file"));
  o.json_schema = R"({"type":"object"})";
  o.json_schema_file = "bench/schemas/person.json";
  const nlohmann::json c = http_report_json(o, r, "x");
  EXPECT_EQ(c["response_format"], "json_schema");
  EXPECT_EQ(c["json_schema_file"], "bench/schemas/person.json");
  EXPECT_EQ(c["quantize"], "none");
  EXPECT_EQ(c["keep_quantized"], false);
  o.load.kv_dtype = DType::kF8E4M3;
  o.load.quantize = model::Quantize::kFp8;
  const nlohmann::json f = http_report_json(o, r, "x");
  EXPECT_EQ(f["kv_dtype"], "fp8");
  EXPECT_EQ(f["quantize"], "fp8");
  EXPECT_EQ(f["keep_quantized"], true);  // --quantize fp8 keeps the codes
  // A --url server's K/V are its own business: not recorded as ours.
  r.target = "http://127.0.0.1:8000";
  EXPECT_FALSE(http_report_json(o, r, "x").contains("kv_dtype"));
}

TEST(BenchHttpOptionsTest, RefusalsNameTheOption) {
  HttpBenchOptions o;
  o.url = "ftp://x";
  EXPECT_NE(std::string(validate(o).message()).find("--url"), std::string::npos);
  o.url.clear();
  o.prefix_cache_entries = -1;
  EXPECT_NE(std::string(validate(o).message()).find("--prefix-cache-entries"), std::string::npos);
  o.prefix_cache_entries = 0;
  o.request_timeout_s = 0;
  EXPECT_NE(std::string(validate(o).message()).find("--request-timeout"), std::string::npos);
  o.request_timeout_s = 10;
  o.load.requests = 0;  // the shared checks run too
  EXPECT_NE(std::string(validate(o).message()).find("--requests"), std::string::npos);
}

}  // namespace
}  // namespace cellm::bench
