// Programs over random weights in a named shape (model/shapes.h), on either
// backend: the CUDA program fills its weights on the device, the CPU program
// gets host tensors drawn here (matrices uniform with std 0.02, embedding
// and head with std 1 so that logits spread, norms at their identity, biases
// 0). Benchmarks of real shapes need no checkpoint, and the CPU path lets
// small shapes (smollm2-135m) run the very code the GPU runs for 8B shapes.
//
// Thread-safety: pure functions (the CUDA one uses the current device).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cellm/status.h"
#include "model/model_spec.h"
#include "model/weights.h"
#include "program/program.h"
#include "program/program_options.h"

namespace cellm::bench {

// Host tensors (f32) in the canonical layout of `spec`, seeded.
Result<model::Weights> random_host_weights(const model::ModelSpec& spec, std::uint64_t seed);

// A random-weight program on "cpu" or "cuda" (the CPU program owns copies of
// what it needs, so nothing else must be kept alive).
Result<std::shared_ptr<program::Program>> random_program(const model::ModelSpec& spec,
                                                         std::uint64_t seed,
                                                         const program::ProgramOptions& options,
                                                         const std::string& backend);

}  // namespace cellm::bench
