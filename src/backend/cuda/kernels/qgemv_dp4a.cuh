// The quantized decode GEMV on int8 dot products (issue 38): the activation
// rows are quantized to int8 in blocks of 32 (launch_quantize_q8), and the
// GGUF weight codes are multiplied with them four at a time by __dp4a, the
// block scales applied once per 32 weights (16 for Q6_K) instead of once per
// weight. Same product and output contract as launch_qgemv (qgemv.cuh:
// out[m, n] = a[m, k] @ dequant(w)[n, k]^T, bias, bf16 or float out, ldc,
// pdl), up to the int8 rounding of the activations (a relative error of
// about 1/254 of each 32-block's largest value).
//
// Why: launch_qgemv converts every weight to float and spends a float FMA on
// it per activation row; at batch 1 an 8B Q4_K_M step runs at 42% of the
// weight roofline, bound by instructions. Here a weight costs about a
// quarter of an integer instruction per activation row (plus its share of
// the unpacking), and the float scale math runs once per sub-block.
//
// NOT WIRED INTO CudaForward: the lead dispatches it once GPU measurements
// (backend_cuda_bench --benchmark_filter=QGemvDp4a) show where it wins.
// Built here; not yet run on a GPU.
//
// Types: Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K and Q6_K_R8 (qgemv_dp4a_supported).
// Every sum of a row is formed in the same order whatever m is: row r of an
// m-row call equals the one-row call bit for bit, and a rerun gives the same
// bits.
//
// Thread-safety: the launch functions are reentrant; params are plain
// values. The activation scratch belongs to one stream at a time.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/kernels/qgemv.cuh"

namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

// Activation rows as int8: row r's 32-block b is codes q[r * ldq + 32 b ..]
// (int8), scale d[r * lds + b] (max |x| / 127) and s[r * lds + b] = d times
// the block's sum of codes (the term the Q4_1 / Q4_K / Q5_K minimums and
// Q4_0's offset of 8 multiply). Codes, scales and sums are separate arrays
// so that a lane reads its unit's 32 or 64 codes and 2 or 4 scales with
// 16-byte (or 8-byte) loads.
struct Q8Rows {
  std::int8_t* q = nullptr;
  float* d = nullptr;
  float* s = nullptr;
  std::int32_t m = 0;    // rows the scratch holds
  std::int32_t k = 0;    // columns, a multiple of 32
  std::int64_t ldq = 0;  // bytes; a multiple of 16
  std::int64_t lds = 0;  // floats; a multiple of 4
};

// Bytes of scratch for m rows of k columns, and the rows laid out in it
// (scratch 16-byte aligned, at least q8_rows_bytes(m, k) bytes).
std::size_t q8_rows_bytes(std::int32_t m, std::int32_t k);
Q8Rows q8_rows_in(void* scratch, std::int32_t m, std::int32_t k);

// a[m, k] bf16 -> out. Deterministic: a block's scale is its largest
// magnitude (exact), codes are rint(x * (127 / max)) (round half to even),
// sums are integers.
struct QuantizeQ8Params {
  const bf16* a = nullptr;  // 16-byte aligned
  std::int64_t lda = 0;     // a multiple of 8
  std::int32_t m = 0;       // 1..out.m
  std::int32_t k = 0;       // a multiple of 32, at most out.k
  Q8Rows out;
  bool pdl = false;  // waits before it reads `a`

  Status validate() const;
};
void launch_quantize_q8(const QuantizeQ8Params& p, cudaStream_t stream);

// Whether the int8 path decodes `type`.
bool qgemv_dp4a_supported(QuantType type);

// Checks p as QGemvParams::validate does, that the type is one the int8
// path decodes, and that `act` holds p.m rows of p.k columns away from `out`.
Status validate_qgemv_dp4a(const QGemvParams& p, const Q8Rows& act);

// Quantizes p.a into `act` (p.pdl applies to this first kernel), then runs
// the GEMV, launched with PDL so that it streams its first weights while the
// quantization runs. Two kernels; one call per projection.
void launch_qgemv_dp4a(const QGemvParams& p, const Q8Rows& act, cudaStream_t stream);

// The GEMV alone, on rows already in `act` (several projections of the same
// input, q/k/v or gate/up, share one quantization); p.a is not read.
void launch_qgemv_dp4a_quantized(const QGemvParams& p, const Q8Rows& act, cudaStream_t stream);

}  // namespace cellm::cuda
