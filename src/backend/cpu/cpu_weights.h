// Float32 copies of a model's weights for the CPU forward, checked against
// the ModelSpec: every tensor the architecture needs is present with the
// shape the spec implies. f32 tensors are shared, f16/bf16 ones converted
// once; a tied head keeps sharing the embedding's converted storage.
//
// Thread-safety: the result is immutable; safe to read from any thread.
#pragma once

#include "cellm/status.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace cellm::cpu {

// The same canonical layout as `weights`, every tensor f32 on the host.
// Refuses (InvalidArgument) a missing or misshapen tensor, naming it.
Result<model::Weights> to_f32_weights(const model::ModelSpec& spec, const model::Weights& weights);

}  // namespace cellm::cpu
