// The logits of a loaded model on the CPU reference program, teacher-forced
// over a token sequence (every position's logits, in order): what the FP8
// logits tests compare between differently loaded copies of one model.
//
// Thread-safety: each call builds its own program.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_program.h"
#include "model/loader.h"
#include "step_driver.h"

namespace cellm::model::testing {

inline Result<std::vector<std::vector<float>>> cpu_logits(const LoadedModel& m,
                                                          const std::vector<std::int64_t>& tokens) {
  using cpu::testing::StepDriver;
  program::ProgramOptions o;
  o.static_widths = {1, 2, 4, 8, 16, 32};
  o.max_step = static_cast<std::int32_t>(tokens.size());
  o.kv_cells = o.max_step + 1;
  CELLM_ASSIGN_OR_RETURN(auto program, cpu::CpuProgram::create(m.spec, m.weights, o));
  CELLM_ASSIGN_OR_RETURN(auto d,
                         StepDriver::create(std::move(program), {o.max_step + 1, 8, o.max_step}));
  const auto seq = d->cache().seq_new();
  if (!seq) return internal_error("no free sequence in a fresh cache");
  return d->feed(*seq, tokens, 32);
}

// The relative RMS error of `got` against `want` (one logits row), and the
// sum of squared differences it came from.
struct RowError {
  double relative = 0;
  double diff_sq = 0;
};
inline RowError row_error(const std::vector<float>& want, const std::vector<float>& got) {
  double diff = 0, norm = 0;
  for (std::size_t v = 0; v < want.size(); ++v) {
    const double d = static_cast<double>(got[v]) - want[v];
    diff += d * d;
    norm += static_cast<double>(want[v]) * want[v];
  }
  return {std::sqrt(diff / norm), diff};
}

}  // namespace cellm::model::testing
