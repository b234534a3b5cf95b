// The quantized decode GEMV on tensor cores (issue 38): the product of
// qgemv.cuh (out[m, n] = a[m, k] @ dequant(w)[n, k]^T, m <= kQGemvMaxRows,
// the same QGemvParams) with the weights decoded to bf16 in registers and fed
// to m16n8k16 mma instructions instead of float FMAs.
//
// Why: the CUDA-core kernels (qgemv.cu, qgemv_wide.cu) spend a multiply-add
// per weight and activation row on top of the decode, so a step's time grows
// with its rows (H100, 8B Q4_K_M: 3.655 ms at 1 row, 13.97 at 8; bf16 6.88).
// Here input row r is column r of the mma's B operand, as in gemv_mma.cuh:
// every weight is read and decoded once, whatever m, and one mma multiplies
// 16 weight rows by all eight B columns.
//
// Values: each weight is decoded by the block decoders of quant_blocks.h
// (FP8 times its scale) and rounded to bf16, the values launch_dequantize
// writes, so an output is a bf16 GEMM's over the dequantized matrix up to the
// order of the float sums.
//
// Rows: nothing the kernel does depends on m except which B columns are live
// (the split of k, the warps' walks and the order partial sums are added in
// come from n and k), so row r of an m-row call has the bits of a one-row
// call on that row (qgemv_mma_test.cpp checks it).
//
// Thread-safety: launch_qgemv_mma is reentrant; params are plain values.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/kernels/qgemv.cuh"

namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

// The longest k the kernel takes: a block stages its share of the input rows
// (k split over at most eight blocks of a cluster) in shared memory.
inline constexpr int kQGemvMmaMaxK = 49152;

// QGemvParams::validate() and the kernel's own limit (k <= kQGemvMmaMaxK).
Status validate_qgemv_mma(const QGemvParams& params);

// Runs a call validate_qgemv_mma accepts.
void launch_qgemv_mma(const QGemvParams& params, cudaStream_t stream);

// Which kernel a call may take, in one place: tensor cores for 2..8 rows
// (where each further row costs the CUDA-core kernels nearly a pass), the
// CUDA-core kernels for one row until the GPU says the mma kernel is as fast
// there. The forward asks only when CELLM_GEMV_MMA has "quant" (a live
// experiment until the kernel's GPU tests and benchmark have run).
bool qgemv_on_tensor_cores(const QGemvParams& params);

}  // namespace cellm::cuda
