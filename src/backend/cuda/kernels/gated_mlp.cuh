// Gated MLP activation: out = act(gate) * up, act = SiLU (Llama, Qwen, Phi-3)
// or GELU with the tanh approximation (Gemma). gate and up are either halves
// of one fused [rows, 2I] projection (gate first, as Phi-3 and a fused
// gate_up GEMM lay them out: up = gate + I, both strides 2I) or separate
// buffers. Float32 arithmetic, one rounding at the output.
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"
// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

enum class GateActivation : std::uint8_t { kSilu, kGeluTanh };

struct GatedMlpParams {
  const bf16* gate = nullptr;  // [rows, gate_stride], first `inter` columns used
  const bf16* up = nullptr;    // [rows, up_stride], first `inter` columns used
  bf16* out = nullptr;         // [rows, out_stride]; may alias gate
  std::int64_t gate_stride = 0;
  std::int64_t up_stride = 0;
  std::int64_t out_stride = 0;
  std::int32_t rows = 0;
  std::int32_t inter = 0;  // multiple of 8
  GateActivation activation = GateActivation::kSilu;

  // Programmatic dependent launch (launch.h): the kernel waits on the previous one itself.
  bool pdl = false;

  Status validate() const;
};

void launch_gated_mlp(const GatedMlpParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
