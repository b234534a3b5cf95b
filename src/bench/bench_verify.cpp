#include "bench/bench_verify.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/env.h"
#include "executor/cuda_executor.h"

namespace cellm::bench {
namespace {

using Clock = std::chrono::steady_clock;

Status argmax_step(executor::CudaExecutor& ex, const executor::RawTargetStep& step) {
  bool sampled = false;
  const bool ok = ex.execute_raw(step, [&](const executor::RawTargetOutput& out) {
    sampled = ex.argmax_rows(out.logits, out.selected_indices.size()).has_value();
    return sampled;
  });
  if (!ok || !sampled) return internal_error("a verification benchmark step failed");
  return Status::ok();
}

}  // namespace

Status run_verify_points(const StepBenchOptions& o, const model::ModelSpec& spec,
                         std::shared_ptr<program::Program> program, const std::string& device,
                         const std::string& kernels, std::FILE* out) {
  for (int k : o.verify_drafts) {
    if (k < 1 || k > 16) return invalid_argument("--verify-drafts {}: give 1 to 16 drafts", k);
  }
  const int context = std::max(2, o.contexts.front());
  const int most = *std::max_element(o.verify_drafts.begin(), o.verify_drafts.end());
  std::vector<int> drafts = {0};
  drafts.insert(drafts.end(), o.verify_drafts.begin(), o.verify_drafts.end());
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed) + 7);
  auto token = [&] { return static_cast<Token>(rng() % static_cast<unsigned>(spec.vocab_size)); };
  std::ofstream json;
  if (!o.json_path.empty()) json.open(o.json_path, std::ios::app);
  const std::string commit = env_string("CELLM_COMMIT").value_or("unknown");
  std::fprintf(out, "\nverification steps at context %d (every row's logits, device argmax):\n",
               context);
  for (int batch : o.batches) {
    CELLM_ASSIGN_OR_RETURN(auto ex,
                           executor::CudaExecutor::create(program, batch, context + most + 2));
    if (!ex->initialize()) return internal_error("the executor failed to initialize");
    std::vector<cache::SeqId> seqs;
    for (int b = 0; b < batch; ++b) {
      const auto s = ex->cache_control().seq_new();
      if (!s) return internal_error("bench: no sequence slot for session {}", b);
      seqs.push_back(*s);
      executor::RawTargetStep prompt;
      for (int i = 0; i < context; ++i) {
        prompt.tokens.push_back(token());
        prompt.positions.push_back(i);
        prompt.seq_ids.push_back(*s);
      }
      prompt.logit_indices.push_back(context - 1);
      CELLM_RETURN_IF_ERROR(argmax_step(*ex, prompt));
    }
    double plain_ms = 0;
    for (int k : drafts) {
      std::vector<double> ms;
      for (int rep = 0; rep < o.warmup_steps + o.steps; ++rep) {
        executor::RawTargetStep step;
        for (cache::SeqId s : seqs) {
          for (int r = 0; r <= k; ++r) {
            step.logit_indices.push_back(static_cast<std::int64_t>(step.tokens.size()));
            step.tokens.push_back(token());
            step.positions.push_back(context + r);
            step.seq_ids.push_back(s);
          }
        }
        const auto t0 = Clock::now();
        CELLM_RETURN_IF_ERROR(argmax_step(*ex, step));
        const auto t1 = Clock::now();
        for (cache::SeqId s : seqs) {
          if (!ex->cache_control().rewind(s, context)) {
            return internal_error("bench: rewinding session {} to {} failed", s, context);
          }
        }
        if (rep >= o.warmup_steps)
          ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      if (k == 0) plain_ms = median;
      std::fprintf(out,
                   "verify batch %3d, %2d drafts (%4d rows): %8.3f ms  (%.3fx the plain step)\n",
                   batch, k, batch * (k + 1), median, median / plain_ms);
      std::fflush(out);
      if (json.is_open()) {
        json << nlohmann::json{{"bench", "step"},
                               {"kind", "verify"},
                               {"path", "execute_raw"},
                               {"gpu", device},
                               {"commit", commit},
                               {"model", o.model},
                               {"batch", batch},
                               {"context", context},
                               {"drafts", k},
                               {"rows", batch * (k + 1)},
                               {"ms", median},
                               {"kernels", kernels},
                               {"steps", o.steps},
                               {"ratio_to_plain", median / plain_ms}}
                    .dump()
             << "\n";
      }
    }
  }
  return Status::ok();
}

}  // namespace cellm::bench
