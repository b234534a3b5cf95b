// Inverse RoPE frequencies per layer, computed on the host from each layer's
// RopeSpec (default, linear, llama3 scaling, partial rotary) the way Hugging
// Face's rope initialisers compute them, then handed to the rope kernel.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "model/model_spec.h"

namespace cellm::cuda {

// rotary_dim / 2 frequencies; rotary_dim 0 in the spec means the whole head.
std::vector<float> rope_inv_freq(const model::RopeSpec& rope, int head_dim);
int rope_rotary_dim(const model::RopeSpec& rope, int head_dim);

}  // namespace cellm::cuda
