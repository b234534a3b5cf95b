// `cellm bench step --backend cpu`: decode and prefill tokens/s of the CPU
// program (the fast one unless --cpu-program reference) on a model file, with
// the machine's copy bandwidth measured in the same run and each decode
// figure given as the fraction of it that the step's bytes (weights as
// stored + the K/V it attends) would take. Steps go through the executor's
// execute_raw and its argmax, as llama-bench's tg/pp tests time the model
// alone: decode points generate `steps` tokens a session after a prompt of
// `context` tokens, prefill points time one forward of `prompt` tokens.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/executor_factory.h"
#include "backend/cpu/fast_forward.h"
#include "backend/cpu/quant_dot.h"
#include "bench/bench_step.h"
#include "core/env.h"
#include "model/loader.h"

namespace cellm::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Best-of-5 memcpy rate of 2 x 256 MiB across `threads` threads, counting
// the bytes read and written (the same convention as the GPU copy test).
double copy_bytes_per_s(int threads) {
  const std::size_t n = std::size_t{256} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto k = static_cast<std::size_t>(std::max(1, threads));
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (std::size_t i = 1; i < k; ++i) {
      pool.emplace_back([&, i] {
        std::memcpy(b.data() + n * i / k, a.data() + n * i / k, n * (i + 1) / k - n * i / k);
      });
    }
    std::memcpy(b.data(), a.data(), n / k);
    for (auto& t : pool) t.join();
    const double s = ms_since(t0) / 1e3;
    best = std::max(best, 2.0 * static_cast<double>(n) / s);
    std::swap(a, b);
  }
  return best;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown cpu";
}

// Bytes a decode step reads for weights: every tensor as stored, except an
// untied embedding table (only its gathered rows are read).
double weight_bytes(const model::LoadedModel& m, bool fast) {
  if (m.gguf != nullptr && fast) {
    double bytes = 0;
    for (const auto& t : m.gguf->tensors()) {
      if (t.name == "token_embd.weight" && !m.spec.tie_word_embeddings) continue;
      bytes += static_cast<double>(t.nbytes);
    }
    return bytes;
  }
  double params = static_cast<double>(m.spec.parameter_count());
  if (!m.spec.tie_word_embeddings)
    params -= static_cast<double>(m.spec.vocab_size) * m.spec.hidden_size;
  return 4.0 * params;  // the float32 copies the BLAS path reads
}

struct CpuPoint {
  std::string kind;
  int batch = 1;
  int context = 0;
  double ms = 0;
  double tokens_per_s = 0;
  double bandwidth_fraction = 0;  // decode only
  int steps = 0;
};

Status step(executor::CudaExecutor& ex, const executor::RawTargetStep& s, std::vector<Token>* out) {
  bool sampled = false;
  const bool ok = ex.execute_raw(s, [&](const executor::RawTargetOutput& o) {
    auto t = ex.argmax_rows(o.logits, o.selected_indices.size());
    if (!t) return false;
    *out = std::move(*t);
    sampled = true;
    return true;
  });
  if (!ok || !sampled) return internal_error("bench: a CPU step failed");
  return Status::ok();
}

}  // namespace

Status run_cpu_step_bench(const StepBenchOptions& given, std::FILE* out) {
  StepBenchOptions o = given;
  if (o.kv_dtype == DType::kF8E4M3) {
    return not_supported("--kv-dtype fp8: the CPU program keeps K/V in f32 (FP8 K/V are CUDA's)");
  }
  if (!o.batches_given) o.batches = {1};
  if (!o.contexts_given) o.contexts = {1};
  if (!o.prompts_given) o.prompts = {128};
  if (!std::filesystem::exists(o.model)) {
    return invalid_argument(
        "--model {}: on the CPU, bench step measures a model file or folder (random-weight "
        "shapes are GPU-only)",
        o.model);
  }
  if (o.batches.empty() || o.contexts.empty() || o.steps <= 0 || o.warmup_steps < 0) {
    return invalid_argument("bench step needs at least one batch, one context and steps > 0");
  }
  model::LoadOptions load;
  load.quantize = o.quantize;
  CELLM_ASSIGN_OR_RETURN(model::LoadedModel m, model::load_model(o.model, load));
  const model::ModelSpec spec = m.spec;
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  const int max_context = *std::max_element(o.contexts.begin(), o.contexts.end());
  const int longest_prompt =
      o.prompts.empty() ? 0 : *std::max_element(o.prompts.begin(), o.prompts.end());
  const int per_session = std::max(max_context + o.warmup_steps + o.steps + 8, longest_prompt + 8);
  if (per_session > spec.max_context) {
    return invalid_argument("bench: {} tokens a session exceed the model's context {}", per_session,
                            spec.max_context);
  }
  app::CudaExecutorConfig cfg;
  cfg.model_path = o.model;
  cfg.backend = "cpu";
  cfg.cpu_program = o.cpu_program;
  cfg.cpu_threads = o.threads;
  cfg.max_sessions = max_batch;
  cfg.max_session_tokens = per_session;
  cfg.kv_dtype = DType::kF32;
  cfg.program.max_step = std::max(2048, longest_prompt);
  const bool fast = o.cpu_program != "reference";
  const double wbytes = weight_bytes(m, fast);
  CELLM_ASSIGN_OR_RETURN(app::LoadedExecutor le, app::create_executor(std::move(m), cfg));
  executor::CudaExecutor& ex = *le.executor;
  if (!ex.initialize()) return internal_error("the CPU executor failed to initialize");
  const int threads = o.threads > 0 ? o.threads : cpu::available_cores();
  const double copy = copy_bytes_per_s(threads);
  const std::string cpu = cpu_model_name();
  const std::string program = fast ? "fast" : "reference";
  const std::string isa(fast ? cpu::isa_name(cpu::active_isa()) : "blas");
  std::fprintf(out, "%s: %d threads, copy %.1f GB/s (read + write); CPU program %s (%s)\n",
               cpu.c_str(), threads, copy / 1e9, program.c_str(), isa.c_str());
  const double cell_bytes = static_cast<double>(app::cpu_cell_bytes(spec));

  std::vector<CpuPoint> points;
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed));
  auto random_token = [&] {
    return static_cast<std::int64_t>(rng() % static_cast<unsigned>(spec.vocab_size));
  };
  for (int batch : o.batches) {
    for (int context : o.contexts) {
      std::vector<cache::SeqId> seqs;
      for (int b = 0; b < batch; ++b) {
        const auto s = ex.cache_control().seq_new();
        if (!s) return internal_error("bench: no sequence slot for session {}", b);
        seqs.push_back(*s);
      }
      std::vector<Token> next(static_cast<std::size_t>(batch));
      // The prompt of each session, one step each.
      for (int b = 0; b < batch; ++b) {
        executor::RawTargetStep s;
        for (int i = 0; i < std::max(1, context); ++i) {
          s.tokens.push_back(random_token());
          s.positions.push_back(i);
          s.seq_ids.push_back(seqs[static_cast<std::size_t>(b)]);
        }
        s.logit_indices.push_back(static_cast<std::int64_t>(s.tokens.size()) - 1);
        std::vector<Token> t;
        CELLM_RETURN_IF_ERROR(step(ex, s, &t));
        next[static_cast<std::size_t>(b)] = t.at(0);
      }
      int pos = std::max(1, context);
      double timed_ms = 0;
      for (int i = 0; i < o.warmup_steps + o.steps; ++i, ++pos) {
        executor::RawTargetStep s;
        for (int b = 0; b < batch; ++b) {
          s.tokens.push_back(next[static_cast<std::size_t>(b)]);
          s.positions.push_back(pos);
          s.seq_ids.push_back(seqs[static_cast<std::size_t>(b)]);
          s.logit_indices.push_back(b);
        }
        const auto t0 = Clock::now();
        CELLM_RETURN_IF_ERROR(step(ex, s, &next));
        if (i >= o.warmup_steps) timed_ms += ms_since(t0);
      }
      for (cache::SeqId s : seqs) ex.cache_control().seq_rm(s);
      CpuPoint p{"decode", batch, context};
      p.steps = o.steps;
      p.ms = timed_ms / o.steps;
      p.tokens_per_s = batch * 1000.0 / p.ms;
      const double mean_keys = std::max(1, context) + o.warmup_steps + (o.steps + 1) / 2.0;
      const double bytes = wbytes + cell_bytes * batch * mean_keys;
      p.bandwidth_fraction = bytes / copy / (p.ms / 1e3);
      std::fprintf(out,
                   "decode batch %3d context %5d: %8.3f ms/step %8.1f tok/s  (%.0f%% of the copy "
                   "bandwidth, %d steps)\n",
                   batch, context, p.ms, p.tokens_per_s, 100.0 * p.bandwidth_fraction, p.steps);
      std::fflush(out);
      points.push_back(p);
    }
  }
  for (int prompt : o.prompts) {
    std::vector<double> ms;
    for (int rep = 0; rep < 1 + o.prefill_reps; ++rep) {
      const auto seq = ex.cache_control().seq_new();
      if (!seq) return internal_error("bench: no sequence slot for a prefill");
      executor::RawTargetStep s;
      for (int i = 0; i < prompt; ++i) {
        s.tokens.push_back(random_token());
        s.positions.push_back(i);
        s.seq_ids.push_back(*seq);
      }
      s.logit_indices.push_back(prompt - 1);
      std::vector<Token> t;
      const auto t0 = Clock::now();
      CELLM_RETURN_IF_ERROR(step(ex, s, &t));
      if (rep >= 1) ms.push_back(ms_since(t0));
      ex.cache_control().seq_rm(*seq);
    }
    std::sort(ms.begin(), ms.end());
    CpuPoint p{"prefill", 1, prompt};
    p.ms = ms[ms.size() / 2];
    p.tokens_per_s = prompt * 1000.0 / p.ms;
    std::fprintf(out, "prefill %5d tokens: %9.3f ms %8.1f tok/s\n", prompt, p.ms, p.tokens_per_s);
    std::fflush(out);
    points.push_back(p);
  }
  if (!o.json_path.empty()) {
    std::ofstream json(o.json_path, std::ios::app);
    const std::string commit = env_string("CELLM_COMMIT").value_or("unknown");
    for (const CpuPoint& p : points) {
      nlohmann::json j{{"bench", "step"},
                       {"backend", "cpu"},
                       {"cpu_program", program},
                       {"isa", isa},
                       {"cpu", cpu},
                       {"threads", threads},
                       {"commit", commit},
                       {"model", o.model},
                       {"kind", p.kind},
                       {"path", "execute_raw"},
                       {"batch", p.batch},
                       {"ms", p.ms},
                       {"tokens_per_s", p.tokens_per_s},
                       {"copy_bytes_per_s", copy}};
      j[p.kind == "decode" ? "context" : "prompt"] = p.context;
      if (p.kind == "decode") {
        j["steps"] = p.steps;
        j["bandwidth_fraction"] = p.bandwidth_fraction;
        j["weight_bytes"] = wbytes;
      }
      json << j.dump() << "\n";
    }
  }
  return Status::ok();
}

}  // namespace cellm::bench
