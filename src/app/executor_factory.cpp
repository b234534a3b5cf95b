#include "app/executor_factory.h"

#include <algorithm>
#include <cstdlib>

#include "app/backend_select.h"
#include "backend/cpu/fast_program.h"
#include "core/env.h"

namespace cellm::app {

Result<LoadedExecutor> create_executor(const CudaExecutorConfig& config) {
  CELLM_ASSIGN_OR_RETURN(model::LoadedModel model, model::load_model(config.model_path));
  return create_executor(std::move(model), config);
}

namespace {

Status check_config(const CudaExecutorConfig& config) {
  if (config.kv_dtype != DType::kBF16 && config.kv_dtype != DType::kF32 &&
      config.kv_dtype != DType::kF8E4M3) {
    return not_supported(
        "kv_dtype {}: K/V are stored as bf16 or fp8 (E4M3) on the GPU and f32 on the CPU",
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
  return Status::ok();
}

// The CPU program the config asks for ("fast" or "reference"), its
// environment fallbacks resolved; unknown values are errors.
struct CpuChoice {
  bool fast = true;
  int threads = 0;
};

Result<CpuChoice> cpu_choice(const CudaExecutorConfig& config) {
  CpuChoice c;
  std::string name = config.cpu_program;
  if (name.empty()) name = std::string(cpu::kFastProgram);
  if (name != cpu::kFastProgram && name != cpu::kReferenceProgram) {
    return invalid_argument("CPU program '{}': use fast or reference (--cpu-program)", name);
  }
  c.fast = name == cpu::kFastProgram;
  c.threads = config.cpu_threads;
  if (c.threads < 0) {
    return invalid_argument("threads {}: give a positive count (0: every core)", c.threads);
  }
  if (c.threads == 0) {
    if (const auto env = env_string("CELLM_THREADS"); env && !env->empty()) {
      char* end = nullptr;
      const long v = std::strtol(env->c_str(), &end, 10);
      if (end == nullptr || *end != '\0' || v < 1 || v > 4096) {
        return invalid_argument("CELLM_THREADS='{}': give a count from 1 to 4096", *env);
      }
      c.threads = static_cast<int>(v);
    }
  }
  return c;
}

}  // namespace

// The CPU programs keep f32 K/V (bf16, the default, and f32 both mean that
// there); the CUDA program keeps bf16 or FP8 E4M3 pools.
Status check_kv_dtype(DType kv_dtype, const BackendChoice& backend) {
  if (backend.name == "cpu" && kv_dtype == DType::kF8E4M3) {
    return not_supported(
        "--kv-dtype fp8: the CPU program keeps K/V in f32; FP8 K/V are for the CUDA backend "
        "(--backend cuda)");
  }
  if (backend.name != "cpu" && kv_dtype == DType::kF32) {
    return not_supported("--kv-dtype f32: the CUDA program keeps K/V in bf16 or fp8");
  }
  return Status::ok();
}

DType program_kv_dtype(DType kv_dtype) {
  return kv_dtype == DType::kF8E4M3 ? DType::kF8E4M3 : DType::kBF16;
}

Result<std::shared_ptr<program::Program>> build_program(const BackendChoice& backend,
                                                        const model::LoadedModel& model,
                                                        const CudaExecutorConfig& config,
                                                        const program::ProgramOptions& options) {
  if (backend.name == "cpu") {
    // A CPU forward costs what its rows cost, and a static width would pad
    // both the step's tokens and its logit rows (a 100-token prompt run as
    // 128 rows, each given the LM head: most of a large-vocabulary prefill).
    // Width 1 only: every wider step takes the dynamic method at its size.
    program::ProgramOptions cpu_options = options;
    cpu_options.static_widths = {1};
    CELLM_ASSIGN_OR_RETURN(CpuChoice choice, cpu_choice(config));
    if (choice.fast) {
      cpu::FastOptions fast;
      fast.threads = choice.threads;
      CELLM_ASSIGN_OR_RETURN(auto p, cpu::create_fast_program(model.spec, model.weights,
                                                              model.gguf.get(), cpu_options, fast));
      return std::shared_ptr<program::Program>(std::move(p));
    }
    return backend.load(model.spec, model.weights, model.gguf.get(), cpu_options);
  }
  return backend.load(model.spec, model.weights, model.gguf.get(), options);
}

namespace {

// The program's options: the config's, with the engine options that the
// program takes at creation (kv_dtype is the config's field: the CPU's f32
// stays the CUDA program's default bf16, which it does not reach).
program::ProgramOptions program_options(const CudaExecutorConfig& config) {
  program::ProgramOptions options = config.program;
  options.cuda_graphs = config.options.cuda_graph_for_static_methods;
  options.kv_dtype = program_kv_dtype(config.kv_dtype);
  return options;
}

// Builds the program and the executor over it once the pool is known.
Result<LoadedExecutor> finish(LoadedExecutor out, const BackendChoice& backend,
                              const CudaExecutorConfig& config,
                              const program::ProgramOptions& options, int sessions,
                              int session_tokens) {
  if (config.initial_capacity >= 0 && options.kv_cells > 0 &&
      config.initial_capacity > options.kv_cells) {
    return invalid_argument("initial_capacity {} exceeds the pool of {} cells",
                            config.initial_capacity, options.kv_cells);
  }
  if (!out.program) {
    CELLM_ASSIGN_OR_RETURN(out.program, build_program(backend, out.model, config, options));
  }
  CELLM_ASSIGN_OR_RETURN(
      out.executor,
      executor::CudaExecutor::create(out.program, sessions, session_tokens, config.speculation));
  return out;
}

}  // namespace

std::uint64_t cpu_cell_bytes(const model::ModelSpec& spec) {
  return static_cast<std::uint64_t>(std::max(spec.num_layers, 0)) * 2u *
         static_cast<std::uint64_t>(std::max(spec.num_kv_heads, 0)) *
         static_cast<std::uint64_t>(std::max(spec.head_dim, 0)) * sizeof(float);
}

std::uint64_t cpu_kv_budget_bytes(const model::ModelSpec& spec) {
  const std::uint64_t ram = physical_memory_bytes();
  const auto weights =
      static_cast<std::uint64_t>(std::max<std::int64_t>(spec.parameter_count(), 0)) * sizeof(float);
  return ram > weights ? ram - weights : 1;  // 1: no room at all (unknown RAM is 0)
}

Result<LoadedExecutor> create_executor(model::LoadedModel model, const CudaExecutorConfig& config) {
  if (config.max_sessions <= 0) {
    return invalid_argument("max_sessions must be positive, got {}", config.max_sessions);
  }
  if (config.max_session_tokens < 0) {
    return invalid_argument("max_session_tokens must be 0 (divide the pool) or positive, got {}",
                            config.max_session_tokens);
  }
  CELLM_RETURN_IF_ERROR(check_config(config));
  CELLM_RETURN_IF_ERROR(cpu_choice(config));
  LoadedExecutor out;
  CELLM_ASSIGN_OR_RETURN(BackendChoice backend, choose_backend(config.backend));
  CELLM_RETURN_IF_ERROR(check_kv_dtype(config.kv_dtype, backend));
  out.backend = backend.name;
  out.model = std::move(model);
  program::ProgramOptions options = program_options(config);
  int session_tokens = config.max_session_tokens;
  if (options.kv_cells == 0 && !backend.sizes_pool_from_memory) {
    // A CPU pool holds every session's reservation outright (committed as
    // cells are first written), each up to the model's context as memory allows.
    SizingRequest q;
    q.model_context = out.model.spec.max_context;
    q.sessions = config.max_sessions;
    q.session_tokens = config.max_session_tokens;
    q.memory_budget_bytes = cpu_kv_budget_bytes(out.model.spec);
    q.cell_bytes = cpu_cell_bytes(out.model.spec);
    q.max_step = options.max_step;
    CELLM_ASSIGN_OR_RETURN(Sizing sizing, size_engine(q));
    session_tokens = sizing.context;
    options.kv_cells = static_cast<std::int32_t>(sizing.pool_cells + 1);
  }
  return finish(std::move(out), backend, config, options, config.max_sessions, session_tokens);
}

Result<SizedExecutor> create_sized_executor(model::LoadedModel model,
                                            const CudaExecutorConfig& config,
                                            SizingRequest request) {
  CELLM_RETURN_IF_ERROR(check_config(config));
  CELLM_RETURN_IF_ERROR(cpu_choice(config));
  SizedExecutor sized;
  LoadedExecutor out;
  CELLM_ASSIGN_OR_RETURN(BackendChoice backend, choose_backend(config.backend));
  CELLM_RETURN_IF_ERROR(check_kv_dtype(config.kv_dtype, backend));
  out.backend = backend.name;
  out.model = std::move(model);
  program::ProgramOptions options = program_options(config);
  request.model_context = out.model.spec.max_context;
  request.max_step = options.max_step;
  sized.cell_bytes = cpu_cell_bytes(out.model.spec);
  if (options.kv_cells == 0 && !backend.sizes_pool_from_memory) {
    request.pool_cells = 0;
    request.memory_budget_bytes = cpu_kv_budget_bytes(out.model.spec);
    request.cell_bytes = sized.cell_bytes;
    CELLM_ASSIGN_OR_RETURN(sized.sizing, size_engine(request));
    options.kv_cells = static_cast<std::int32_t>(sized.sizing.pool_cells + 1);
  } else {
    // The backend sized its pool (device memory, or an explicit cell count):
    // build the program first and divide what it holds.
    CELLM_ASSIGN_OR_RETURN(out.program, build_program(backend, out.model, config, options));
    const std::int64_t max_cells = out.program->constant(program::kMaxCellsConstant).value_or(0);
    if (max_cells < 2) {
      return invalid_program("the {} program publishes a pool of {} cells", backend.name,
                             max_cells);
    }
    request.pool_cells = max_cells - 1;  // the scratch cell is nobody's
    if (const auto bytes = out.program->constant(program::kKvCellBytesConstant)) {
      if (*bytes > 0) sized.cell_bytes = static_cast<std::uint64_t>(*bytes);
    }
    CELLM_ASSIGN_OR_RETURN(sized.sizing, size_engine(request));
  }
  CELLM_ASSIGN_OR_RETURN(sized.loaded, finish(std::move(out), backend, config, options,
                                              sized.sizing.total_sessions(), sized.sizing.context));
  return sized;
}

}  // namespace cellm::app
