// Picks the backend a program is built on: CUDA when this build has it and a
// device is present (or when asked for by name), else the CPU reference.
//
// Thread-safety: pure, apart from querying the CUDA runtime.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cellm/status.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/weights.h"
#include "program/program.h"
#include "program/program_options.h"

namespace cellm::app {

struct BackendChoice {
  std::string name;  // "cpu" or "cuda"
  // The CUDA program sizes its KV pool from free device memory; the CPU one
  // needs an explicit cell count.
  bool sizes_pool_from_memory = false;
  // The GgufFile, when the weights came from one (or null): the CUDA program
  // keeps the projections its kernels decode in the file's blocks.
  std::function<Result<std::shared_ptr<program::Program>>(
      const model::ModelSpec&, const model::Weights&, const format::GgufFile*,
      const program::ProgramOptions&)>
      load;
};

// "auto", "cpu" or "cuda"; asking for CUDA where it is unavailable is an error
// that says why.
Result<BackendChoice> choose_backend(const std::string& requested);

// The dtype loading should dequantize GGUF blocks and FP8 weights to for
// `backend` (model::LoadOptions::dequant_dtype): the CUDA program converts
// every weight to bf16 on upload, so bf16 straight away (half the host memory
// of float32, the same values: both round float32 to nearest even); the CPU
// programs read float32.
DType dequant_dtype_for(const BackendChoice& backend);

}  // namespace cellm::app
