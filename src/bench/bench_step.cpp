#include "bench/bench_step.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

#include <nlohmann/json.hpp>

#include "bench/bench_verify.h"
#include "cellm/decode_first_scheduler.h"
#include "cellm/runner.h"
#include "core/env.h"
#include "executor/cuda_executor.h"
#include "executor/draft_proposer.h"
#include "model/loader.h"
#include "model/shapes.h"
#ifdef CELLM_HAVE_CUDA
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/cuda_program.h"
#include "backend/cuda/device_probe.h"
#endif

namespace cellm::bench {

namespace {

using Clock = std::chrono::steady_clock;

Status finished_well(const GenerationHandle& h, const char* what) {
  h.wait();
  if (h.finish_reason() != FinishReason::kNewTokenLimit) {
    return internal_error("bench: a {} generation ended with {}{}{}", what,
                          h.finish_reason() ? finish_reason_name(*h.finish_reason()) : "nothing",
                          h.error_message().empty() ? "" : ": ", h.error_message());
  }
  return Status::ok();
}

}  // namespace

Result<ServedDecodeBench> ServedDecodeBench::open(Runner& runner, int batch, std::int64_t vocab,
                                                  std::uint64_t seed, bool speculative) {
  if (batch < 1 || vocab < 1) {
    return invalid_argument("served decode: needs a batch and a vocabulary, got {} and {}", batch,
                            vocab);
  }
  ServedDecodeBench bench(runner, vocab, seed, speculative);
  std::vector<std::future<std::optional<Session> > > opening;
  for (int b = 0; b < batch; ++b) opening.push_back(runner.open_session_async());
  for (auto& f : opening) {
    std::optional<Session> s = f.get();
    if (!s) {
      return internal_error("bench: the runner refused session {} of {}",
                            bench.sessions_.size() + 1, batch);
    }
    bench.sessions_.push_back(std::move(*s));
  }
  return bench;
}

Token ServedDecodeBench::draw() {
  // splitmix64 of (seed, index): the same ids for the same seed.
  std::uint64_t z = seed_ + 0x9e3779b97f4a7c15ULL * ++draws_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<Token>((z ^ (z >> 31)) % static_cast<std::uint64_t>(vocab_));
}

// A generation from `delta` tokens commits the pending token and the delta
// and leaves the one it draws pending: a session holds delta + 1 more.
Status ServedDecodeBench::prefill_to(int context) {
  if (context <= held_) return Status::ok();
  const int delta = std::max(1, context - held_ - 1);
  std::vector<GenerationHandle> handles;
  for (Session& s : sessions_) {
    std::vector<Token> prompt(static_cast<std::size_t>(delta));
    for (Token& t : prompt) t = draw();
    GenConfig config;
    config.max_new_tokens = 1;
    handles.push_back(s.generate_async(std::move(prompt), config, [](const GenerationUpdate&) {}));
  }
  for (const GenerationHandle& h : handles) CELLM_RETURN_IF_ERROR(finished_well(h, "prefill"));
  held_ += delta + 1;
  return Status::ok();
}

// Two generations a session: one token in and one out, whose last callback
// (on the engine thread) starts every session's timed generation, so that
// they all enter the same step; then that one. Its deliveries are counted
// there, and session 0's stamped with the time and the engine's step
// number; each timed step (session 0's deliveries `warmup` to the last) must
// hold one delivery of every session.
Result<ServedDecode> ServedDecodeBench::time(const SamplingParams& sampling, int warmup_steps,
                                             int steps) {
  if (steps < 1 || warmup_steps < 0) {
    return invalid_argument("served decode: needs steps > 0 and a warm-up >= 0, got {} and {}",
                            steps, warmup_steps);
  }
  const std::size_t rows = sessions_.size();
  const int batch = static_cast<int>(rows);
  const int warmup = std::max(1, warmup_steps);  // past the step that takes the new token
  const int generated = warmup + steps + 1;
  std::vector<Token> first_in(rows), second_in(rows);
  for (std::size_t b = 0; b < rows; ++b) {
    first_in[b] = draw();
    second_in[b] = draw();
  }
  struct Delivery {
    Clock::time_point at;
    std::int64_t step = 0;   // the engine's steps before this one
    std::int64_t index = 0;  // deliveries of every session so far
  };
  // Written on the engine thread only; read here once the generations ended.
  std::vector<Delivery> first;
  first.reserve(static_cast<std::size_t>(generated));
  std::vector<int> counts(rows, 0);
  std::int64_t delivered = 0;
  std::vector<GenerationHandle> timed(rows);
  Runner& runner = *runner_;
  const auto start_timed = [&] {
    for (std::size_t b = 0; b < rows; ++b) {
      GenConfig config;
      config.max_new_tokens = generated;
      config.sampling = sampling;
      config.seed = seed_ + draws_ + b;
      timed[b] = sessions_[b].generate_async(
          std::vector<Token>{second_in[b]}, config, [&, b](const GenerationUpdate& u) {
            for (std::size_t i = 0; i < u.tokens.size(); ++i) {
              ++delivered;
              ++counts[b];
              if (b == 0) first.push_back({Clock::now(), runner.metrics().steps, delivered});
            }
          });
    }
  };
  std::atomic<std::size_t> ended{0};
  std::mutex failure_mu;
  std::string failure;  // the first one-token generation that did not end at its token
  // Shared with the callbacks: the last one may still be inside set_value()
  // when the waiter below goes on.
  const auto started = std::make_shared<std::promise<void> >();
  for (std::size_t b = 0; b < rows; ++b) {
    GenConfig config;
    config.max_new_tokens = 1;
    sessions_[b].generate_async(
        std::vector<Token>{first_in[b]}, config, [&, started](const GenerationUpdate& u) {
          if (!u.finish_reason) return;
          if (*u.finish_reason != FinishReason::kNewTokenLimit) {
            std::lock_guard lock(failure_mu);
            if (failure.empty()) {
              failure = fmt::format("a one-token generation ended with {}: {}",
                                    finish_reason_name(*u.finish_reason), u.error_message);
            }
          }
          if (ended.fetch_add(1) + 1 == rows) {
            bool failed = false;
            {
              std::lock_guard lock(failure_mu);
              failed = !failure.empty();
            }
            if (!failed) start_timed();
            started->set_value();  // last: the caller may go on once it is set
          }
        });
  }
  started->get_future().wait();
  {
    std::lock_guard lock(failure_mu);
    if (!failure.empty()) return internal_error("bench: {}", failure);
  }
  held_ += 2;
  const int before = held_;
  // Every generation ends before any check: their callbacks write the
  // locals above.
  for (const GenerationHandle& h : timed) h.wait();
  for (const GenerationHandle& h : timed) CELLM_RETURN_IF_ERROR(finished_well(h, "decode"));
  held_ += 1 + generated;

  for (int c : counts) {
    if (c != generated) {
      return internal_error("bench: a session delivered {} tokens of {}", c, generated);
    }
  }
  const Delivery& from = first[static_cast<std::size_t>(warmup)];
  const Delivery& to = first.back();
  const double ms = std::chrono::duration<double, std::milli>(to.at - from.at).count();
  ServedDecode out;
  // The step that delivers token i attends before + i + 1 keys.
  out.mean_keys = before + 1 + (warmup + 1 + generated - 1) / 2.0;
  if (speculative_) {
    // Steps deliver one token or more; every session must still get one in
    // each step (none waits while another speculates).
    const std::int64_t engine_steps = to.step - from.step;
    if (engine_steps < 1) return internal_error("bench: the timed tokens took no engine step");
    out.steps = static_cast<int>(engine_steps);
    out.tokens_per_step = static_cast<double>(steps) / static_cast<double>(engine_steps);
    out.ms_per_step = ms / steps;
    return out;
  }
  for (int i = warmup; i + 1 < generated; ++i) {
    const Delivery& a = first[static_cast<std::size_t>(i)];
    const Delivery& b = first[static_cast<std::size_t>(i + 1)];
    if (b.step != a.step + 1 || b.index - a.index != batch) {
      return internal_error(
          "bench: the {} sessions did not decode together: session 0's deliveries {} and {} are "
          "{} steps and {} deliveries apart (the runner must decode every session in every step)",
          batch, i, i + 1, b.step - a.step, b.index - a.index);
    }
  }
  out.steps = steps;
  out.ms_per_step = ms / steps;
  return out;
}

#ifndef CELLM_HAVE_CUDA

Status run_step_bench(const StepBenchOptions& o, std::FILE* out) {
  if (!o.verify_drafts.empty() || !o.speculate.empty()) {
    return not_supported(
        "--verify-drafts and --speculate time the CUDA backend; this build has none");
  }
  if (o.backend == "cpu" || o.backend == "auto") return run_cpu_step_bench(o, out);
  return not_supported(
      "cellm bench step measures the CUDA backend; this build has none "
      "(build the cuda-release preset on a machine with a GPU)");
}

#else

namespace {

struct Point {
  std::string kind;
  std::string sampling;  // decode: kGreedy or kSampled
  int batch = 0;
  int context = 0;
  double ms = 0;
  double tokens_per_s = 0;
  double floor_ms = 0;
  int steps = 0;               // decode: steps timed
  double tokens_per_step = 1;  // decode: a session's tokens per step (speculation)
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

Result<std::vector<Point> > decode_points(const StepBenchOptions& o, const model::ModelSpec& spec,
                                          std::shared_ptr<program::Program> program,
                                          const cuda::DeviceCeilings& dev, std::FILE* out) {
  std::vector<Point> points;
  const std::int64_t cells = *program->constant(program::kMaxCellsConstant);
  const cuda::CudaKvPool pool = cuda::cuda_kv_pool(*program);
  std::fprintf(out, "KV pool: %lld cells of %s (%.0f MiB)\n", static_cast<long long>(cells),
               pool.dtype == cuda::KvDtype::kFp8 ? "fp8 e4m3" : "bf16",
               static_cast<double>(pool.bytes) / (1 << 20));
  SamplingParams sampled;
  sampled.temperature = 1.0f;
  std::vector<std::pair<const char*, SamplingParams> > modes;
  if (o.sampling != "sampled") modes.emplace_back(kGreedy, SamplingParams{});
  if (o.sampling != "greedy") modes.emplace_back(kSampled, sampled);
  // The sessions grow from one context to the next (each prefilled once for
  // every mode): contexts in ascending order, each point adding this many.
  const int per_point =
      static_cast<int>(modes.size()) * ServedDecodeBench::tokens_per_time(o.warmup_steps, o.steps);
  std::vector<int> contexts = o.contexts;
  std::sort(contexts.begin(), contexts.end());
  const int max_context = contexts.back();
  for (int batch : o.batches) {
    const std::int64_t per_session = std::min<std::int64_t>(
        {(cells - 1) / batch - 1, static_cast<std::int64_t>(max_context) + per_point + 2,
         spec.max_context});
    std::unique_ptr<executor::CudaExecutor> ex;
    std::unique_ptr<Runner> runner;
    std::optional<ServedDecodeBench> bench;
    if (per_session > per_point + 2) {
      // Not initialized here: the runner's engine thread does it, as in serve.
      executor::SpeculationOptions speculation;
      if (!o.speculate.empty()) {
        CELLM_ASSIGN_OR_RETURN(speculation.proposer, executor::make_proposer(o.speculate));
      }
      CELLM_ASSIGN_OR_RETURN(
          ex, executor::CudaExecutor::create(program, batch, static_cast<int>(per_session),
                                             std::move(speculation)));
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
      CELLM_ASSIGN_OR_RETURN(bench,
                             ServedDecodeBench::open(*runner, batch, spec.vocab_size,
                                                     o.seed + static_cast<std::uint64_t>(batch),
                                                     !o.speculate.empty()));
    }
    for (int context : contexts) {
      const int start = bench ? std::max(context, bench->context()) : context;
      for (const auto& [name, sampling] : modes) {
        Point p{"decode", name, batch, context};
        if (!bench || start + per_point + 2 > per_session) {
          p.skipped =
              fmt::format("needs {} cells, the pool holds {}",
                          static_cast<std::int64_t>(batch) * (context + per_point + 2), cells);
          points.push_back(p);
          continue;
        }
        CELLM_RETURN_IF_ERROR(bench->prefill_to(context));
        CELLM_ASSIGN_OR_RETURN(ServedDecode served, bench->time(sampling, o.warmup_steps, o.steps));
        p.ms = served.ms_per_step;
        p.steps = served.steps;
        p.tokens_per_step = served.tokens_per_step;
        p.tokens_per_s = batch * 1000.0 / p.ms;
        // The KV the timed steps read, on average, and every weight.
        const double kv = static_cast<double>(cuda::CudaForward::kv_bytes_per_cell(
                              spec, cuda::cuda_kv_pool(*program).dtype)) *
                          batch * served.mean_keys;
        // Weights kept in GGUF blocks: the bytes resident, not bf16's.
        const double weights = cuda::cuda_weight_blocks(*program).empty()
                                   ? weight_bytes_read(spec)
                                   : static_cast<double>(cuda::cuda_weight_bytes_read(*program));
        p.floor_ms = (weights + kv) / dev.copy_bytes_per_s * 1e3;
        std::fprintf(out,
                     "decode batch %4d context %5d %-22s %8.3f ms/%s  %9.0f tok/s  (%.0f%% of "
                     "roofline, %d steps at %.0f keys, %.2f tokens a step)\n",
                     batch, context, name, p.ms, o.speculate.empty() ? "step" : "token",
                     p.tokens_per_s, 100.0 * p.floor_ms / p.ms, p.steps, served.mean_keys,
                     served.tokens_per_step);
        std::fflush(out);
        points.push_back(p);
      }
    }
    bench.reset();  // closes the sessions before the runner stops
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
  if (o.backend == "cpu" || (o.backend == "auto" && cuda::device_count() == 0)) {
    if (!o.verify_drafts.empty() || !o.speculate.empty()) {
      return not_supported(
          "--verify-drafts and --speculate time the CUDA backend (no GPU is in use here)");
    }
    return run_cpu_step_bench(o, out);
  }
  if (o.batches.empty() || o.contexts.empty() || o.steps <= 0 || o.warmup_steps < 0) {
    return invalid_argument("bench step needs at least one batch, one context and steps > 0");
  }
  for (int b : o.batches) {
    if (b < 1) return invalid_argument("--batch {}: every batch needs at least one session", b);
  }
  for (int c : o.contexts) {
    if (c < 2) return invalid_argument("--context {}: a decode context needs at least 2 tokens", c);
  }
  if (o.sampling != "greedy" && o.sampling != "sampled" && o.sampling != "both") {
    return invalid_argument("--sampling {}: give greedy, sampled or both", o.sampling);
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
  popts.kv_dtype = o.kv_dtype;
  model::ModelSpec spec;
  std::shared_ptr<program::Program> program;
  if (std::filesystem::exists(o.model)) {
    model::LoadOptions load;
    load.dequant_dtype = DType::kBF16;  // what the upload converts to (app::dequant_dtype_for)
    load.quantize = o.quantize;
    load.gpu_keeps_blocks = o.keep_quantized;
    CELLM_ASSIGN_OR_RETURN(model::LoadedModel m, model::load_model(o.model, load));
    spec = m.spec;
    popts.keep_quantized = o.keep_quantized || o.quantize == model::Quantize::kFp8;
    CELLM_ASSIGN_OR_RETURN(program, cuda::load_program(m.spec, m.weights, popts, m.gguf.get()));
  } else {
    CELLM_ASSIGN_OR_RETURN(spec, model::named_shape(o.model));
    // `--quantize fp8`: random FP8 projections, as the flag stores a checkpoint's.
    CELLM_ASSIGN_OR_RETURN(program, cuda::load_random_program(spec, o.seed, popts,
                                                              o.quantize == model::Quantize::kFp8));
  }
  CELLM_ASSIGN_OR_RETURN(auto decode, decode_points(o, spec, program, dev, out));
  std::vector<Point> prefill;
  if (!o.prompts.empty()) {
    CELLM_ASSIGN_OR_RETURN(prefill, prefill_points(o, spec, program, dev, out));
  }
  std::vector<Point> all = decode;
  all.insert(all.end(), prefill.begin(), prefill.end());
  const cuda::CudaProgramKnobs* knobs = cuda::cuda_program_knobs(*program);
  const std::string kernels = knobs ? cuda::describe(knobs->kernels) : std::string("-");
  if (!o.verify_drafts.empty()) {
    CELLM_RETURN_IF_ERROR(run_verify_points(o, spec, program, dev.name, kernels, out));
  }

  const std::string commit = env_string("CELLM_COMMIT").value_or("unknown");
  std::fprintf(out, "kernels: %s\n", kernels.c_str());
  if (!o.json_path.empty()) {
    std::ofstream json(o.json_path, std::ios::app);
    // "bf16", or the projections kept in GGUF blocks ("Q4_K x144, Q6_K x33").
    const std::string blocks = cuda::cuda_weight_blocks(*program);
    const std::string weights_form = blocks.empty() ? "bf16" : blocks;
    for (const Point& p : all) {
      nlohmann::json j{{"bench", "step"},
                       {"kind", p.kind},
                       {"path", p.kind == "decode" ? "runner" : "execute_raw"},
                       {"gpu", dev.name},
                       {"commit", commit},
                       {"kernels", kernels},
                       {"model", o.model},
                       {"weights", weights_form},
                       {"kv_dtype", dtype_name(o.kv_dtype)},
                       {"batch", p.batch},
                       {p.kind == "decode" ? "context" : "prompt", p.context},
                       {"copy_bytes_per_s", dev.copy_bytes_per_s},
                       {"gemm_flops_per_s", dev.gemm_flops_per_s}};
      if (p.kind == "decode") {
        j["sampling"] = p.sampling;
        j["speculate"] = o.speculate.empty() ? "off" : o.speculate;
      }
      if (!p.skipped.empty()) {
        j["skipped"] = p.skipped;
      } else {
        j[p.kind != "decode" ? "ms" : o.speculate.empty() ? "ms_per_step" : "ms_per_token"] = p.ms;
        if (p.kind == "decode") {
          j["steps"] = p.steps;
          j["tokens_per_step"] = p.tokens_per_step;
        }
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

}  // namespace cellm::bench
