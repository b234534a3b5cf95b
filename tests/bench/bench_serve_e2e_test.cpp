// `cellm bench serve` on the real SmolLM2-135M-Instruct on the CPU, through
// the library and through the binary: the counts it reports agree with the
// load it was asked for and with the runner's own counters; --kv-dtype is
// recorded, and fp8 (CUDA's) is refused on the CPU before anything runs.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/bench_serve.h"
#include "model/loader.h"
#include "support/testdata.h"

namespace cellm::bench {
namespace {

std::filesystem::path smollm2() {
  return cellm::testing::source_dir() / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
}

class BenchServeE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(smollm2()))
        << smollm2() << " is missing: run scripts/fetch-model smollm2";
  }
  static ServeBenchOptions small() {
    ServeBenchOptions o;
    o.model = smollm2().string();
    o.backend = "cpu";
    o.requests = 8;
    o.input_len = 16;
    o.output_len = 8;
    o.max_concurrency = 4;
    o.warmup_requests = 0;
    return o;
  }
  static Result<ServeBenchReport> run(const ServeBenchOptions& o) {
    std::FILE* sink = std::tmpfile();
    EXPECT_NE(sink, nullptr);
    auto r = run_serve_bench(o, sink);
    std::fclose(sink);
    return r;
  }
};

TEST_F(BenchServeE2eTest, CountsMatchTheLoadAndTheRunnersCounters) {
  const auto r = run(small());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->failed, 0) << r->first_error;
  EXPECT_EQ(r->completed, 8);
  EXPECT_EQ(r->output_tokens, 64);
  EXPECT_EQ(r->input_tokens, 128);
  EXPECT_EQ(r->prefilled_tokens, 128);
  EXPECT_EQ(r->backend, "cpu");
  // The runner counted the same work independently of the callbacks.
  EXPECT_EQ(r->engine.total_generated_tokens, 64);
  EXPECT_EQ(r->engine.prefill_tokens_total, 128);
  EXPECT_EQ(r->engine.generations_completed, 8);
  EXPECT_EQ(r->engine.finished_token_limit, 8);
  EXPECT_LE(r->engine.peak_concurrent_generations, 4);
  EXPECT_GT(r->engine.steps, 0);
  // One TTFT, TPOT and E2E per request; seven gaps per eight tokens.
  EXPECT_EQ(r->ttft_ms.count, 8u);
  EXPECT_EQ(r->tpot_ms.count, 8u);
  EXPECT_EQ(r->e2e_ms.count, 8u);
  EXPECT_EQ(r->itl_ms.count, 56u);
  EXPECT_GT(r->duration_s, 0);
  EXPECT_LE(r->ttft_ms.p50, r->e2e_ms.p50);
  EXPECT_LE(r->e2e_ms.p99, r->duration_s * 1e3 + 1e-6);
  EXPECT_NEAR(r->output_tokens_per_s, 64 / r->duration_s, 1e-6);
}

TEST_F(BenchServeE2eTest, SharedPrefixComesFromThePrefixCache) {
  ServeBenchOptions o = small();
  o.requests = 4;
  o.input_len = 8;
  o.output_len = 4;
  o.prefix_len = 12;
  o.max_concurrency = 2;
  o.request_rate = 200;
  o.warmup_requests = 1;  // excluded from the engine counters below
  const auto reused = run(o);
  ASSERT_TRUE(reused.ok()) << reused.status().to_string();
  EXPECT_EQ(reused->completed, 4) << reused->first_error;
  EXPECT_EQ(reused->input_tokens, 4 * 20);
  EXPECT_EQ(reused->output_tokens, 4 * 4);
  // At most the suffixes: the runner's prefix cache holds the shared prefix
  // and the latest prompts, so a request may match beyond the prefix; each
  // prefills at least its last token.
  EXPECT_LE(reused->prefilled_tokens, 4 * 8);
  EXPECT_GE(reused->prefilled_tokens, 4);
  EXPECT_EQ(reused->engine.prefill_tokens_total, reused->prefilled_tokens);
  EXPECT_EQ(reused->engine.total_generated_tokens, 4 * 4);

  o.reuse_prefix = false;
  const auto cold = run(o);
  ASSERT_TRUE(cold.ok()) << cold.status().to_string();
  EXPECT_EQ(cold->completed, 4) << cold->first_error;
  EXPECT_EQ(cold->prefilled_tokens, 4 * 20);
  EXPECT_EQ(cold->engine.prefill_tokens_total, 4 * 20);
}

TEST_F(BenchServeE2eTest, RangeRatioGeneratesTheDrawnLengths) {
  ServeBenchOptions o = small();
  o.range_ratio = 0.5;
  auto spec = model::load_spec(smollm2());
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  std::int64_t in = 0, out = 0;
  for (const RequestSpec& q : make_requests(o, spec->vocab_size)) {
    in += static_cast<std::int64_t>(q.prompt.size());
    out += q.output_len;
  }
  const auto r = run(o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->completed, 8) << r->first_error;
  EXPECT_EQ(r->input_tokens, in);
  EXPECT_EQ(r->output_tokens, out);
  EXPECT_EQ(r->engine.total_generated_tokens, out);
}

TEST_F(BenchServeE2eTest, RequestLongerThanTheContextIsRefusedAndWritesNothing) {
  ServeBenchOptions o = small();
  o.input_len = 9000;  // SmolLM2's context is 8192
  o.json_path = ::testing::TempDir() + "/bench_serve_refused_ctx.jsonl";
  std::remove(o.json_path.c_str());
  const auto r = run(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfResources);
  EXPECT_NE(std::string(r.status().message()).find("context"), std::string::npos)
      << r.status().message();
  std::ifstream json(o.json_path);
  std::string line;
  EXPECT_FALSE(std::getline(json, line)) << "a refused run wrote " << line;
}

TEST_F(BenchServeE2eTest, KvDtypeFp8IsRefusedOnTheCpuSayingWhyAndWritesNothing) {
  ServeBenchOptions o = small();
  o.kv_dtype = DType::kF8E4M3;
  o.json_path = ::testing::TempDir() + "/bench_serve_refused_fp8.jsonl";
  std::remove(o.json_path.c_str());
  const auto r = run(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotSupported);
  const std::string message(r.status().message());
  EXPECT_NE(message.find("--kv-dtype fp8"), std::string::npos) << message;
  EXPECT_NE(message.find("--backend cuda"), std::string::npos) << message;
  std::ifstream json(o.json_path);
  std::string line;
  EXPECT_FALSE(std::getline(json, line)) << "a refused run wrote " << line;
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

TEST(BenchServeCliE2eTest, BinaryPrintsTheTableAndAppendsAJsonLine) {
  ASSERT_TRUE(std::filesystem::exists(smollm2())) << "run scripts/fetch-model smollm2";
  const std::string json = ::testing::TempDir() + "/bench_serve_cli.jsonl";
  std::remove(json.c_str());
  const std::string cmd = std::string(CELLMDEV_BINARY) + " bench serve --model " +
                          smollm2().string() +
                          " --backend cpu --requests 8 --input-len 16 --output-len 8"
                          " --max-concurrency 4 --kv-dtype bf16 --json " +
                          json + " 2>&1";
  int rc = -1;
  const std::string out = run_command(cmd, &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("| requests completed / failed | 8 / 0 |"), std::string::npos) << out;
  EXPECT_NE(out.find("| TTFT |"), std::string::npos) << out;
  EXPECT_NE(out.find("| K/V dtype | bf16 |"), std::string::npos) << out;
  std::ifstream in(json);
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "no JSON line in " << json;
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["bench"], "serve");
  EXPECT_EQ(j["gpu"], "cpu");
  EXPECT_EQ(j["completed"], 8);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["output_tokens"], 64);
  EXPECT_EQ(j["input_tokens"], 128);
  EXPECT_EQ(j["max_concurrency"], 4);
  EXPECT_EQ(j["kv_dtype"], "bf16");
  EXPECT_TRUE(j.contains("itl_ms_p99"));
  EXPECT_TRUE(j.contains("commit"));
  EXPECT_FALSE(std::getline(in, line)) << "one run, one line";
}

TEST(BenchServeCliE2eTest, KvDtypeFp8OnTheCpuExitsWithTheRefusal) {
  ASSERT_TRUE(std::filesystem::exists(smollm2())) << "run scripts/fetch-model smollm2";
  int rc = -1;
  const std::string out =
      run_command(std::string(CELLMDEV_BINARY) + " bench serve --model " + smollm2().string() +
                      " --backend cpu --requests 1 --input-len 4"
                      " --output-len 2 --kv-dtype fp8 2>&1",
                  &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("cellm bench serve:"), std::string::npos) << out;
  EXPECT_NE(out.find("--kv-dtype fp8: the CPU program keeps K/V in f32"), std::string::npos) << out;
  // Refused before the run: no table.
  EXPECT_EQ(out.find("| requests completed"), std::string::npos) << out;
}

TEST(BenchServeCliE2eTest, BadKvDtypeIsACommandLineError) {
  int rc = -1;
  const std::string out =
      run_command(std::string(CELLMDEV_BINARY) + " bench serve --kv-dtype int4 2>&1", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("unknown KV dtype 'int4'"), std::string::npos) << out;
}

TEST(BenchServeCliE2eTest, BadRateIsACommandLineError) {
  int rc = -1;
  const std::string out =
      run_command(std::string(CELLMDEV_BINARY) + " bench serve --request-rate fast 2>&1", &rc);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--request-rate"), std::string::npos) << out;
}

}  // namespace
}  // namespace cellm::bench
