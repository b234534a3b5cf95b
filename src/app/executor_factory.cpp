#include "app/executor_factory.h"

#include <algorithm>

#include "app/backend_select.h"
#ifdef CELLM_HAVE_CUDA
#include "backend/cuda/cuda_program.h"
#endif

namespace cellm::app {

Result<LoadedExecutor> create_executor(const CudaExecutorConfig& config) {
  CELLM_ASSIGN_OR_RETURN(model::LoadedModel model, model::load_model(config.model_path));
  return create_executor(std::move(model), config);
}

Result<LoadedExecutor> create_executor(model::LoadedModel model, const CudaExecutorConfig& config) {
  if (config.max_sessions <= 0) {
    return invalid_argument("max_sessions must be positive, got {}", config.max_sessions);
  }
  if (config.max_session_tokens < 0) {
    return invalid_argument("max_session_tokens must be 0 (divide the pool) or positive, got {}",
                            config.max_session_tokens);
  }
  if (config.kv_dtype != DType::kBF16 && config.kv_dtype != DType::kF32) {
    return not_supported("kv_dtype {}: K/V are stored as bf16 on the GPU and f32 on the CPU",
                         dtype_name(config.kv_dtype));
  }
  if (!config.data_files.empty()) {
    return not_supported(
        "data_files: weights are read from the model path itself (sharded "
        "checkpoints through model.safetensors.index.json)");
  }
  if (!config.options.additional_cuda_graph_methods.empty()) {
    return not_supported(
        "additional_cuda_graph_methods: the programs export no other static "
        "method to capture");
  }
  LoadedExecutor out;
  CELLM_ASSIGN_OR_RETURN(BackendChoice backend, choose_backend(config.backend));
  out.backend = backend.name;
  out.model = std::move(model);
  program::ProgramOptions options = config.program;
  int session_tokens = config.max_session_tokens;
  if (options.kv_cells == 0 && !backend.sizes_pool_from_memory) {
    // A CPU pool holds every session's reservation outright.
    if (session_tokens == 0) session_tokens = std::min<int>(out.model.spec.max_context, 4096);
    options.kv_cells = config.max_sessions * session_tokens + 1;
  }
  if (config.initial_capacity >= 0 && options.kv_cells > 0 &&
      config.initial_capacity > options.kv_cells) {
    return invalid_argument("initial_capacity {} exceeds the pool of {} cells",
                            config.initial_capacity, options.kv_cells);
  }
  CELLM_ASSIGN_OR_RETURN(out.program, backend.load(out.model.spec, out.model.weights, options));
#ifdef CELLM_HAVE_CUDA
  if (auto* knobs = cuda::cuda_program_knobs(*out.program)) {
    knobs->use_graphs = config.options.cuda_graph_for_static_methods;
  }
#endif
  CELLM_ASSIGN_OR_RETURN(out.executor, executor::CudaExecutor::create(
                                           out.program, config.max_sessions, session_tokens));
  return out;
}

}  // namespace cellm::app
