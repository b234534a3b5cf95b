// The GEMV on tensor cores (GemvParams::tensor_cores): the same products
// and epilogues as gemv.cu's CUDA-core kernel, for 1..8 rows, with each warp
// feeding its weight pieces to m16n8k16 mma instructions instead of
// unpacking them into float FMAs.
//
// Why: at batch 1 a GEMV's time after its wait is the issue latency of its
// warps' instructions (ncu on the H200, 1B: ~1,160 instructions a warp for
// the o projection at 5-7 cycles each), and the CUDA-core loop spends ~40
// instructions on each kilobyte of weights (bf16 unpacks and FMAs). An mma
// takes 16 rows x 16 columns of bf16 straight from the registers the loads
// filled, ~7 instructions a kilobyte. Measured (H200, batch 1, ctx 512, 1B,
// traced, us a layer): o 4.37 -> 2.34-2.78, down 11.15 -> 8.29-9.25. Long
// walks lose: gate/up and the lm_head walk 4-31 groups a block, and 8B's
// gate/up took 60.4 us against 56.8 (bench/results/README.md, sessions 20-21).
//
// Layout. A group is an mma tile's 16 rows: lane row g (0..7) of the tile
// takes weight row "a" and row g + 8 takes its partner "b" (gate and up of
// one column, the two halves of a rope pair, or two adjacent columns). A
// lane (g, t = lane % 4) loads 16 bytes of rows a and b at k = 8t.. of each
// 32-value step; the tile's k order is a permutation of memory order that
// depends on t only, and the input fragment is loaded with the same
// permutation, so every output column of the tile holds the same dot
// products. The warps of a block split k and add their partial sums in
// shared memory in a fixed order (same bits on every run), once, after the
// warps' whole walks, so no warp waits on another while they stream.
// Inputs: the rows are staged in shared memory; with the norm prologue each
// input is x * (norm weight + offset) split into a bf16 high part and a bf16
// low part (two mmas), ~16 bits of mantissa against the CUDA-core kernel's
// float, and the sum is scaled by 1/rms at the end as there.
// Rows: input row r is column r of the mma's B operand (one-row calls used
// column 0 only), so m rows cost the weight traffic of one. Nothing but the
// B column depends on m, so row r's outputs are the bits of a one-row call
// on that row (gemv_mma_kernel.cuh). What grows with m is shared memory:
// the staged rows (twice over with the norm) and the partial sums.
//
// Thread-safety: launch_gemv_mma is reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/kernels/gemv.cuh"

namespace cellm::cuda {

// Whether launch_gemv runs this call on tensor cores: asked
// (params.tensor_cores), 1..kGemvMmaMaxRows rows, a rope epilogue only for
// heads of a multiple of 16, and gemv_mma_smem_bytes within
// gemv_mma_max_smem_bytes (else the CUDA-core kernel runs it).
bool gemv_uses_tensor_cores(const GemvParams& params);
// One-row calls keep the 48 KB they were measured with (blocks of several
// projections then share an SM). A many-row call may take up to what a
// block can opt into: it reads its weights once for all rows, and on CUDA
// cores instead each further row costs nearly a whole pass (H100, 1B's
// down at 4 rows: 25.1 us on CUDA cores, 16.3 on cuBLASLt, against 12.4 on
// tensor cores at 1 row; bench/results, session 33).
inline constexpr std::int64_t kGemvMmaMaxSharedBytes = 48 * 1024;
std::int64_t gemv_mma_max_smem_bytes(std::int32_t m);
inline constexpr int kGemvMmaMaxRows = 8;  // the mma's B columns

// Shared memory a block of this call takes: the staged rows (with the norm
// prologue their high and low parts and the norm weight), each row's sums
// of squares and the partial sums of the block's groups for every row.
std::int64_t gemv_mma_smem_bytes(const GemvParams& params);

// How many groups (16-row tiles) one block of the call walks, one after the
// other (not a function of m). The forward keeps projections whose walk is
// longer than kGemvMmaMaxRounds on CUDA cores: a block's warps add their
// partials once their whole walk is done, and long walks lose (H200, batch 1, chained:
// gate/up on tensor cores, 4 rounds at 1B and 2 at Qwen3-0.6B, ran 0.802-
// 0.803 against 0.806-0.809 ms/step and 0.801-0.804 against 0.823-0.827; 7 at
// 8B ran 4.293 against 4.005; the lm_head walks 31).
int gemv_mma_rounds(const GemvParams& params);
inline constexpr int kGemvMmaMaxRounds = 4;

// Runs a call gemv_uses_tensor_cores accepts (launch_gemv's dispatch).
void launch_gemv_mma(const GemvParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
