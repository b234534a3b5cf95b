#include "backend/cpu/fast_program.h"

namespace cellm::cpu {

Result<std::unique_ptr<CpuProgram>> create_fast_program(const model::ModelSpec& spec,
                                                        const model::Weights& weights,
                                                        const format::GgufFile* gguf,
                                                        const program::ProgramOptions& options,
                                                        const FastOptions& fast) {
  return CpuProgram::create_with(spec, options, [&]() -> Result<std::unique_ptr<ForwardPass>> {
    CELLM_ASSIGN_OR_RETURN(
        std::unique_ptr<FastForward> f,
        FastForward::create(spec, weights, gguf, options.rope_table_dtype, fast));
    return std::unique_ptr<ForwardPass>(std::move(f));
  });
}

}  // namespace cellm::cpu
