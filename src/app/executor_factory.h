// CudaExecutor::create from a configuration naming a model path — the form of
// the public executor header (`CudaExecutorConfig`). It lives here rather than
// in src/executor because loading a model and choosing a backend are
// assembly, which the executor library must not depend on.
//
// Thread-safety: create_executor may run on any thread; the executor it
// returns belongs to one engine thread afterwards.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "app/backend_select.h"
#include "app/sizing.h"
#include "cellm/status.h"
#include "core/dtype.h"
#include "executor/cuda_executor.h"
#include "model/loader.h"
#include "program/program.h"
#include "program/program_options.h"

namespace cellm::app {

struct CudaExecutorOptions {
  // Every method shares one copy of the weights (always true here: a program
  // is one set of weights with many methods).
  bool weight_sharing_across_methods = true;
  // Capture each static forward_N as a CUDA graph when it loads.
  bool cuda_graph_for_static_methods = true;
  // Other static methods to capture; the programs here export none.
  std::vector<std::string> additional_cuda_graph_methods;
};

struct CudaExecutorConfig {
  std::string model_path;               // Hugging Face folder or .gguf file
  std::vector<std::string> data_files;  // shards are found through the index; keep empty
  int max_sessions = 1;
  int max_session_tokens = 0;  // 0: divide the pool across sessions, capped by the context
  // The K/V element type (`--kv-dtype`, core/dtype.h's parse_kv_dtype). CUDA:
  // kBF16 or kF8E4M3 (E4M3 codes, one fixed scale of 1: twice the cells in
  // the same memory; see backend/cuda/cuda_types.h's KvDtype), which becomes
  // ProgramOptions::kv_dtype. CPU: kBF16 (the default) or kF32, both meaning
  // the CPU program's f32 K/V. Other pairings are refused.
  DType kv_dtype = DType::kBF16;
  int initial_capacity = -1;     // the pool is sized at load; must be -1 or fit it
  std::string backend = "auto";  // "auto", "cpu" or "cuda"
  // The CPU program: "fast" (GGUF blocks, int8 SIMD kernels, threads) or
  // "reference" (the float32 golden oracle); empty: fast. Ignored on CUDA.
  std::string cpu_program;
  // Threads of the fast CPU program; 0: $CELLM_THREADS, else every core
  // this process may use.
  int cpu_threads = 0;
  program::ProgramOptions program;
  CudaExecutorOptions options;
  executor::SpeculationOptions speculation;  // no proposer: off
};

struct LoadedExecutor {
  model::LoadedModel model;
  std::shared_ptr<program::Program> program;
  std::unique_ptr<executor::CudaExecutor> executor;
  std::string backend;  // "cpu" or "cuda"
};

// `--kv-dtype` on `backend`: fp8 is refused on the CPU (its programs keep
// f32 K/V) and f32 on CUDA, in messages that name the flag. create_executor
// checks it; `cellm bench serve` too, before building a program of its own.
Status check_kv_dtype(DType kv_dtype, const BackendChoice& backend);
// ProgramOptions::kv_dtype for a `--kv-dtype`: fp8 stays, the rest is bf16
// (the CPU's f32 is the CUDA program's default there, which it never reaches).
DType program_kv_dtype(DType kv_dtype);

// The program create_executor builds on `backend` with `options`: on the CPU
// the fast program (the GGUF blocks, int8 SIMD kernels, config.cpu_threads)
// unless config.cpu_program asks for the reference; elsewhere backend.load.
// What `cellm bench serve` builds in-process too, so it measures the
// program `cellm serve` runs.
Result<std::shared_ptr<program::Program>> build_program(const BackendChoice& backend,
                                                        const model::LoadedModel& model,
                                                        const CudaExecutorConfig& config,
                                                        const program::ProgramOptions& options);

// Loads the model, builds its program on the chosen backend and the executor
// over it. Methods load (and graphs are captured) in executor->initialize().
Result<LoadedExecutor> create_executor(const CudaExecutorConfig& config);
// The same over a model already loaded (config.model_path is then only a label).
// A CPU pool (program.kv_cells 0) holds config.max_sessions sessions of
// max_session_tokens, or of the model's context as far as memory allows.
Result<LoadedExecutor> create_executor(model::LoadedModel model, const CudaExecutorConfig& config);

// The Engine's form: sessions and context come from size_engine (app/sizing.h)
// rather than config.max_sessions / max_session_tokens. `request` carries the
// user's values (0: automatic) and the snapshot sessions; the pool, memory
// budget, cell size and widest step are filled in here. The executor holds
// sizing.total_sessions() sessions of sizing.context tokens.
struct SizedExecutor {
  LoadedExecutor loaded;
  Sizing sizing;
  std::uint64_t cell_bytes = 0;  // K and V of one cell over every layer
};
Result<SizedExecutor> create_sized_executor(model::LoadedModel model,
                                            const CudaExecutorConfig& config,
                                            SizingRequest request);

// K and V bytes of one cell in the CPU program (f32 over every layer).
std::uint64_t cpu_cell_bytes(const model::ModelSpec& spec);
// The memory the CPU pool's sessions may take: the machine's RAM less the
// model's weights (f32 on the CPU), 0 when unknown.
std::uint64_t cpu_kv_budget_bytes(const model::ModelSpec& spec);

}  // namespace cellm::app
