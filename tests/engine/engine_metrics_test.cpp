// EngineMetrics counting rules, GenerationMetrics derivations and the text
// reports.
#include "cellm/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "engine/runner_fixture.h"

namespace cellm::testing {
namespace {

using Tokens = std::vector<Token>;
using EngineMetricsTest = RunnerFixture;

TEST_F(EngineMetricsTest, CountsStepsSequencesAndTokens) {
  Session s = open();
  Collector c;
  run(s, Tokens(10, 1), budget(3), c);  // chunks 8 + 2 in one step, then 2 decodes
  runner->shutdown();
  const EngineMetrics m = runner->metrics();
  EXPECT_EQ(m.steps, 3);
  EXPECT_EQ(m.steps_failed, 0);
  EXPECT_EQ(m.prefill_tokens_total, 10);
  EXPECT_EQ(m.decode_tokens_total, 2);
  EXPECT_EQ(m.model_input_tokens(), 12);
  EXPECT_EQ(m.prefill_sessions_total, 1);
  EXPECT_EQ(m.decode_sessions_total, 2);
  EXPECT_EQ(m.steps_with_prefill, 1);
  EXPECT_EQ(m.steps_with_decode, 2);
  EXPECT_EQ(m.decode_only_steps(), 2);
  EXPECT_EQ(m.prefill_only_steps(), 1);
  EXPECT_EQ(m.mixed_steps(), 0);
  EXPECT_EQ(m.decode_only_tokens, 2);
  EXPECT_EQ(m.total_prompt_tokens, 10);
  EXPECT_EQ(m.total_generated_tokens, 3);
  EXPECT_EQ(m.total_tokens(), 13);
  EXPECT_EQ(m.context_sum, 10 + 11 + 12);
  EXPECT_EQ(m.context_max, 12);
  EXPECT_EQ(m.ready_total, 2);  // the two decode steps followed the first token
  EXPECT_DOUBLE_EQ(m.admitted_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(m.mean_step_tokens(), 4.0);
}

TEST_F(EngineMetricsTest, StartsAndCompletionsBalanceAcrossMixedOutcomes) {
  exec.set_stop(999, 1);
  Session a = open();
  Session b = open();
  Session c = open();
  GenConfig stop = budget(5);
  stop.stop_tokens = {999};
  Collector x, y, z, w;
  run(a, {1}, stop, x);
  run(b, {1}, budget(1), y);
  run(c, {1}, budget(0), z);  // rejected on the engine: started and failed
  auto h = c.generate_async(Tokens{1}, budget(1000000), w.on_update());
  ASSERT_TRUE(wait_until([&] { return w.count() >= 1; }));
  h.cancel();
  h.wait();
  runner->shutdown();
  const EngineMetrics m = runner->metrics();
  EXPECT_EQ(m.generations_started, 4);
  EXPECT_EQ(m.generations_completed, 4);
  EXPECT_EQ(m.finished_stop_token, 1);
  EXPECT_EQ(m.finished_token_limit, 1);
  EXPECT_EQ(m.finished_failed, 1);
  EXPECT_EQ(m.finished_cancelled, 1);
  EXPECT_EQ(m.ttft_count, 3);  // the rejected one never reached a token
}

TEST_F(EngineMetricsTest, FailedBatchIsCountedWithoutCreditingItsTokens) {
  Session s = open();
  exec.set_fail_batches_from(0);
  Collector c;
  run(s, {1, 2, 3}, budget(2), c);
  runner->shutdown();
  const EngineMetrics m = runner->metrics();
  EXPECT_EQ(m.steps, 1);
  EXPECT_EQ(m.steps_failed, 1);
  EXPECT_EQ(m.prefill_tokens_total, 0);
  EXPECT_EQ(m.decode_tokens_total, 0);
  EXPECT_EQ(m.finished_failed, 1);
  EXPECT_EQ(m.ttft_count, 0);
}

TEST_F(EngineMetricsTest, SingleTokenGenerationReportsZeroMinimumItl) {
  Session s = open();
  Collector c;
  auto h = run(s, {1}, budget(1), c);
  const GenerationMetrics g = h.metrics();
  EXPECT_EQ(g.itl_count, 0);
  EXPECT_EQ(g.min_itl_us(), 0);
  EXPECT_EQ(g.decode_tokens_per_sec(), 0.0);
  EXPECT_GE(g.ttft_us(), 0);
  EXPECT_EQ(g.n_generated_tokens, 1);
}

TEST_F(EngineMetricsTest, CallbackExceptionIsCountedAsACompletedFailure) {
  Session s = open();
  auto h = s.generate_async(Tokens{1}, budget(1), [](const GenerationUpdate&) {
    throw std::runtime_error("bad callback");
  });
  h.wait();
  runner->shutdown();
  const EngineMetrics m = runner->metrics();
  EXPECT_EQ(m.generations_completed, 1);
  EXPECT_EQ(m.finished_failed, 1);
  EXPECT_EQ(m.finished_token_limit, 0);
}

TEST_F(EngineMetricsTest, LatencyBucketsPartitionTotalStepTime) {
  Session a = open();
  Session b = open();
  Collector c, d;
  auto ha = a.generate_async(Tokens{1}, budget(6), c.on_update());
  ASSERT_TRUE(wait_until([&] { return c.count() >= 1; }));
  auto hb = b.generate_async(Tokens(20, 3), budget(2), d.on_update());
  ha.wait();
  hb.wait();
  runner->shutdown();
  const EngineMetrics m = runner->metrics();
  EXPECT_EQ(m.decode_only_latency_sum_us + m.mixed_latency_sum_us + m.prefill_only_latency_sum_us,
            m.step_latency_sum_us);
  EXPECT_EQ(m.decode_only_steps() + m.mixed_steps() + m.prefill_only_steps(), m.steps);
  EXPECT_LE(m.step_latency_max_us, m.step_latency_sum_us);
}

TEST_F(EngineMetricsTest, ReportsContextConcurrencyAndRefusals) {
  exec.set_capacity(3);
  Session gate = open();
  Session a = open();
  Session b = open();
  EXPECT_FALSE(runner->open_session_async().get().has_value());
  auto hg = occupy_engine(gate);
  Collector c, d;
  auto ha = a.generate_async(Tokens{1, 2}, budget(2), c.on_update());
  auto hb = b.generate_async(Tokens{1, 2, 3}, budget(2), d.on_update());
  exec.release();
  hg.wait();
  ha.wait();
  hb.wait();
  runner->shutdown();
  const EngineMetrics m = runner->metrics();
  EXPECT_EQ(m.sessions_refused, 1);
  EXPECT_EQ(m.peak_concurrent_generations, 2);
  EXPECT_EQ(m.context_max, 3 + 4);  // the decode step: 3 and 4
}

TEST_F(EngineMetricsTest, MultiChunkPromptCountsContextOncePerSession) {
  start(4, 2);  // chunk 2, budget 8: three chunks in one step
  Session s = open();
  Collector c;
  run(s, Tokens(6, 1), budget(1), c);
  runner->shutdown();
  const EngineMetrics m = runner->metrics();
  EXPECT_EQ(m.steps, 1);
  EXPECT_EQ(m.context_sum, 6);
  EXPECT_EQ(m.prefill_sessions_total, 1);
}

TEST_F(EngineMetricsTest, InitializationIsTimedAndKeptOutOfTheWall) {
  exec.set_init(true, false, false, std::chrono::milliseconds(40));
  Session s = open();
  Collector c;
  run(s, {1}, budget(1), c);  // one step: the wall is one execute, far below 40 ms
  runner->shutdown();
  const EngineMetrics m = runner->metrics();
  EXPECT_GE(m.init_us, 40000);
  EXPECT_LT(m.wall_us(), m.init_us);
}

TEST(MetricsTest, GenerationDerivedValues) {
  GenerationMetrics g;
  const auto t0 = MetricsClock::now();
  g.t_submit = t0;
  g.t_first_step = t0 + std::chrono::microseconds(100);
  g.t_first_token = t0 + std::chrono::microseconds(600);
  g.t_end = t0 + std::chrono::microseconds(2600);
  g.n_prompt_tokens = 50;
  g.itl_count = 4;
  g.itl_sum_us = 2000;
  g.itl_min_us = 100;
  g.itl_max_us = 900;
  EXPECT_EQ(g.ttft_us(), 600);
  EXPECT_EQ(g.queue_wait_us(), 100);
  EXPECT_EQ(g.prefill_span_us(), 500);
  EXPECT_EQ(g.decode_span_us(), 2000);
  EXPECT_EQ(g.e2e_us(), 2600);
  EXPECT_DOUBLE_EQ(g.itl_mean_us(), 500.0);
  EXPECT_EQ(g.min_itl_us(), 100);
  EXPECT_DOUBLE_EQ(g.decode_tokens_per_sec(), 2000.0);
  EXPECT_DOUBLE_EQ(g.prefill_tokens_per_sec(), 100000.0);
  const std::string report = format_report(g);
  EXPECT_NE(report.find("prompt 50"), std::string::npos);
  EXPECT_NE(report.find("0.6 ms"), std::string::npos);
}

TEST(MetricsTest, EmptyReportsPrintPlaceholders) {
  GenerationMetrics g;
  EXPECT_EQ(g.ttft_us(), 0);
  EXPECT_EQ(g.min_itl_us(), 0);
  const std::string gr = format_report(g);
  EXPECT_NE(gr.find("ttft: --"), std::string::npos);
  EngineMetrics e;
  EXPECT_EQ(e.wall_us(), 0);
  EXPECT_EQ(e.idle_fraction(), 0.0);
  EXPECT_EQ(e.min_ttft_us(), 0);
  const std::string er = format_report(e);
  EXPECT_NE(er.find("--"), std::string::npos);
  EXPECT_NE(er.find("0 steps"), std::string::npos);
}

TEST(MetricsTest, EngineDerivedValues) {
  EngineMetrics e;
  const auto t0 = MetricsClock::now();
  e.t_first_step = t0;
  e.t_last_step = t0 + std::chrono::microseconds(10000);
  e.steps = 4;
  e.steps_with_decode = 3;
  e.steps_with_prefill = 2;
  e.step_latency_sum_us = 8000;
  e.decode_only_latency_sum_us = 4000;
  e.mixed_latency_sum_us = 2000;
  e.prefill_only_latency_sum_us = 2000;
  e.decode_only_tokens = 8;
  e.decode_tokens_total = 10;
  e.prefill_tokens_total = 30;
  e.decode_sessions_total = 10;
  e.ready_total = 20;
  e.decode_session_time_sum_us = 25000;
  e.total_generated_tokens = 10;
  e.context_sum = 400;
  EXPECT_EQ(e.wall_us(), 10000);
  EXPECT_DOUBLE_EQ(e.idle_fraction(), 0.2);
  EXPECT_EQ(e.mixed_steps(), 1);
  EXPECT_EQ(e.decode_only_steps(), 2);
  EXPECT_EQ(e.prefill_only_steps(), 1);
  EXPECT_DOUBLE_EQ(e.mean_decode_only_step_us(), 2000.0);
  EXPECT_DOUBLE_EQ(e.decode_only_tokens_per_sec(), 2000.0);
  EXPECT_DOUBLE_EQ(e.admitted_ratio(), 0.5);
  EXPECT_DOUBLE_EQ(e.mean_decode_us_per_token(), 2500.0);
  EXPECT_DOUBLE_EQ(e.generated_tokens_per_sec(), 1000.0);
  EXPECT_DOUBLE_EQ(e.model_input_tokens_per_sec(), 4000.0);
  EXPECT_DOUBLE_EQ(e.mean_context_per_step(), 100.0);
  EXPECT_DOUBLE_EQ(e.mean_decode_step_sessions(), 10.0 / 3.0);
}

}  // namespace
}  // namespace cellm::testing
