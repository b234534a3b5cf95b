// `cellm bench step --verify-drafts K,...`: what a speculative verification
// step costs against a plain decode step (issue 39's table). For each batch,
// `batch` sessions prefilled to the first --context feed 1 + k rows each
// (the real token and k drafts) in one packed step through execute_raw,
// every row's logits selected and argmaxed on the device, as the executor's
// speculation does; the rows are rewound after each step, so every timed
// step sees the same keys. k = 0 is the plain step the ratio is taken to.
// `kernels` (the program's KernelChoice, described) labels the JSON lines.
//
// Thread-safety: runs on the calling thread.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "bench/bench_step.h"
#include "cellm/status.h"
#include "model/model_spec.h"
#include "program/program.h"

namespace cellm::bench {

Status run_verify_points(const StepBenchOptions& o, const model::ModelSpec& spec,
                         std::shared_ptr<program::Program> program, const std::string& device,
                         const std::string& kernels, std::FILE* out);

}  // namespace cellm::bench
