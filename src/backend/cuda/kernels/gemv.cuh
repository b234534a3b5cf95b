// Skinny GEMM for decode widths, with the small ops around a projection
// fused in: out[m, n] = epilogue(prologue(a)[m, k] @ w[n, k]^T + bias),
// m <= kGemvMaxRows, bf16 operands, float accumulation.
//
// Built for batch-1 decode (it takes up to 8 rows, but from two rows on
// cuBLASLt is faster on the H200), where a step is a chain of weight reads
// with tiny kernels in between: a warp streams two weight rows through registers
// with two batches of loads in flight, and the first weights are requested
// *before* the kernel waits on the previous kernel (programmatic dependent
// launch), so the weight stream overlaps the tail of whatever ran before.
// Calls may run on tensor cores instead (tensor_cores below, gemv_mma.cuh),
// with the same epilogues.
//   prologue kRmsNorm: the rows are RMS-normalised inside the sums (float
//     throughout: the normalised inputs are not rounded to bf16 as the
//     separate norm kernel stores them; the two differ by about one bf16
//     rounding of the output, a normalised squared error of ~2e-6).
//   epilogue kResidualAdd: out is the bf16 residual stream, updated in place
//     as bf16(out + bf16(sum)): the GEMM output and the residual add of the
//     unfused path, with the same roundings.
//   epilogue kGatedSilu/kGatedGeluTanh: w holds 2n rows (gates, then ups);
//     out[r, c] = bf16(act(bf16(gate)) * bf16(up)), as the gated-MLP kernel
//     computes it from the bf16 GEMM output.
//   epilogue kRopeScatter: the product is a step's q/k/v, and the epilogue
//     does what rope_scatter.cuh does to the stored product (same roundings):
//     q is rotated into out, k rotated and v copied into their cells of the
//     pools, the cell table written. A warp pairs the rows (i, i + half) of a
//     q or k head, so both halves of a rotation meet in one epilogue.
// Every sum is reduced in a fixed order: the same inputs give the same bits
// on every run.
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"
#include "backend/cuda/kernels/rope_scatter.cuh"
// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

inline constexpr int kGemvMaxRows = 8;

enum class GemvPrologue : std::int32_t { kNone, kRmsNorm };
enum class GemvEpilogue : std::int32_t {
  kStore,
  kResidualAdd,
  kGatedSilu,
  kGatedGeluTanh,
  kRopeScatter
};

// The argmax of a one-row product's stored f32 outputs (the lm_head of a
// greedy one-token step, CudaForward::takes_argmax): each block merges the
// best (value, column) pairs its warps stored into partials[blockIdx.x], and
// the last block to count itself in merges the partials and writes the
// column into *out. Same order as the device argmax (argmax_order.cuh:
// larger value, then lower column; NaN never wins, column 0 if all are NaN),
// so the same column for the same outputs; the sampler then has nothing to
// launch. The counter is zero at launch and the last block leaves it zero.
struct GemvArgmax {
  void* partials = nullptr;         // gemv_max_blocks() entries of 8 bytes
  std::int32_t* counter = nullptr;  // one, zero
  std::int32_t* out = nullptr;      // the column (a page-locked host int's device mapping, say)
  // Optional: the column again, in device memory, where the next step's
  // embedding reads it (a decode_greedy chain's fed-back token).
  std::int32_t* feedback = nullptr;
};
inline constexpr std::size_t kGemvArgmaxPartBytes = 8;

struct GemvParams {
  const bf16* a = nullptr;     // [m, lda], first k columns
  const bf16* w = nullptr;     // [n, ldw] (2n rows for the gated epilogues), PyTorch Linear layout
  const bf16* bias = nullptr;  // [n] or null (kStore and kResidualAdd only)
  void* out = nullptr;  // [m, ldc]: bf16, or float when out_f32 (kStore only); never overlaps a
  bool out_f32 = false;
  std::int32_t m = 0;  // 1..kGemvMaxRows
  std::int32_t n = 0;  // output columns
  std::int32_t k = 0;  // multiple of 8
  std::int64_t lda = 0;
  std::int64_t ldw = 0;
  std::int64_t ldc = 0;

  GemvPrologue prologue = GemvPrologue::kNone;
  const bf16* norm_weight = nullptr;  // [k], kRmsNorm
  float norm_eps = 1e-6f;
  float norm_weight_offset = 0.0f;  // 0 or 1 (Gemma's 1 + w)

  GemvEpilogue epilogue = GemvEpilogue::kStore;
  // kRopeScatter: n = (num_heads + 2 num_kv_heads) * head_dim, rotary_dim =
  // head_dim, num_tokens = m, q = out and q_stride = ldc (bf16); k and v are
  // not read (the product replaces them).
  RopeScatterParams rope;
  // Launch with programmatic dependent launch (see launch.h).
  bool pdl = false;
  // A projection whose row pairs would fill at most half of one wave and
  // whose rows are longer than the two batches a warp keeps in flight (1B's
  // down: 2048 outputs of 8192 columns) gives each warp one row instead of
  // two, so an SM keeps as many weight bytes in flight as for a large
  // projection. Plain and residual-add epilogues only; the products are the
  // same, summed in another order. Decided without the row count, so a row
  // of a many-row call sums in the order of the same row alone.
  bool single_rows = false;
  // Each block copies its input rows into shared memory once, right after
  // its wait (and the norm weight before it, through L1 so an SM's blocks
  // share the fetch), instead of every warp loading each batch's pieces of
  // them as it multiplies; the residual-add epilogue reads the residual of
  // a warp's first unit right after the wait too. A warp that walks many
  // batches then never stalls on an input evicted from L1 by the weight
  // stream. The sums are the same, in the same order (same bits).
  // launch_gemv clears it where the rows need more than
  // kGemvMaxStagedBytes (a wide or long step keeps its global loads, so
  // four blocks still fit an SM with L1 to spare) and for the rope epilogue
  // (q/k/v: measured slower staged, see gemv_stages_inputs).
  // H200, 1B batch 1 (traced, us a layer): gate/up 19.5 -> 16.4, the
  // lm_head 130 -> 123; q/k/v 4.0 -> 4.8 but its gap 1.4 -> 0.9; o equal;
  // down equal but its gap 0.5 -> 1.1. Staging only where a warp has more
  // than two batches, capping the rows at 15 KB with every GEMV on the same
  // shared-memory carveout, or copying through L2 only were each slower or
  // equal (bench/results/README.md, session 15).
  bool stage_inputs = false;
  // Calls run on tensor cores where gemv_uses_tensor_cores accepts them
  // (gemv_mma.cuh; 1..8 rows whose staged inputs fit): the same epilogues,
  // sums in another order, and with the norm prologue inputs of ~16 bits of
  // mantissa instead of float. Each row's bits are those of a one-row call.
  bool tensor_cores = false;
  // Tensor cores: warps a block, 8 or 16; 0 lets the kernel choose.
  std::int32_t mma_warps = 0;
  // out != nullptr: also take the argmax (m = 1, kStore, out_f32; see GemvArgmax).
  GemvArgmax argmax;
#if CELLM_KERNEL_TRACE
  std::int32_t trace_slot = -1;  // kernel_trace.cuh
#endif

  Status validate() const;
};

// A plain product over packed operands: a [m, k], w [n, k], out [m, n]
// (lda = ldw = k, ldc = n); callers set the rest.
inline GemvParams gemv_dense(const bf16* a, const bf16* w, void* out, std::int32_t m,
                             std::int32_t n, std::int32_t k) {
  GemvParams p;
  p.a = a;
  p.w = w;
  p.out = out;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = k;
  p.ldw = k;
  p.ldc = n;
  return p;
}

void launch_gemv(const GemvParams& params, cudaStream_t stream);

// Rows [first, first + rows) of a call as a call of their own: a and out
// (the residual too, which is out) and the rope epilogue's per-token arrays
// (q, k, v, cells, slots, positions) start at row `first`. launch_gemv runs
// 5..8 CUDA-core rows as two such slices.
GemvParams gemv_row_slice(const GemvParams& params, std::int32_t first, std::int32_t rows);

// The most blocks a launch_gemv grid has on this device (one wave).
std::int32_t gemv_max_blocks();

// Whether launch_gemv gives this call one-row units (see single_rows).
bool gemv_uses_single_rows(const GemvParams& params);

// Shared memory a block of this call takes to stage its inputs: its m input
// rows and, with the norm prologue, the norm weight.
std::int64_t gemv_staged_bytes(const GemvParams& params);
inline constexpr std::int64_t kGemvMaxStagedBytes = 16 * 1024;

// Whether launch_gemv stages this call's inputs (see stage_inputs): asked,
// not the rope epilogue, and at most kGemvMaxStagedBytes of rows.
bool gemv_stages_inputs(const GemvParams& params);

}  // namespace cellm::cuda
