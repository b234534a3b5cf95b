// Which kernels the CUDA forward launches where a choice remains. The
// settled choices are constants below, and code: each was chosen by an A/B on
// the H200 whose numbers are in bench/results (and whose knob is in git
// history), not here. KernelChoice holds the few still open to experiment;
// a program takes them at creation from ProgramOptions::cuda_kernels, whose
// default is the CELLM_* knobs read at start-up (core/env.h, README's table).
//
// Frozen (no knob): decode attention v2 (split-KV, tensor cores; its splits
// follow the step's longest session, fit the SMs where twice the split keys
// allow, merge in clusters sized to the splits; keys older than the step read
// before the wait; spread, early launch of the next kernel, push merge and
// packed 128-wide heads where their launch qualifies), prefill attention v2,
// rope + K/V scatter as one kernel, the fused GEMV for one-row steps (single
// weight rows for small long projections, staged inputs, the tensor-core
// GEMV's warps chosen by the kernel), programmatic dependent launch, timed
// cuBLASLt candidates per decode GEMM shape, the split device argmax, and
// the clustered, candidate-compacting device draw.
//
// Thread-safety: constants and plain values.
#pragma once

#include <cstdint>
#include <iterator>
#include <string>

#include "core/env.h"

namespace cellm::cuda {

// The choices still open to experiment (core/env.h: gemv_max_rows, gemv_mma).
using KernelChoice = KernelKnobs;

// KernelChoice::gemv_mma: the projections of a GEMV step (up to
// gemv_max_rows rows) that run on tensor cores where their rows fit the
// kernel (gemv_uses_tensor_cores), in kGemvMmaProjections' order.
enum GemvMma : std::uint32_t {
  kMmaQkv = 1u << 0,
  kMmaO = 1u << 1,
  kMmaGateUp = 1u << 2,
  kMmaDown = 1u << 3,
  kMmaHead = 1u << 4,
  kMmaQuant = 1u << 5,  // quantized projections of 2..8-row steps (qgemv_mma)
  kMmaAll = kGemvMmaAll,
};
static_assert(kGemvMmaDefault == (kMmaQkv | kMmaO | kMmaGateUp | kMmaDown));
static_assert(std::size(kGemvMmaProjections) == 6 && kMmaAll == (1u << 6) - 1);

// Split-KV decode attention: the fewest keys a used split takes, and how
// many blocks per SM the split count aims for.
inline constexpr std::int32_t kDecodeSplitKeys = 128;
inline constexpr std::int32_t kDecodeSplitTarget = 2;
// Splits per thread block cluster (at most kAttentionMaxCluster, a power of
// two): a token whose used splits fit in one merges them in distributed
// shared memory.
inline constexpr std::int32_t kDecodeCluster = 8;

// "gemv_max_rows=1 mma=qkv,o,gate_up,down", for logs and
// benchmark labels.
std::string describe(const KernelChoice& choice);

}  // namespace cellm::cuda
