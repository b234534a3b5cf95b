// batching_spec §6.2 re-expressed for the real CPU program (a tiny random
// llama, checked against the double-precision reference forward of
// tests/backend/cpu/tiny_model.h): padding rows never corrupt another
// session, cells are reused across rounds without leaking, the same prompt
// twice in one batch, limits the pool cannot hold are refused with nothing
// changed, and a program exporting only {forward_1, forward_4,
// forward_others >= 5 rows}. The interleaved hand schedule that uses every
// method is InterleavedScheduleMatchesTheReference in
// cpu_program_executor_test.cpp.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_program.h"
#include "driver.h"
#include "logit_steppers.h"
#include "tiny_model.h"

namespace cellm::executor::testing {
namespace {

using cpu::testing::TinyModel;

constexpr double kRefTol = 1e-4;  // float32 forward vs the double reference

program::ProgramOptions options() {
  program::ProgramOptions o;
  o.static_widths = {1, 2, 4, 8};
  o.max_step = 32;
  o.kv_cells = 256;
  return o;
}

std::shared_ptr<program::Program> make_program(const TinyModel& m,
                                               const program::ProgramOptions& o = options()) {
  auto made = cpu::CpuProgram::create(m.spec, m.weights, o);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  if (!made.ok()) return nullptr;
  return std::shared_ptr<program::Program>(std::move(made).value());
}

std::vector<std::int64_t> make_tokens(std::size_t n, std::int64_t vocab, std::uint64_t salt) {
  std::vector<std::int64_t> t(n);
  for (std::size_t i = 0; i < n; ++i) {
    t[i] = static_cast<std::int64_t>((i * 5 + salt * 11 + i * i * 3) % vocab);
  }
  return t;
}

// A stream with everything it will be fed and the reference logits after
// each of those tokens.
struct Planned {
  std::vector<std::int64_t> tokens;
  std::vector<std::vector<double>> reference;
  StreamId id = -1;
  std::size_t fed = 0;
};

Planned plan(const TinyModel& m, std::vector<std::int64_t> tokens) {
  Planned p;
  p.reference = cpu::testing::reference_logits(m.spec, m.weights, tokens);
  p.tokens = std::move(tokens);
  return p;
}

// Feeds the next `count` tokens of each planned stream as one step and
// checks every row against the reference.
void feed(LogitStepper& s, const std::vector<std::pair<Planned*, std::size_t>>& work,
          const std::string& label) {
  std::vector<StreamToken> tokens;
  std::vector<std::pair<Planned*, std::size_t>> owner;
  for (const auto& [p, count] : work) {
    for (std::size_t j = 0; j < count; ++j, ++p->fed) {
      ASSERT_LT(p->fed, p->tokens.size()) << label;
      tokens.push_back({p->id, p->tokens[p->fed]});
      owner.emplace_back(p, p->fed);
    }
  }
  auto rows = s.step(tokens);
  ASSERT_TRUE(rows.ok()) << label << ": " << rows.status().to_string();
  for (std::size_t r = 0; r < owner.size(); ++r) {
    const auto [p, pos] = owner[r];
    const double err = cpu::testing::relative_error((*rows)[r], p->reference[pos]);
    EXPECT_LE(err, kRefTol) << label << ": stream " << p->id << " position " << pos;
  }
}

// 5 sessions of 51 tokens fill the 255 usable cells.
std::unique_ptr<LogitStepper> stepper(StepperKind kind, const TinyModel& m, int sessions = 5,
                                      int tokens = 51) {
  auto made = make_stepper(kind, make_program(m), sessions, tokens);
  EXPECT_TRUE(made.ok()) << made.status().to_string();
  return made.ok() ? std::move(made).value() : nullptr;
}

class CpuScenarioTest : public ::testing::TestWithParam<StepperKind> {
 protected:
  TinyModel model_ = cpu::testing::make_tiny_model(model::Architecture::kLlama, 3);
  std::int64_t vocab() const { return model_.spec.vocab_size; }
};

// Static methods pad to their width with token 0 at position 0 (the scratch
// cell). Two sessions share steps of 3, 2, 5, 6 and 7 real tokens (forward_4,
// forward_2 and forward_8 with 1, 3, 2 and 1 padding rows) while a third,
// prefilled earlier, sits idle: every row of every session must still match
// the reference, and no real cell may have been handed to padding.
TEST_P(CpuScenarioTest, PaddingNeverCorruptsAnotherSession) {
  auto s = stepper(GetParam(), model_);
  ASSERT_NE(s, nullptr);
  Planned a = plan(model_, make_tokens(30, vocab(), 1));
  Planned b = plan(model_, make_tokens(30, vocab(), 2));
  Planned idle = plan(model_, make_tokens(12, vocab(), 3));
  for (Planned* p : {&a, &b, &idle}) p->id = s->open().value_or(-1);
  feed(*s, {{&idle, 11}}, "idle prefill");
  feed(*s, {{&a, 5}}, "a prefill");  // forward_8, 3 padding rows
  const std::vector<std::size_t> b_counts = {2, 1, 4, 5, 6};
  for (std::size_t k = 0; k < b_counts.size(); ++k) {
    feed(*s, {{&a, 1}, {&b, b_counts[k]}}, "padded step " + std::to_string(k));
  }
  feed(*s, {{&idle, 1}}, "idle decode after the padded steps");
  ASSERT_FALSE(HasFailure());
  cache::CellCache& cache = s->cache();
  EXPECT_EQ(cache.refcount(cache::kScratchCell), 0);
  const OffGraphKVMetrics kv = s->kv_metrics();
  EXPECT_EQ(kv.cells_used, static_cast<std::int32_t>(a.fed + b.fed + idle.fed));
  if (GetParam() == StepperKind::kRaw) {
    for (const Planned* p : {&a, &b, &idle}) {
      const auto table = cache.cell_table(static_cast<cache::SeqId>(p->id));
      EXPECT_EQ(table.size(), p->fed);
      EXPECT_EQ(std::count(table.begin(), table.end(), cache::kScratchCell), 0);
    }
  }
}

// Two rounds of four sessions, closed in between; the second round feeds
// other tokens into the cells the first one freed. Both rounds match the
// reference and the pool returns to its baseline after each.
TEST_P(CpuScenarioTest, CellsAreReusedAcrossRoundsWithoutLeaks) {
  auto s = stepper(GetParam(), model_);
  ASSERT_NE(s, nullptr);
  const OffGraphKVMetrics baseline = s->kv_metrics();
  EXPECT_EQ(baseline.cells_used, 0);
  std::int32_t first_high_water = -1;
  for (std::uint64_t round = 0; round < 2; ++round) {
    std::vector<Planned> streams;
    for (std::size_t len : {1u, 3u, 7u, 20u}) {
      streams.push_back(plan(model_, make_tokens(len + 6, vocab(), 10 * round + len)));
    }
    std::vector<std::pair<Planned*, std::size_t>> prefill;
    for (Planned& p : streams) {
      p.id = s->open().value_or(-1);
      prefill.emplace_back(&p, p.tokens.size() - 6);
    }
    const std::string label = "round " + std::to_string(round);
    feed(*s, prefill, label + " prefill");
    for (int d = 0; d < 6; ++d) {
      std::vector<std::pair<Planned*, std::size_t>> decode;
      for (Planned& p : streams) decode.emplace_back(&p, 1);
      feed(*s, decode, label + " decode");
    }
    ASSERT_FALSE(HasFailure());
    for (Planned& p : streams) s->close(p.id);
    const OffGraphKVMetrics kv = s->kv_metrics();
    EXPECT_EQ(kv.cells_used, baseline.cells_used) << label;
    EXPECT_EQ(kv.cells_free, baseline.cells_free) << label;
    EXPECT_EQ(kv.sessions, baseline.sessions) << label;
    if (round == 0) first_high_water = kv.high_water;
    EXPECT_EQ(kv.high_water, first_high_water) << label << ": freed cells were not reused";
  }
}

TEST_P(CpuScenarioTest, SamePromptTwiceInOneBatch) {
  auto s = stepper(GetParam(), model_);
  ASSERT_NE(s, nullptr);
  Planned a = plan(model_, make_tokens(26, vocab(), 4));
  Planned b = a;
  a.id = s->open().value_or(-1);
  b.id = s->open().value_or(-1);
  std::vector<StreamToken> tokens;
  for (std::size_t i = 0; i < 20; ++i) tokens.push_back({a.id, a.tokens[i]});
  for (std::size_t i = 0; i < 20; ++i) tokens.push_back({b.id, b.tokens[i]});
  for (std::size_t step = 0; step < 7; ++step) {
    auto rows = s->step(tokens);
    ASSERT_TRUE(rows.ok()) << rows.status().to_string();
    const std::size_t half = tokens.size() / 2;
    const std::size_t first = step == 0 ? 0 : 19 + step;
    for (std::size_t r = 0; r < half; ++r) {
      const auto& ra = (*rows)[r];
      const auto& rb = (*rows)[half + r];
      EXPECT_LE(cpu::testing::relative_error(ra, a.reference[first + r]), kRefTol);
      // The same history must give the same row up to summation order.
      EXPECT_LE(cpu::testing::relative_error(rb, ra), 2e-6) << "position " << first + r;
      EXPECT_EQ(std::max_element(ra.begin(), ra.end()) - ra.begin(),
                std::max_element(rb.begin(), rb.end()) - rb.begin());
    }
    if (step == 6) break;
    tokens = {{a.id, a.tokens[20 + step]}, {b.id, b.tokens[20 + step]}};
  }
}

INSTANTIATE_TEST_SUITE_P(Executors, CpuScenarioTest,
                         ::testing::Values(StepperKind::kModule, StepperKind::kCuda,
                                           StepperKind::kRaw),
                         [](const auto& info) { return stepper_kind_name(info.param); });

OffGraphKVMetrics metrics_of(Executor& ex) {
  if (auto* c = dynamic_cast<CudaExecutor*>(&ex)) return c->kv_metrics();
  return dynamic_cast<ModuleExecutor&>(ex).kv_metrics();
}

void expect_same(const OffGraphKVMetrics& a, const OffGraphKVMetrics& b, const std::string& what) {
  EXPECT_EQ(a.cells_used, b.cells_used) << what;
  EXPECT_EQ(a.cells_free, b.cells_free) << what;
  EXPECT_EQ(a.logical_length, b.logical_length) << what;
  EXPECT_EQ(a.high_water, b.high_water) << what;
  EXPECT_EQ(a.sessions, b.sessions) << what;
}

std::int64_t reference_next(const TinyModel& m, const std::vector<std::int64_t>& history) {
  const auto logits = cpu::testing::reference_logits(m.spec, m.weights, history);
  const auto& last = logits.back();
  return std::max_element(last.begin(), last.end()) - last.begin();
}

// 256 cells (one scratch) and a 256-token context: what does not fit is
// refused at create() with InvalidArgument, the same program then serves an
// executor that fits exactly, and a batch that would run a session past its
// limit, a session or clone past max_sessions are refused with the pool and
// the sessions unchanged.
TEST(CpuScenarioLimitsTest, LimitsThePoolCannotHoldAreRefused) {
  const TinyModel m = cpu::testing::make_tiny_model(model::Architecture::kLlama, 3);
  auto program = make_program(m);
  ASSERT_NE(program, nullptr);
  const auto refused = [](const Status& status, std::string_view fragment) {
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
    EXPECT_NE(status.message().find(fragment), std::string_view::npos) << status.message();
  };
  refused(CudaExecutor::create(program, 8, 64).status(), "pool");
  refused(CudaExecutor::create(program, 1, 257).status(), "context");
  refused(CudaExecutor::create(program, 300, 0).status(), "");
  refused(ModuleExecutor::create(program, 8, 64).status(), "pool");
  refused(ModuleExecutor::create(program, 1, 257).status(), "context");

  for (bool module : {false, true}) {
    SCOPED_TRACE(module ? "module" : "cuda");
    std::unique_ptr<Executor> ex;
    if (module) {
      auto made = ModuleExecutor::create(program, 5, 51);  // exactly 255 cells
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      ex = std::move(made).value();
    } else {
      auto made = CudaExecutor::create(program, 5, 51);
      ASSERT_TRUE(made.ok()) << made.status().to_string();
      ex = std::move(made).value();
    }
    ASSERT_TRUE(ex->initialize());
    const auto prompt = make_tokens(50, m.spec.vocab_size, 7);
    Gen a = start(*ex, prompt);
    Gen b = start(*ex, {prompt.begin(), prompt.begin() + 4});
    ASSERT_TRUE(run(*ex, {{&a, prefill(a, 49)}, {&b, prefill(b, 4)}}));
    const OffGraphKVMetrics before = metrics_of(*ex);

    // a would end at 52 > 51: the whole batch (b's decode included) is refused.
    BatchInput over;
    Input tail = prefill(a, 1);
    tail.payload = std::make_shared<const std::vector<Token>>(51, Token{1});
    tail.offset = 49;
    tail.size = 3;
    over.inputs = {tail, decode(b)};
    BatchOutput out;
    EXPECT_FALSE(ex->execute(over, out));
    ASSERT_EQ(out.outputs.size(), 2u);
    EXPECT_FALSE(out.outputs[0].has_value());
    EXPECT_FALSE(out.outputs[1].has_value());
    expect_same(metrics_of(*ex), before, "after the refused batch");

    // Sessions are capped at 5; a clone at capacity retains nothing.
    std::vector<SessionId> extra;
    for (int i = 0; i < 3; ++i) extra.push_back(ex->open_session().value_or(-1));
    EXPECT_FALSE(ex->open_session().has_value());
    const OffGraphKVMetrics full = metrics_of(*ex);
    EXPECT_FALSE(ex->clone(a.sid, 10).has_value());
    expect_same(metrics_of(*ex), full, "after the refused clone");
    for (SessionId id : extra) ex->close_session(id);

    // Both sessions continue as if nothing had been asked.
    ASSERT_TRUE(run(*ex, {{&a, prefill(a, 1)}, {&b, decode(b)}}));
    EXPECT_EQ(a.generated.at(0), reference_next(m, prompt));
    std::vector<std::int64_t> b_history(prompt.begin(), prompt.begin() + 4);
    b_history.push_back(b.generated.at(0));
    EXPECT_EQ(b.generated.at(0), reference_next(m, {prompt.begin(), prompt.begin() + 4}));
    EXPECT_EQ(b.generated.at(1), reference_next(m, b_history));
    // a is now at 50 of 51: one more token fits, two do not.
    ASSERT_TRUE(run(*ex, {{&a, decode(a)}}));
    EXPECT_FALSE(run(*ex, {{&a, decode(a)}}));
  }
}

// The narrowest useful program: forward_1, forward_4 and a forward_others
// that wants at least 5 selector rows (get_min_prefill_chunk) — the CPU
// program with every other method hidden. The hand schedule of §6.2 (widths
// 20, 1, 4, 2, 4, 7, 3, then joint decodes) must match the reference greedy
// continuation, run every method, pad forward_4 and never give
// forward_others fewer than 5 rows.
TEST(CpuScenarioSparseTest, ProgramWithOnlyForward1And4AndOthers) {
  const TinyModel m = cpu::testing::make_tiny_model(model::Architecture::kLlama, 5);
  program::ProgramOptions o = options();
  o.static_widths = {1, 4};
  o.min_prefill_chunk = 5;
  o.device_sampling = false;
  auto recording = std::make_shared<RecordingProgram>(
      make_program(m, o), std::set<std::string>{std::string(program::kModuleMethod)});
  const std::vector<std::string> names = recording->method_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
            (std::set<std::string>{"forward_1", "forward_4", "forward_others"}));
  auto made = CudaExecutor::create(recording, 5, 0);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  CudaExecutor& ex = **made;
  ASSERT_TRUE(ex.initialize());
  EXPECT_EQ(ex.min_selected_rows(), 5);
  EXPECT_EQ(ex.preferred_batch_tokens(), 32u);

  const std::vector<std::vector<std::int64_t>> prompts = {
      {3}, {5, 9, 1}, {7, 2, 2, 8, 4, 6, 1}, make_tokens(20, m.spec.vocab_size, 9)};
  Gen p0 = start(ex, prompts[0]), p1 = start(ex, prompts[1]), p2 = start(ex, prompts[2]),
      p3 = start(ex, prompts[3]), p4 = start(ex, prompts[2]);
  ASSERT_TRUE(run(ex, {{&p3, prefill(p3, 20)}}));                                   // others
  ASSERT_TRUE(run(ex, {{&p0, prefill(p0, 1)}}));                                    // forward_1
  ASSERT_TRUE(run(ex, {{&p2, prefill(p2, 4)}}));                                    // forward_4
  ASSERT_TRUE(run(ex, {{&p1, prefill(p1, 2)}}));                                    // 4, padded
  ASSERT_TRUE(run(ex, {{&p1, prefill(p1, 1)}, {&p2, prefill(p2, 3)}}));             // forward_4
  ASSERT_TRUE(run(ex, {{&p4, prefill(p4, 7)}}));                                    // others
  ASSERT_TRUE(run(ex, {{&p0, decode(p0)}, {&p1, decode(p1)}, {&p3, decode(p3)}}));  // 4, padded
  ASSERT_TRUE(decode_all(ex, {&p0, &p1, &p2, &p3, &p4}, 4));
  for (const Gen* g : {&p0, &p1, &p2, &p3, &p4}) {
    std::vector<std::int64_t> history = prompt_of(*g);
    for (std::int64_t token : g->generated) {
      EXPECT_EQ(token, reference_next(m, history)) << "session " << g->sid;
      history.push_back(token);
    }
  }
  std::map<std::string, std::uint64_t> seen;
  for (const RecordingProgram::Call& c : recording->calls()) {
    ++seen[c.method];
    if (c.method == "forward_others") {
      EXPECT_GE(c.selector.size(), 5u);
      EXPECT_GE(c.width, 5);
    } else {
      EXPECT_EQ(static_cast<std::size_t>(c.width), c.selector.size()) << c.method;
    }
  }
  const std::vector<ForwardMethodCalls> calls = ex.method_calls();
  ASSERT_EQ(calls.size(), 3u);
  for (const ForwardMethodCalls& c : calls) {
    EXPECT_GE(c.calls, 1u) << c.name;
    EXPECT_EQ(c.calls, seen[c.name]) << c.name;
  }
}

}  // namespace
}  // namespace cellm::executor::testing
