// The fast CPU program: CpuProgram (the same methods, checks, KV store and
// samplers as the float32 reference) running FastForward, whose matrix
// products use the GGUF blocks and SIMD int8 kernels. The app selects it by
// default on CPU; the reference (CpuProgram::create) stays the golden
// oracle and stays selectable ("--cpu-program reference").
//
// Thread-safety: as CpuProgram (one thread binds, loads and executes); each
// forward uses the program's thread count internally.
#pragma once

#include <memory>
#include <string_view>

#include "backend/cpu/cpu_program.h"
#include "backend/cpu/fast_forward.h"
#include "format/gguf.h"

namespace cellm::cpu {

// "fast" or "reference": the names the app and CLI accept.
inline constexpr std::string_view kFastProgram = "fast";
inline constexpr std::string_view kReferenceProgram = "reference";

// `gguf` is the file the weights came from (null for Hugging Face folders:
// every projection then goes through BLAS in float32).
Result<std::unique_ptr<CpuProgram>> create_fast_program(const model::ModelSpec& spec,
                                                        const model::Weights& weights,
                                                        const format::GgufFile* gguf,
                                                        const program::ProgramOptions& options,
                                                        const FastOptions& fast);

}  // namespace cellm::cpu
