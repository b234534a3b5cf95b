// ProgramOptions: what a backend builds into a program besides the weights —
// the static forward widths, the widest step, the KV budget, taps, device
// sampling and the CUDA program's graphs and kernel choices (DESIGN §2).
// Backends read it once in load_program; nothing changes a program's options
// after it is made.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/env.h"

namespace cellm::program {

struct ProgramOptions {
  // Token extents of the static `forward_N` methods. Widths above max_step
  // are not exported; `forward_others` covers (widest static, max_step].
  std::vector<std::int32_t> static_widths = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  // Most tokens one forward takes (the dynamic methods' upper bound).
  std::int32_t max_step = 2048;
  // KV pool size in cells, scratch cell included (published as
  // get_offgraph_kv_max_cells). 0: the backend's default — the CPU program
  // sizes it for 4 sequences of min(max_context, 8192) tokens plus the
  // scratch cell; the CUDA program uses kv_memory_fraction.
  std::int32_t kv_cells = 0;
  // CUDA only, when kv_cells is 0: the fraction of free device memory given
  // to weights, workspace and the KV pool together.
  double kv_memory_fraction = 0.9;
  // CUDA only: the K/V pools' element type, kBF16 or kF8E4M3 (`--kv-dtype
  // fp8`: E4M3 codes with one fixed scale of 1, backend/cuda/cuda_types.h's
  // KvDtype; a cell takes half the bytes, so a pool sized from memory holds
  // twice the cells). The CPU program keeps f32 K/V and ignores it (the
  // executor factory refuses fp8 there).
  DType kv_dtype = DType::kBF16;
  // Forwards also return taps [T, D]: every row's final hidden state, the
  // exact input of the LM head (after the final norm).
  bool taps = false;
  // Export `sample` and `sample_argmax`.
  bool device_sampling = true;
  // Published as get_min_prefill_chunk when > 0: the dynamic methods then
  // expect at least this many selector rows.
  std::int32_t min_prefill_chunk = 0;
  // RoPE inverse frequencies are rounded to this dtype (kF32, kBF16, kF16)
  // before use. kF32 is the exact table. Hugging Face transformers keeps its
  // inv_freq buffer in the dtype of the checkpoint it loaded, so reproducing
  // its outputs for a bf16 checkpoint (the golden fixtures) needs kBF16.
  DType rope_table_dtype = DType::kF32;
  // CUDA only: static forward methods are captured as CUDA graphs when
  // loaded and replayed; false launches every step's kernels (the engine's
  // cuda_graph_for_static_methods; tests compare both ways).
  bool cuda_graphs = true;
  // CUDA only: quantized projections stay quantized on the GPU
  // (backend/cuda/device_quant.h): a GGUF file's blocks, an FP8 checkpoint's
  // codes (`--keep-quantized`), and what `--quantize fp8` made (which sets
  // this itself). Off: they are converted to bf16 at load, which decodes
  // faster today (bench/results/h100-2026-12-07-s30*.jsonl) but takes two to
  // four times the memory.
  bool keep_quantized = false;
  // CUDA only: the kernel choices still open to experiment
  // (backend/cuda/kernels/kernel_choice.h). nullopt: the CELLM_* knobs read
  // at start-up (core/env.h's knobs()).
  std::optional<KernelKnobs> cuda_kernels;
};

}  // namespace cellm::program
