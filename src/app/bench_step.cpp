#include "app/bench_step.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "core/env.h"
#include "executor/cuda_executor.h"
#include "model/loader.h"
#include "model/shapes.h"
#ifdef CELLM_HAVE_CUDA
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/cuda_program.h"
#include "backend/cuda/device_probe.h"
#endif

namespace cellm::app {

#ifndef CELLM_HAVE_CUDA

Status run_step_bench(const StepBenchOptions&, std::FILE*) {
  return not_supported(
      "cellm bench step measures the CUDA backend; this build has none "
      "(build the cuda-release preset on a machine with a GPU)");
}

#else

namespace {

using Clock = std::chrono::steady_clock;

struct Point {
  std::string kind;
  std::string sampling;  // decode: kGreedy or kSampled
  int batch = 0;
  int context = 0;
  double ms = 0;
  double tokens_per_s = 0;
  double floor_ms = 0;
  int steps = 0;  // decode: steps timed
  std::string skipped;
};

constexpr const char* kGreedy = "greedy";
constexpr const char* kSampled = "temperature 1, seeded";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Bytes one decode step must read: every weight the forward touches (the
// embedding table only for the gathered rows unless it doubles as the head).
double weight_bytes_read(const model::ModelSpec& s) {
  double params = static_cast<double>(s.parameter_count());
  if (!s.tie_word_embeddings) params -= static_cast<double>(s.vocab_size) * s.hidden_size;
  return 2.0 * params;
}

// Forward FLOPs of `tokens` new tokens on `context` earlier ones, one selected row.
double prefill_flops(const model::ModelSpec& s, double tokens) {
  const double h = s.hidden_size, q = static_cast<double>(s.num_heads) * s.head_dim;
  const double kv = static_cast<double>(s.num_kv_heads) * s.head_dim;
  const double per_layer = h * (q + 2 * kv) + q * h + 3 * h * s.intermediate_size;
  const double matmuls = 2.0 * tokens * per_layer * s.num_layers;
  const double attention = 2.0 * 2.0 * (tokens * tokens / 2.0) * q * s.num_layers;
  return matmuls + attention + 2.0 * h * s.vocab_size;
}

Result<std::unique_ptr<executor::CudaExecutor> > make_executor(std::shared_ptr<program::Program> p,
                                                               int sessions, int session_tokens) {
  CELLM_ASSIGN_OR_RETURN(auto ex,
                         executor::CudaExecutor::create(std::move(p), sessions, session_tokens));
  if (!ex->initialize()) return internal_error("the executor failed to initialize");
  return ex;
}

// One prefill: forward of the packed rows plus the device argmax.
Status timed_step(executor::CudaExecutor& ex, const executor::RawTargetStep& step,
                  std::vector<Token>* tokens) {
  bool sampled = false;
  const bool ok = ex.execute_raw(step, [&](const executor::RawTargetOutput& out) {
    auto t = ex.argmax_rows(out.logits, out.selected_indices.size());
    if (!t) return false;
    *tokens = std::move(*t);
    sampled = true;
    return true;
  });
  if (!ok || !sampled) return internal_error("a benchmark step failed");
  return Status::ok();
}

Status finished_well(const GenerationHandle& h, const char* what) {
  h.wait();
  if (h.finish_reason() != FinishReason::kNewTokenLimit) {
    return internal_error("bench: a {} generation ended with {}{}{}", what,
                          h.finish_reason() ? finish_reason_name(*h.finish_reason()) : "nothing",
                          h.error_message().empty() ? "" : ": ", h.error_message());
  }
  return Status::ok();
}

// What one served decode point measured.
struct Served {
  double ms = 0;
  int steps = 0;
};

// `batch` sessions through the runner: each prefills `context - 1` random
// tokens and draws one (greedy), then all of them generate `warmup + steps`
// more tokens from one token each, with `sampling` (seeded), no stop token.
// Every delivery is stamped on the engine thread. The timed span runs from
// the first step at which every session had delivered `warmup` tokens of the
// second generation (so all of them decode from there on) to the first step
// at which one of them finished; a step is the time between two deliveries
// of session 0 inside it: the whole engine loop, execute() included.
Result<Served> served_decode(Runner& runner, const model::ModelSpec& spec, int batch, int context,
                             const SamplingParams& sampling, const StepBenchOptions& o,
                             std::mt19937& rng) {
  std::vector<std::future<std::optional<Session> > > opening;
  for (int b = 0; b < batch; ++b) opening.push_back(runner.open_session_async());
  std::vector<Session> sessions;
  for (auto& f : opening) {
    std::optional<Session> s = f.get();
    if (!s) {
      return internal_error("bench: the runner refused session {} of {}", sessions.size(), batch);
    }
    sessions.push_back(std::move(*s));
  }
  const auto vocab = static_cast<unsigned>(spec.vocab_size);
  std::vector<GenerationHandle> handles;
  for (Session& s : sessions) {
    std::vector<Token> prompt(static_cast<std::size_t>(context - 1));
    for (Token& t : prompt) t = rng() % vocab;
    GenConfig config;
    config.max_new_tokens = 1;
    handles.push_back(s.generate_async(std::move(prompt), config, [](const GenerationUpdate&) {}));
  }
  for (const GenerationHandle& h : handles) CELLM_RETURN_IF_ERROR(finished_well(h, "prefill"));
  handles.clear();

  const int warmup = std::max(1, o.warmup_steps);  // past the step that takes the new token
  const int generated = warmup + o.steps + 2;
  std::vector<std::vector<Clock::time_point> > stamps(static_cast<std::size_t>(batch));
  for (auto& v : stamps) v.reserve(static_cast<std::size_t>(generated) + 1);
  for (int b = 0; b < batch; ++b) {
    GenConfig config;
    config.max_new_tokens = generated;
    config.sampling = sampling;
    config.seed = o.seed + static_cast<std::uint64_t>(b);
    std::vector<Clock::time_point>* mine = &stamps[static_cast<std::size_t>(b)];
    handles.push_back(sessions[static_cast<std::size_t>(b)].generate_async(
        std::vector<Token>{rng() % vocab}, config, [mine](const GenerationUpdate& u) {
          const auto now = Clock::now();
          for (std::size_t i = 0; i < u.tokens.size(); ++i) mine->push_back(now);
        }));
  }
  for (const GenerationHandle& h : handles) CELLM_RETURN_IF_ERROR(finished_well(h, "decode"));
  sessions.clear();  // closes them, freeing their cells for the next point

  Clock::time_point begin = Clock::time_point::min(), end = Clock::time_point::max();
  for (const auto& v : stamps) {
    if (static_cast<int>(v.size()) != generated) {
      return internal_error("bench: a session delivered {} tokens of {}", v.size(), generated);
    }
    begin = std::max(begin, v[static_cast<std::size_t>(warmup)]);
    end = std::min(end, v.back());
  }
  const auto& first = stamps[0];
  const auto from = std::lower_bound(first.begin(), first.end(), begin);
  auto to = std::upper_bound(first.begin(), first.end(), end);
  const int steps = from < to ? static_cast<int>(to - from) - 1 : 0;
  if (steps < std::max(1, o.steps / 2)) {
    return internal_error(
        "bench: only {} steps had all {} sessions decoding (of {} asked); the sessions did not "
        "decode together",
        steps, batch, o.steps);
  }
  --to;
  Served out;
  out.steps = steps;
  out.ms = std::chrono::duration<double, std::milli>(*to - *from).count() / steps;
  return out;
}

Result<std::vector<Point> > decode_points(const StepBenchOptions& o, const model::ModelSpec& spec,
                                          std::shared_ptr<program::Program> program,
                                          const cuda::DeviceCeilings& dev, std::FILE* out) {
  std::vector<Point> points;
  const std::int64_t cells = *program->constant(program::kMaxCellsConstant);
  const int max_context = *std::max_element(o.contexts.begin(), o.contexts.end());
  // Room for the context, the first generation's token and the second's.
  const int extra = std::max(1, o.warmup_steps) + o.steps + 4;
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed));
  SamplingParams sampled;
  sampled.temperature = 1.0f;
  const std::vector<std::pair<const char*, SamplingParams> > modes = {{kGreedy, {}},
                                                                      {kSampled, sampled}};
  for (int batch : o.batches) {
    const std::int64_t per_session =
        std::min<std::int64_t>({(cells - 1) / batch - 1,
                                static_cast<std::int64_t>(max_context) + extra, spec.max_context});
    std::unique_ptr<executor::CudaExecutor> ex;
    std::unique_ptr<Runner> runner;
    if (per_session > extra) {
      // Not initialized here: the runner's engine thread does it, as in serve.
      CELLM_ASSIGN_OR_RETURN(
          ex, executor::CudaExecutor::create(program, batch, static_cast<int>(per_session)));
      // As `cellm serve` builds it: every session may decode in one step,
      // prompts go in chunks beside them (long ones, as `bench serve`'s).
      const std::size_t chunk = std::min<std::size_t>(2048, ex->preferred_batch_tokens());
      const auto decodes = static_cast<std::size_t>(batch);
      auto scheduler = DecodeFirstScheduler::create(decodes + 2 * chunk, decodes, chunk);
      if (!scheduler) return internal_error("bench: no scheduler for batch {}", batch);
      runner = std::make_unique<Runner>(*ex, std::move(scheduler));
      runner->open_session_async().get();  // waits for initialize()
      if (runner->initialization_state() != InitializationState::kReady) {
        return internal_error("the executor failed to initialize (see the log)");
      }
    }
    for (int context : o.contexts) {
      for (const auto& [name, sampling] : modes) {
        Point p{"decode", name, batch, context};
        if (!runner || context + extra > per_session) {
          p.skipped = fmt::format("needs {} cells, the pool holds {}",
                                  static_cast<std::int64_t>(batch) * (context + extra), cells);
          points.push_back(p);
          continue;
        }
        CELLM_ASSIGN_OR_RETURN(Served served,
                               served_decode(*runner, spec, batch, context, sampling, o, rng));
        p.ms = served.ms;
        p.steps = served.steps;
        p.tokens_per_s = batch * 1000.0 / p.ms;
        // The KV the timed steps read, on average: the context, the warm-up
        // and half the timed steps.
        const double kv = static_cast<double>(cuda::CudaForward::kv_bytes_per_cell(spec)) * batch *
                          (context + 1 + std::max(1, o.warmup_steps) + served.steps / 2.0);
        p.floor_ms = (weight_bytes_read(spec) + kv) / dev.copy_bytes_per_s * 1e3;
        std::fprintf(out,
                     "decode batch %4d context %5d %-22s %8.3f ms/step  %9.0f tok/s  (%.0f%% of "
                     "roofline, %d steps)\n",
                     batch, context, name, p.ms, p.tokens_per_s, 100.0 * p.floor_ms / p.ms,
                     p.steps);
        std::fflush(out);
        points.push_back(p);
      }
    }
    if (runner) runner->shutdown();
  }
  return points;
}

Result<std::vector<Point> > prefill_points(const StepBenchOptions& o, const model::ModelSpec& spec,
                                           std::shared_ptr<program::Program> program,
                                           const cuda::DeviceCeilings& dev, std::FILE* out) {
  std::vector<Point> points;
  const int longest = *std::max_element(o.prompts.begin(), o.prompts.end());
  const int session_tokens = std::min(longest + 8, spec.max_context);
  CELLM_ASSIGN_OR_RETURN(auto ex, make_executor(program, 1, session_tokens));
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed) + 1);
  for (int prompt : o.prompts) {
    Point p{"prefill", "", 1, prompt};
    if (prompt > session_tokens) {
      p.skipped = fmt::format("longer than the context ({})", spec.max_context);
      points.push_back(p);
      continue;
    }
    std::vector<double> ms;
    for (int rep = 0; rep < 2 + o.prefill_reps; ++rep) {
      const cache::SeqId seq = *ex->cache_control().seq_new();
      executor::RawTargetStep step;
      for (int i = 0; i < prompt; ++i) {
        step.tokens.push_back(rng() % static_cast<unsigned>(spec.vocab_size));
        step.positions.push_back(i);
        step.seq_ids.push_back(seq);
      }
      step.logit_indices.push_back(prompt - 1);
      std::vector<Token> tokens;
      const auto t0 = Clock::now();
      CELLM_RETURN_IF_ERROR(timed_step(*ex, step, &tokens));
      const auto t1 = Clock::now();
      ex->cache_control().seq_rm(seq);
      if (rep >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    p.ms = median(ms);
    p.tokens_per_s = prompt * 1000.0 / p.ms;
    p.floor_ms = prefill_flops(spec, prompt) / dev.gemm_flops_per_s * 1e3;
    std::fprintf(out, "prefill %5d tokens: %9.3f ms  %10.0f tok/s  (%.0f%% of roofline)\n", prompt,
                 p.ms, p.tokens_per_s, 100.0 * p.floor_ms / p.ms);
    std::fflush(out);
    points.push_back(p);
  }
  return points;
}

}  // namespace

Status run_step_bench(const StepBenchOptions& o, std::FILE* out) {
  if (o.batches.empty() || o.contexts.empty() || o.steps <= 0 || o.warmup_steps < 0) {
    return invalid_argument("bench step needs at least one batch, one context and steps > 0");
  }
  for (int b : o.batches) {
    if (b < 1) return invalid_argument("--batch {}: every batch needs at least one session", b);
  }
  for (int c : o.contexts) {
    if (c < 2) return invalid_argument("--context {}: a decode context needs at least 2 tokens", c);
  }
  if (cuda::device_count() == 0) {
    return unavailable("no CUDA device is visible; bench step measures the GPU");
  }
  CELLM_ASSIGN_OR_RETURN(cuda::DeviceCeilings dev, cuda::measure_device_ceilings());
  std::fprintf(out, "%s: copy %.2f TB/s (read + write), bf16 GEMM %.0f TFLOP/s\n", dev.name.c_str(),
               dev.copy_bytes_per_s / 1e12, dev.gemm_flops_per_s / 1e12);
  const int longest_prompt =
      o.prompts.empty() ? 0 : *std::max_element(o.prompts.begin(), o.prompts.end());
  program::ProgramOptions popts;
  popts.max_step = std::max(2048, longest_prompt);
  model::ModelSpec spec;
  std::shared_ptr<program::Program> program;
  if (std::filesystem::exists(o.model)) {
    CELLM_ASSIGN_OR_RETURN(model::LoadedModel m, model::load_model(o.model));
    spec = m.spec;
    CELLM_ASSIGN_OR_RETURN(program, cuda::load_program(m.spec, m.weights, popts));
  } else {
    CELLM_ASSIGN_OR_RETURN(spec, model::named_shape(o.model));
    CELLM_ASSIGN_OR_RETURN(program, cuda::load_random_program(spec, o.seed, popts));
  }
  CELLM_ASSIGN_OR_RETURN(auto decode, decode_points(o, spec, program, dev, out));
  std::vector<Point> prefill;
  if (!o.prompts.empty()) {
    CELLM_ASSIGN_OR_RETURN(prefill, prefill_points(o, spec, program, dev, out));
  }
  std::vector<Point> all = decode;
  all.insert(all.end(), prefill.begin(), prefill.end());

  const std::string commit = env_string("CELLM_COMMIT").value_or("unknown");
  const cuda::CudaProgramKnobs* knobs = cuda::cuda_program_knobs(*program);
  const std::string kernels = knobs ? cuda::describe(knobs->kernels) : std::string("-");
  std::fprintf(out, "kernels: %s\n", kernels.c_str());
  if (!o.json_path.empty()) {
    std::ofstream json(o.json_path, std::ios::app);
    for (const Point& p : all) {
      nlohmann::json j{{"bench", "step"},
                       {"kind", p.kind},
                       {"path", p.kind == "decode" ? "runner" : "execute_raw"},
                       {"gpu", dev.name},
                       {"commit", commit},
                       {"kernels", kernels},
                       {"model", o.model},
                       {"batch", p.batch},
                       {p.kind == "decode" ? "context" : "prompt", p.context},
                       {"copy_bytes_per_s", dev.copy_bytes_per_s},
                       {"gemm_flops_per_s", dev.gemm_flops_per_s}};
      if (p.kind == "decode") j["sampling"] = p.sampling;
      if (!p.skipped.empty()) {
        j["skipped"] = p.skipped;
      } else {
        j[p.kind == "decode" ? "ms_per_step" : "ms"] = p.ms;
        if (p.kind == "decode") j["steps"] = p.steps;
        j["tokens_per_s"] = p.tokens_per_s;
        j["roofline_ms"] = p.floor_ms;
        j["roofline_fraction"] = p.floor_ms / p.ms;
      }
      json << j.dump() << "\n";
    }
  }
  std::fprintf(out,
               "\n| %s | kind | sampling | batch | ctx/prompt | ms | tok/s | roofline ms | of "
               "roofline |\n",
               o.model.c_str());
  std::fprintf(out, "|---|---|---|---|---|---|---|---|---|\n");
  for (const Point& p : all) {
    if (!p.skipped.empty()) {
      std::fprintf(out, "| | %s | %s | %d | %d | skipped: %s | | | |\n", p.kind.c_str(),
                   p.sampling.c_str(), p.batch, p.context, p.skipped.c_str());
    } else {
      std::fprintf(out, "| | %s | %s | %d | %d | %.3f | %.0f | %.3f | %.0f%% |\n", p.kind.c_str(),
                   p.sampling.c_str(), p.batch, p.context, p.ms, p.tokens_per_s, p.floor_ms,
                   100.0 * p.floor_ms / p.ms);
    }
  }
  return Status::ok();
}

#endif

}  // namespace cellm::app
