// The pure parts of `cellm bench serve`: percentiles against hand-computed
// values, the Poisson arrivals' statistics, length draws, pool sizing and the
// option checks (each refusal names its option).
#include "bench/bench_serve.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace cellm::bench {
namespace {

TEST(BenchServePercentileTest, InterpolatesBetweenClosestRanks) {
  // 1..10: rank = p/100 * 9; p90 -> 8.1 -> 9 + 0.1 * (10 - 9).
  std::vector<double> v(10);
  std::iota(v.begin(), v.end(), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 5.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 9.1);
  EXPECT_NEAR(percentile(v, 99), 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 10.0);
  EXPECT_DOUBLE_EQ(percentile({7.0}, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0.0);
  // Two points: rank 0.5 at p50.
  EXPECT_DOUBLE_EQ(percentile({2.0, 4.0}, 50), 3.0);
}

TEST(BenchServePercentileTest, SummarySortsItsInputAndAverages) {
  const LatencySummary s = summarize({40, 10, 30, 20});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 25.0);
  EXPECT_DOUBLE_EQ(s.p50, 25.0);    // rank 1.5 of {10,20,30,40}
  EXPECT_NEAR(s.p90, 37.0, 1e-12);  // rank 2.7
  EXPECT_NEAR(s.p99, 39.7, 1e-12);  // rank 2.97
  const LatencySummary empty = summarize({});
  EXPECT_EQ(empty.count, 0u);
  EXPECT_EQ(empty.mean, 0.0);
}

TEST(BenchServeArrivalsTest, InfiniteRateReleasesEverythingAtOnce) {
  const auto a = poisson_arrivals(5, std::numeric_limits<double>::infinity(), 3);
  ASSERT_EQ(a.size(), 5u);
  for (double t : a) EXPECT_EQ(t, 0.0);
  EXPECT_TRUE(poisson_arrivals(0, 10.0, 3).empty());
}

TEST(BenchServeArrivalsTest, GapsAreExponentialWithTheRequestedMean) {
  const double rate = 40.0;
  const int n = 20000;
  const auto a = poisson_arrivals(n, rate, 7);
  ASSERT_EQ(a.size(), static_cast<std::size_t>(n));
  std::vector<double> gaps;
  double prev = 0.0;
  for (double t : a) {
    ASSERT_GE(t, prev);
    gaps.push_back(t - prev);
    prev = t;
  }
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / n;
  double var = 0.0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= n - 1;
  // Exponential: mean 1/rate, coefficient of variation 1, median ln2/rate.
  // The standard error of the mean is 0.7% here; the bounds are 5%.
  EXPECT_NEAR(mean, 1.0 / rate, 0.05 / rate);
  EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.05);
  const auto below =
      std::count_if(gaps.begin(), gaps.end(), [&](double g) { return g < std::log(2.0) / rate; });
  EXPECT_NEAR(static_cast<double>(below) / n, 0.5, 0.02);
  // The last arrival is near n / rate.
  EXPECT_NEAR(a.back(), n / rate, 0.05 * n / rate);
}

TEST(BenchServeArrivalsTest, SeedDecidesTheSequence) {
  EXPECT_EQ(poisson_arrivals(50, 5.0, 11), poisson_arrivals(50, 5.0, 11));
  EXPECT_NE(poisson_arrivals(50, 5.0, 11), poisson_arrivals(50, 5.0, 12));
}

TEST(BenchServeRequestsTest, FixedLengthsSharedPrefixAndVocabularyBounds) {
  ServeBenchOptions o;
  o.requests = 20;
  o.input_len = 16;
  o.output_len = 8;
  o.prefix_len = 5;
  const auto reqs = make_requests(o, 100);
  ASSERT_EQ(reqs.size(), 20u);
  std::set<std::vector<Token>> distinct;
  for (const RequestSpec& r : reqs) {
    ASSERT_EQ(r.prompt.size(), 21u);
    EXPECT_EQ(r.output_len, 8);
    EXPECT_TRUE(std::equal(r.prompt.begin(), r.prompt.begin() + 5, reqs[0].prompt.begin()));
    for (Token t : r.prompt) EXPECT_LT(t, 100u);
    distinct.insert(r.prompt);
  }
  EXPECT_EQ(distinct.size(), 20u);  // random suffixes differ
  EXPECT_EQ(make_requests(o, 100)[3].prompt, reqs[3].prompt);
  o.seed = 2;
  EXPECT_NE(make_requests(o, 100)[3].prompt, reqs[3].prompt);
}

TEST(BenchServeRequestsTest, RangeRatioDrawsUniformlyWithinBounds) {
  const LengthRange r = length_range(100, 0.25);
  EXPECT_EQ(r.lo, 75);
  EXPECT_EQ(r.hi, 125);
  EXPECT_EQ(length_range(100, 0.0).lo, 100);
  EXPECT_EQ(length_range(100, 0.0).hi, 100);
  EXPECT_EQ(length_range(1, 0.9).lo, 1);  // never below one token
  EXPECT_EQ(length_range(3, 0.5).lo, 1);  // floor(1.5)
  EXPECT_EQ(length_range(3, 0.5).hi, 5);  // ceil(4.5)

  ServeBenchOptions o;
  o.requests = 4000;
  o.input_len = 20;
  o.output_len = 10;
  o.range_ratio = 0.5;  // inputs in [10, 30], outputs in [5, 15]
  const auto reqs = make_requests(o, 50);
  std::set<std::size_t> seen_in;
  double sum_in = 0;
  for (const RequestSpec& q : reqs) {
    ASSERT_GE(q.prompt.size(), 10u);
    ASSERT_LE(q.prompt.size(), 30u);
    ASSERT_GE(q.output_len, 5);
    ASSERT_LE(q.output_len, 15);
    seen_in.insert(q.prompt.size());
    sum_in += static_cast<double>(q.prompt.size());
  }
  EXPECT_EQ(seen_in.size(), 21u);  // every length of [10, 30] occurs
  EXPECT_NEAR(sum_in / o.requests, 20.0, 0.5);
}

TEST(BenchServePoolTest, SizesSessionsAndCellsFromConcurrencyAndLengths) {
  ServeBenchOptions o;  // the H200 target: 1000 requests, 512 in / 256 out
  o.max_concurrency = 256;
  PoolNeed need = pool_need(o);
  EXPECT_EQ(need.sessions, 256);
  EXPECT_EQ(need.session_tokens, 768);
  EXPECT_EQ(need.cells, 256 * 768 + 1);

  o.max_concurrency = 0;  // no cap: every request may be in flight
  o.requests = 10;
  EXPECT_EQ(pool_need(o).sessions, 10);
  o.max_concurrency = 50;  // a cap above the request count changes nothing
  EXPECT_EQ(pool_need(o).sessions, 10);

  o.prefix_len = 100;  // the runner's two cache snapshots and the one replacing the oldest
  need = pool_need(o);
  EXPECT_EQ(need.sessions, 13);
  EXPECT_EQ(need.session_tokens, 100 + 512 + 256);
  o.reuse_prefix = false;
  EXPECT_EQ(pool_need(o).sessions, 10);

  o = ServeBenchOptions{};
  o.max_concurrency = 4;
  o.input_len = 100;
  o.output_len = 10;
  o.range_ratio = 0.2;  // the longest request sizes the reservation
  EXPECT_EQ(pool_need(o).session_tokens, 120 + 12);
}

TEST(BenchServePoolTest, RefusesAPoolOrContextTooSmallWithAClearMessage) {
  ServeBenchOptions o;
  o.model = "llama-3.1-8b";
  o.max_concurrency = 256;
  const PoolNeed need = pool_need(o);
  EXPECT_TRUE(check_pool(o, need, need.cells, 131072).is_ok());
  const Status small = check_pool(o, need, need.cells - 1, 131072);
  EXPECT_EQ(small.code(), StatusCode::kOutOfResources);
  const std::string m(small.message());
  EXPECT_NE(m.find("--max-concurrency (now 256)"), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(need.cells)), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(need.cells - 1)), std::string::npos) << m;
  const Status ctx = check_pool(o, need, need.cells, 700);
  EXPECT_EQ(ctx.code(), StatusCode::kOutOfResources);
  EXPECT_NE(std::string(ctx.message()).find("context of 700"), std::string::npos) << ctx.message();
}

// Each case breaks one option and expects the message to name it.
TEST(BenchServeOptionsTest, RefusalsNameTheOption) {
  struct Case {
    const char* option;
    void (*breaks)(ServeBenchOptions&);
  };
  const Case cases[] = {
      {"--model", [](ServeBenchOptions& o) { o.model.clear(); }},
      {"--requests", [](ServeBenchOptions& o) { o.requests = 0; }},
      {"--input-len", [](ServeBenchOptions& o) { o.input_len = 0; }},
      {"--output-len", [](ServeBenchOptions& o) { o.output_len = -3; }},
      {"--range-ratio", [](ServeBenchOptions& o) { o.range_ratio = 1.0; }},
      {"--range-ratio", [](ServeBenchOptions& o) { o.range_ratio = -0.1; }},
      {"--range-ratio", [](ServeBenchOptions& o) { o.range_ratio = std::nan(""); }},
      {"--prefix-len", [](ServeBenchOptions& o) { o.prefix_len = -1; }},
      {"--request-rate", [](ServeBenchOptions& o) { o.request_rate = 0; }},
      {"--request-rate", [](ServeBenchOptions& o) { o.request_rate = std::nan(""); }},
      {"--max-concurrency", [](ServeBenchOptions& o) { o.max_concurrency = -1; }},
      {"--prefill-chunk", [](ServeBenchOptions& o) { o.prefill_chunk = -1; }},
      {"--max-batch-tokens", [](ServeBenchOptions& o) { o.max_batch_tokens = -1; }},
      {"--max-batch-tokens",
       [](ServeBenchOptions& o) {
         o.max_concurrency = 64;
         o.max_batch_tokens = 64 + effective_prefill_chunk(o) - 1;
       }},
      {"--max-batch-tokens",
       [](ServeBenchOptions& o) {
         o.max_concurrency = 64;
         o.prefill_chunk = 1000;
         o.max_batch_tokens = 64 + 999;
       }},
      {"--warmup", [](ServeBenchOptions& o) { o.warmup_requests = -1; }},
      {"--progress", [](ServeBenchOptions& o) { o.progress_s = -1; }},
      {"--progress", [](ServeBenchOptions& o) { o.progress_s = std::nan(""); }},
      {"--temperature", [](ServeBenchOptions& o) { o.temperature = -0.5f; }},
      {"--top-p", [](ServeBenchOptions& o) { o.top_p = 0.0f; }},
      {"--top-p", [](ServeBenchOptions& o) { o.top_p = std::nan(""); }},
      {"--top-k", [](ServeBenchOptions& o) { o.top_k = -2; }},
      {"--top-p", [](ServeBenchOptions& o) { o.top_p = 0.9f; }},  // without a temperature
      {"--gpu-memory-fraction", [](ServeBenchOptions& o) { o.gpu_memory_fraction = 0; }},
      {"--gpu-memory-fraction", [](ServeBenchOptions& o) { o.gpu_memory_fraction = 1.5; }},
      {"--input-len", [](ServeBenchOptions& o) { o.input_len = 2000000000; }},
      {"--max-concurrency",
       [](ServeBenchOptions& o) {
         o.requests = 100000;
         o.input_len = 100000;
       }},
  };
  ASSERT_TRUE(validate(ServeBenchOptions{}).is_ok());
  for (const Case& c : cases) {
    ServeBenchOptions o;
    c.breaks(o);
    const Status s = validate(o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.option;
    EXPECT_NE(std::string(s.message()).find(c.option), std::string::npos)
        << c.option << ": " << s.message();
  }
}

TEST(BenchServeOptionsTest, AcceptsFiniteRatesAndTheExactBatchMinimum) {
  ServeBenchOptions o;
  o.request_rate = 0.5;
  o.max_concurrency = 64;
  o.max_batch_tokens = 64 + effective_prefill_chunk(o);
  EXPECT_TRUE(validate(o).is_ok());
  o.prefill_chunk = 1000;
  o.max_batch_tokens = 64 + 1000;
  EXPECT_TRUE(validate(o).is_ok());
  o.temperature = 0.8f;
  o.top_p = 0.95f;
  o.top_k = 40;
  EXPECT_TRUE(validate(o).is_ok());
}

// A refused run changes nothing: no JSON line is written for bad options.
TEST(BenchServeOptionsTest, RunRefusesBadOptionsBeforeLoadingAnything) {
  ServeBenchOptions o;
  o.requests = -1;
  o.json_path = ::testing::TempDir() + "/bench_serve_refused.jsonl";
  std::remove(o.json_path.c_str());
  std::FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  const auto r = run_serve_bench(o, sink);
  std::fclose(sink);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  FILE* f = std::fopen(o.json_path.c_str(), "r");
  EXPECT_EQ(f, nullptr) << "a refused run created " << o.json_path;
  if (f) std::fclose(f);
}

TEST(BenchServeOptionsTest, UnknownModelIsNeitherAPathNorAShape) {
  ServeBenchOptions o;
  o.model = "no-such-model-xyz";
  std::FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  const auto r = run_serve_bench(o, sink);
  std::fclose(sink);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string m(r.status().message());
  EXPECT_NE(m.find("no-such-model-xyz"), std::string::npos) << m;
  EXPECT_NE(m.find("llama-3.1-8b"), std::string::npos) << m;  // lists the shapes
}

TEST(BenchServeReportTest, JsonCarriesConfigFiguresAndOnlyMeasuredLatencies) {
  ServeBenchOptions o;
  o.max_concurrency = 4;
  ServeBenchReport r;
  r.device = "cpu";
  r.backend = "cpu";
  r.completed = 3;
  r.output_tokens = 24;
  r.ttft_ms = summarize({1, 2, 3});
  const nlohmann::json j = report_json(o, r, "abc123");
  EXPECT_EQ(j["bench"], "serve");
  EXPECT_EQ(j["commit"], "abc123");
  EXPECT_EQ(j["gpu"], "cpu");
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["max_concurrency"], 4);
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["output_tokens"], 24);
  EXPECT_DOUBLE_EQ(j["ttft_ms_p50"].get<double>(), 2.0);
  EXPECT_FALSE(j.contains("itl_ms_p50"));  // nothing measured, nothing written
  EXPECT_EQ(j["kv_dtype"], "bf16");        // the default, written all the same
  const std::string table = format_report(o, r);
  EXPECT_NE(table.find("| TTFT | 2.00 | 2.00 |"), std::string::npos) << table;
  EXPECT_NE(table.find("| ITL | -- |"), std::string::npos) << table;
  EXPECT_NE(table.find("| K/V dtype | bf16 |"), std::string::npos) << table;
  EXPECT_EQ(j["quantize"], "none");
  EXPECT_EQ(j["keep_quantized"], false);
  o.kv_dtype = DType::kF8E4M3;
  o.keep_quantized = true;
  const nlohmann::json kept = report_json(o, r, "abc123");
  EXPECT_EQ(kept["kv_dtype"], "fp8");
  EXPECT_EQ(kept["keep_quantized"], true);
  EXPECT_NE(format_report(o, r).find("| K/V dtype | fp8 |"), std::string::npos);
}

TEST(BenchServeReportTest, ProgressLineCountsAndMeanStepsByKind) {
  EngineMetrics e;
  e.generations_completed = 7;
  e.total_generated_tokens = 900;
  e.prefill_tokens_total = 4096;
  e.steps = 30;
  e.steps_with_decode = 28;
  e.steps_with_prefill = 6;  // 4 mixed, 2 prefill-only, 24 decode-only
  e.decode_only_latency_sum_us = 24 * 1500;
  e.mixed_latency_sum_us = 4 * 9000;
  e.prefill_only_latency_sum_us = 2 * 12500;
  ASSERT_EQ(e.decode_only_steps(), 24);
  ASSERT_EQ(e.mixed_steps(), 4);
  EXPECT_EQ(progress_line(e, 100),
            "7/100 requests done, 900 tokens generated, 4096 prefilled; 30 steps, mean ms "
            "decode-only 1.50 / mixed 9.00 / prefill-only 12.50");
  EXPECT_NE(progress_line(EngineMetrics{}, 5).find("decode-only - / mixed - / prefill-only -"),
            std::string::npos);
}

}  // namespace
}  // namespace cellm::bench
