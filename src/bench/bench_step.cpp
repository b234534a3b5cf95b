#include "bench/bench_step.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "core/env.h"
#include "executor/cuda_executor.h"
#include "model/loader.h"
#include "model/shapes.h"
#ifdef CELLM_HAVE_CUDA
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/cuda_program.h"
#include "backend/cuda/device_probe.h"
#endif

namespace cellm::bench {

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
  int batch = 0;
  int context = 0;
  double ms = 0;
  double tokens_per_s = 0;
  // Decode: the same steps one at a time, the host waiting for each step's
  // ids before launching the next (execute_raw and argmax_rows).
  double ms_sync = 0;
  double floor_ms = 0;
  std::string skipped;
};

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

// One engine step: forward of the packed rows plus the device argmax.
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
  const int max_context = *std::max_element(o.contexts.begin(), o.contexts.end());
  // Warm-up, then the same o.steps from the same position: one at a time,
  // then kChains times chained (the sequences rewound between).
  constexpr int kChains = 3;
  const int extra = o.warmup_steps + o.steps + 1;
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed));
  for (int batch : o.batches) {
    const std::int64_t per_session =
        std::min<std::int64_t>({(cells - 1) / batch - 1,
                                static_cast<std::int64_t>(max_context) + extra, spec.max_context});
    std::unique_ptr<executor::CudaExecutor> ex;
    if (per_session > extra) {
      CELLM_ASSIGN_OR_RETURN(ex, make_executor(program, batch, static_cast<int>(per_session)));
    }
    for (int context : o.contexts) {
      Point p{"decode", batch, context};
      if (!ex || context + extra > per_session) {
        p.skipped = fmt::format("needs {} cells, the pool holds {}",
                                static_cast<std::int64_t>(batch) * (context + extra), cells);
        points.push_back(p);
        continue;
      }
      cache::CellCache& cache = ex->cache_control();
      std::vector<cache::SeqId> seqs;
      for (int b = 0; b < batch; ++b) seqs.push_back(*cache.seq_new());
      for (cache::SeqId s : seqs) {  // the context, placed without computing it
        std::vector<cache::SeqId> ids(static_cast<std::size_t>(context), s);
        std::vector<std::int32_t> pos(static_cast<std::size_t>(context));
        std::iota(pos.begin(), pos.end(), 0);
        CELLM_RETURN_IF_ERROR(cache.place_step(ids, pos));
      }
      std::vector<Token> tokens(static_cast<std::size_t>(batch));
      for (Token& t : tokens) t = rng() % static_cast<unsigned>(spec.vocab_size);
      if (o.warmup_steps > 0) {
        CELLM_ASSIGN_OR_RETURN(auto warm, ex->decode_greedy(seqs, tokens, o.warmup_steps));
        tokens = warm.back();
      }
      const std::vector<Token> first = tokens;
      const auto restart = [&]() -> Status {
        for (cache::SeqId s : seqs) {
          if (!cache.rewind(s, context + o.warmup_steps)) {
            return internal_error("bench: sequence {} did not rewind", s);
          }
        }
        tokens = first;
        return Status::ok();
      };
      std::vector<double> ms;
      for (int i = 0; i < o.steps; ++i) {
        executor::RawTargetStep step;
        for (int b = 0; b < batch; ++b) {
          const cache::SeqId seq = seqs[static_cast<std::size_t>(b)];
          step.tokens.push_back(static_cast<std::int64_t>(tokens[static_cast<std::size_t>(b)]));
          step.positions.push_back(cache.pos(seq));
          step.seq_ids.push_back(seq);
          step.logit_indices.push_back(b);
        }
        const auto t0 = Clock::now();
        CELLM_RETURN_IF_ERROR(timed_step(*ex, step, &tokens));
        const auto t1 = Clock::now();
        ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      p.ms_sync = median(ms);
      CELLM_RETURN_IF_ERROR(restart());
      // The headline: steps chained on the device (decode_greedy), as a
      // generation loop runs them; the median chain's mean step.
      std::vector<double> chains;
      for (int c = 0; c < kChains; ++c) {
        const auto t0 = Clock::now();
        CELLM_ASSIGN_OR_RETURN(auto drawn, ex->decode_greedy(seqs, tokens, o.steps));
        const auto t1 = Clock::now();
        CELLM_RETURN_IF_ERROR(restart());
        chains.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count() / o.steps);
      }
      for (cache::SeqId s : seqs) cache.seq_rm(s);
      p.ms = median(chains);
      p.tokens_per_s = batch * 1000.0 / p.ms;
      const double kv = static_cast<double>(cuda::CudaForward::kv_bytes_per_cell(spec)) * batch *
                        (context + o.warmup_steps + o.steps / 2.0);
      p.floor_ms = (weight_bytes_read(spec) + kv) / dev.copy_bytes_per_s * 1e3;
      std::fprintf(out,
                   "decode batch %4d context %5d: %8.3f ms/step  %9.0f tok/s  (%.0f%% of "
                   "roofline); one step at a time %8.3f ms/step\n",
                   batch, context, p.ms, p.tokens_per_s, 100.0 * p.floor_ms / p.ms, p.ms_sync);
      std::fflush(out);
      points.push_back(p);
    }
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
    Point p{"prefill", 1, prompt};
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
                       {"gpu", dev.name},
                       {"commit", commit},
                       {"kernels", kernels},
                       {"model", o.model},
                       {"batch", p.batch},
                       {p.kind == "decode" ? "context" : "prompt", p.context},
                       {"copy_bytes_per_s", dev.copy_bytes_per_s},
                       {"gemm_flops_per_s", dev.gemm_flops_per_s}};
      if (!p.skipped.empty()) {
        j["skipped"] = p.skipped;
      } else {
        j[p.kind == "decode" ? "ms_per_step" : "ms"] = p.ms;
        if (p.kind == "decode") j["ms_per_step_sync"] = p.ms_sync;
        j["tokens_per_s"] = p.tokens_per_s;
        j["roofline_ms"] = p.floor_ms;
        j["roofline_fraction"] = p.floor_ms / p.ms;
      }
      json << j.dump() << "\n";
    }
  }
  std::fprintf(out,
               "\n| %s | kind | batch | ctx/prompt | ms | tok/s | roofline ms | of roofline |\n",
               o.model.c_str());
  std::fprintf(out, "|---|---|---|---|---|---|---|---|\n");
  for (const Point& p : all) {
    if (!p.skipped.empty()) {
      std::fprintf(out, "| | %s | %d | %d | skipped: %s | | | |\n", p.kind.c_str(), p.batch,
                   p.context, p.skipped.c_str());
    } else {
      std::fprintf(out, "| | %s | %d | %d | %.3f | %.0f | %.3f | %.0f%% |\n", p.kind.c_str(),
                   p.batch, p.context, p.ms, p.tokens_per_s, p.floor_ms, 100.0 * p.floor_ms / p.ms);
    }
  }
  return Status::ok();
}

#endif

}  // namespace cellm::bench
