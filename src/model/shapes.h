// Named model shapes: the architecture facts of well-known checkpoints, for
// programs over random weights (benchmarks, GPU tests that cannot carry the
// real files). Each shape is the checkpoint's own config.json, parsed by the
// same loader as a real folder, so a shape cannot drift from what loading
// the real model gives.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cellm/status.h"
#include "model/model_spec.h"

namespace cellm::model {

// "llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b", "smollm2-135m", "gemma3-270m".
Result<ModelSpec> named_shape(std::string_view name);
std::vector<std::string> shape_names();

}  // namespace cellm::model
