#include "app/backend_select.h"

#include "backend/cpu/cpu_program.h"
#ifdef CELLM_HAVE_CUDA
#include "backend/cuda/cuda_program.h"
#endif

namespace cellm::app {
namespace {

BackendChoice cpu_backend() {
  BackendChoice c;
  c.name = "cpu";
  // The reference program reads floats; the fast one (executor_factory) the blocks.
  c.load = [](const model::ModelSpec& spec, const model::Weights& weights,
              const format::GgufFile* /*gguf*/,
              const program::ProgramOptions& options) -> Result<std::shared_ptr<program::Program>> {
    CELLM_ASSIGN_OR_RETURN(auto p, cpu::CpuProgram::create(spec, weights, options));
    return std::shared_ptr<program::Program>(std::move(p));
  };
  return c;
}

#ifdef CELLM_HAVE_CUDA
BackendChoice cuda_backend() {
  BackendChoice c;
  c.name = "cuda";
  c.sizes_pool_from_memory = true;
  c.load = [](const model::ModelSpec& spec, const model::Weights& weights,
              const format::GgufFile* gguf,
              const program::ProgramOptions& options) -> Result<std::shared_ptr<program::Program>> {
    CELLM_ASSIGN_OR_RETURN(auto p, cuda::load_program(spec, weights, options, gguf));
    return std::shared_ptr<program::Program>(std::move(p));
  };
  return c;
}
#endif

}  // namespace

Result<BackendChoice> choose_backend(const std::string& requested) {
  if (requested == "cpu") return cpu_backend();
  if (requested != "auto" && requested != "cuda") {
    return invalid_argument("unknown backend '{}': use auto, cpu or cuda", requested);
  }
#ifdef CELLM_HAVE_CUDA
  if (cuda::device_count() > 0) return cuda_backend();
  if (requested == "cuda") {
    return unavailable("no CUDA device is visible: use --backend cpu or check the driver");
  }
#else
  if (requested == "cuda") {
    return not_supported("this build has no CUDA backend: rebuild with the cuda-release preset");
  }
#endif
  return cpu_backend();
}

DType dequant_dtype_for(const BackendChoice& backend) {
  return backend.name == "cuda" ? DType::kBF16 : DType::kF32;
}

}  // namespace cellm::app
