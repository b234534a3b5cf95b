// Elementwise math of the fast CPU program in float32 vectors: the gated
// activations (SiLU, tanh-approximated GELU) through a vector exp accurate
// to a few float ulps, instead of the reference's double-precision libm
// calls (ops.h), which cost more than the matrix products around them in a
// prefill. Results agree with the reference within float rounding.
//
// Thread-safety: pure functions over caller-owned memory.
#pragma once

#include <cstdint>

#include "backend/cpu/quant_dot.h"
#include "model/model_spec.h"

namespace cellm::cpu {

// gate[i] = act(gate[i]) * up[i] for i < n.
void gated_activation_fast(float* gate, const float* up, std::int64_t n, model::Activation act,
                           Isa isa);

}  // namespace cellm::cpu
