// The KV-cell gauge: a CudaExecutor (over the executor tests' ToyProgram,
// host sampling) publishes its cell count after every engine-thread call
// that can change it; RunnerService reports it as ServiceStats and /metrics
// exports cellm:kv_cells_used / cellm:kv_cells_total. Readings taken from the
// generation's own events (engine thread) show the count rising token by
// token; once the job is gone the cells are back.
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>

#include "cellm/decode_first_scheduler.h"
#include "executor/cuda_executor.h"
#include "executor/toy_program.h"
#include "fake_service.h"
#include "server/http_server.h"
#include "server/runner_service.h"

namespace cellm::server::testing {
namespace {

ModelText numeric_text() {
  ModelText t;
  t.tokenize = [](std::string_view, bool) -> Result<std::vector<Token>> {
    return std::vector<Token>{1, 2, 3};
  };
  t.render_chat = [](const nlohmann::ordered_json&, const nlohmann::ordered_json&,
                     bool) -> Result<std::string> { return std::string("x"); };
  t.detokenize = [](std::span<const Token> ids) { return std::string(ids.size(), 't'); };
  t.text_stream = [] {
    struct Ts : TokenTextStream {
      std::string push(Token) override { return "t"; }
      std::string finish() override { return {}; }
    };
    return std::unique_ptr<TokenTextStream>(new Ts);
  };
  return t;
}

struct GaugeStack {
  GaugeStack() {
    executor::testing::ToyConfig config;
    config.max_context = 64;
    config.max_cells = 257;  // 256 usable plus the scratch cell
    program = std::make_shared<executor::testing::ToyProgram>(config);
    auto made = executor::CudaExecutor::create(program, 4, 64);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    executor = std::move(*made);
    runner.emplace(*executor, DecodeFirstScheduler::create(64, 16, 16));
    ModelText text = numeric_text();
    text.stats = [ex = executor.get()] {
      const executor::CudaExecutor::KvCells cells = ex->published_kv_cells();
      return ServiceStats{cells.used, cells.total};
    };
    RunnerServiceConfig c;
    c.model_name = "toy";
    c.context_length = 64;
    c.vocab_size = 32;
    c.max_sessions = 4;
    service = std::make_shared<RunnerService>(*runner, std::move(text), c);
  }
  ~GaugeStack() {
    service.reset();
    runner->shutdown();
  }
  std::shared_ptr<executor::testing::ToyProgram> program;
  std::unique_ptr<executor::CudaExecutor> executor;
  std::optional<Runner> runner;
  std::shared_ptr<RunnerService> service;
};

std::string metrics_of(int port) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get("/metrics");
  EXPECT_TRUE(res);
  return res ? res->body : std::string();
}

TEST(KvGaugeTest, CellsRiseDuringAGenerationAndReturnAfter) {
  GaugeStack s;
  ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  Server server(o);
  ASSERT_TRUE(server.bind().is_ok());
  server.set_service(s.service);
  std::thread serving([&] { (void)server.serve(); });

  EXPECT_EQ(s.service->stats().kv_cells_total, 256);
  EXPECT_EQ(s.service->stats().kv_cells_used, 0);
  const std::string idle = metrics_of(server.port());
  EXPECT_NE(idle.find("cellm:kv_cells_used 0\n"), std::string::npos) << idle;
  EXPECT_NE(idle.find("cellm:kv_cells_total 256\n"), std::string::npos) << idle;

  // Each event reads the gauge on the engine thread, right after the step
  // that produced it: prompt + delivered tokens - 1 cells are committed then
  // (the newest token is fed back in the next step).
  struct Reading {
    std::int64_t delivered;
    std::int64_t used;
  };
  std::mutex mu;
  std::vector<Reading> readings;
  std::int64_t delivered = 0;
  GenerationSpec spec;
  spec.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  spec.max_new_tokens = 20;
  bool finished = false;
  auto job = s.service->start(spec,
                              [&](ChoiceEvent e) {
                                std::lock_guard lock(mu);
                                delivered += static_cast<std::int64_t>(e.tokens.size());
                                readings.push_back({delivered, s.service->stats().kv_cells_used});
                                finished = finished || e.finish.has_value();
                              });
  ASSERT_TRUE(job.ok()) << job.status().to_string();
  ASSERT_TRUE(FakeService::eventually([&] {
    std::lock_guard lock(mu);
    return finished;
  }));
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(delivered, 20);
    ASSERT_GE(readings.size(), 2u);
    for (const Reading& r : readings) {
      EXPECT_EQ(r.used, 10 + r.delivered - 1) << "after " << r.delivered << " tokens";
    }
  }
  // The engine closes a finished request's session itself, in the step that
  // ended it, whether or not the job is still held.
  EXPECT_TRUE(FakeService::eventually([&] { return s.service->stats().kv_cells_used == 0; }));
  job->reset();
  const std::string after = metrics_of(server.port());
  EXPECT_NE(after.find("cellm:kv_cells_used 0\n"), std::string::npos) << after;
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace cellm::server::testing
