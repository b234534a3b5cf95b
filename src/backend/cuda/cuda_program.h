// CudaProgram: the Program of the CUDA backend (DESIGN §7). It exports the
// same method family as the CPU program; static forward_N methods are
// captured as CUDA graphs when loaded and replayed (one graph for each split
// count the decode attention takes, which follows the step's longest
// session), wider steps run eagerly.
// Logits stay on the device (Device::kCuda) and the `sample` /
// `sample_argmax` methods draw tokens there, so a captured step costs one
// graph launch (its first node copies the step's arrays from page-locked
// host memory), the sampler (nothing to launch for a greedy one-token step
// whose lm_head GEMV took the argmax) and one synchronisation when the
// tokens come back.
//
// Memory plan at load: weights (bf16), one workspace for max_step rows, then
// the K/V pool from what `kv_memory_fraction` of the device leaves (or
// ProgramOptions::kv_cells), in cells of ProgramOptions::kv_dtype (bf16, or
// FP8 E4M3: half the bytes a cell, so twice the cells in the same memory).
// Nothing is allocated while stepping.
//
// Thread-safety: not thread-safe; one engine thread binds, loads, executes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/cuda/cuda_types.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/kernels/kernel_choice.h"
#include "cellm/status.h"
#include "model/model_spec.h"
#include "model/weights.h"
#include "program/program.h"
#include "program/program_options.h"

namespace cellm::cuda {

// Visible CUDA devices (0 when there is no driver or device).
int device_count();

// Uploads `weights` and builds the program. With options.keep_quantized,
// projections in block types the GPU kernels decode stay in the blocks of
// `gguf` (the file the weights came from), and FP8 weights (weights.fp8)
// stay FP8 (device_weights.h).
Result<std::unique_ptr<program::Program>> load_program(const model::ModelSpec& spec,
                                                       const model::Weights& weights,
                                                       const program::ProgramOptions& options,
                                                       const format::GgufFile* gguf = nullptr);
// A program over weights already on the device.
Result<std::unique_ptr<program::Program>> make_program(const model::ModelSpec& spec,
                                                       DeviceWeights weights,
                                                       const program::ProgramOptions& options);
// A program over random weights in the spec's shapes (benchmarks); `fp8`:
// the layers' projections in FP8, as `--quantize fp8` stores a checkpoint's.
Result<std::unique_ptr<program::Program>> load_random_program(
    const model::ModelSpec& spec, std::uint64_t seed, const program::ProgramOptions& options,
    bool fp8 = false);

// The KV pool type ProgramOptions::kv_dtype asks for: bf16 (also for kBF16's
// default) or FP8 for kF8E4M3; any other dtype is refused, naming both.
Result<KvDtype> kv_dtype_of(DType dtype);

// Cells of `kv_dtype` that `budget_bytes` of device memory holds (0 when
// none), at most what the cell tables index (int32, halved).
std::int64_t kv_cells_for_memory(const model::ModelSpec& spec, double budget_bytes,
                                 KvDtype kv_dtype);

// A program's K/V pools: cells (the scratch cell included), element type and
// bytes over every layer. cells 0 for another backend's program.
struct CudaKvPool {
  std::int64_t cells = 0;
  KvDtype dtype = KvDtype::kBF16;
  std::size_t bytes = 0;
};
CudaKvPool cuda_kv_pool(program::Program& program);

// A host copy of a device (or host) tensor; synchronises the device.
Result<Tensor> copy_to_host(const Tensor& tensor);

// What a program was made with (ProgramOptions::cuda_graphs, and
// cuda_kernels or the CELLM_* knobs), for benchmark labels; fixed at creation.
struct CudaProgramKnobs {
  bool use_graphs = true;
  KernelChoice kernels;
};
// The knobs of a program made by this backend; null for other programs.
const CudaProgramKnobs* cuda_program_knobs(program::Program& program);

// How the program's `sample_argmax` calls were answered: by the argmax the
// step's lm_head GEMV wrote with the logits (CudaForward::takes_argmax), or
// by launching the argmax kernel; and how many single-step graphs it
// captured (one per static width and split-KV split count, ForwardShape::
// key_span).
struct CudaProgramStats {
  std::uint64_t argmax_from_lm_head = 0;
  std::uint64_t argmax_launched = 0;
  std::uint64_t graphs_captured = 0;
};
// The stats of a program made by this backend; null for other programs.
const CudaProgramStats* cuda_program_stats(program::Program& program);

// The projections a program of this backend keeps in GGUF blocks ("Q4_K
// x144, Q6_K x33"); "" when all are bf16 or the program is another backend's.
std::string cuda_weight_blocks(program::Program& program);
// Weight bytes one decode step of such a program reads: everything resident
// but an embedding table that is not also the head (its rows are gathered).
// 0 for another backend's program.
std::size_t cuda_weight_bytes_read(program::Program& program);

}  // namespace cellm::cuda
