// build_weights: fills the canonical Weights of weights.h from a TensorSource,
// checking every tensor against the ModelSpec before anything is loaded.
// Missing tensors, shape mismatches (both shapes named) and unexpected extra
// tensors are reported together in one error. Tied heads alias the embedding;
// phi3's fused qkv_proj and gate_up_proj become row views of one buffer.
//
// Thread-safety: a pure function of its inputs.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "cellm/status.h"
#include "model/model_spec.h"
#include "model/tensor_source.h"
#include "model/weights.h"

namespace cellm::model {

struct BuildOptions {
  // Extra tensors are an error unless allowed (then they are only logged).
  bool allow_extra_tensors = false;
  // Tensors checked but not loaded: an undefined Tensor stands in their
  // place (the GPU uploads them from the file's blocks itself).
  std::set<std::string, std::less<>> left_unloaded;
};

// The canonical tensor names and shapes `spec` needs, in load order.
struct ExpectedTensor {
  std::string name;
  Shape shape;
  bool optional = false;  // lm_head when tied
};
std::vector<ExpectedTensor> expected_tensors(const ModelSpec& spec);

Result<Weights> build_weights(const ModelSpec& spec, const TensorSource& source,
                              const BuildOptions& options = {});

}  // namespace cellm::model
