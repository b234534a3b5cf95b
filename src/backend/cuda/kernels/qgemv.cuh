// Decode-width GEMV over GGUF block-quantized weights:
// out[m, n] = a[m, k] @ dequant(w)[n, k]^T, m <= kQGemvMaxRows, bf16
// activations, float accumulation, bf16 or float output.
//
// The weights stay in the blocks a GGUF file stores (each of the n rows is
// k / block_elems blocks, rows ldw_bytes apart) and are dequantized in
// registers as they stream in, so a decode step reads 4.5 (Q4_K) to 8.5
// (Q8_0) bits per weight instead of the 16 of the bf16 copy that loading
// inflates them to today. This is the first piece of the quantized GPU path
// (issue 38): the kernel and its tests; the forward still runs bf16.
//
// Each warp owns two output rows and walks them in groups of 256 weights (a
// K-quant super-block, or eight 32-weight blocks): a lane decodes 8 weights
// of each row per group and multiplies them with the activations at the same
// positions, so one weight load serves every activation row. Four groups are
// loaded before any is multiplied, to keep enough bytes in flight.
// Sums are reduced in a fixed order: the same inputs give the same bits.
// qgemv_mma.cuh multiplies the same params on tensor cores (the forward's
// steps of 2..8 rows when CELLM_GEMV_MMA has "quant": qgemv_on_tensor_cores).
//
// Thread-safety: launch_qgemv is reentrant; params are plain values.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"

namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

inline constexpr int kQGemvMaxRows = 8;

// The block types the kernel decodes (kernels/quant_blocks.h), numbered as
// GGUF numbers them; FP8 E4M3 rows (bare codes, scales beside them) take a
// number past GGUF's, and so does kQ6_K_R8: Q6_K rows the upload repacked in
// groups of eight blocks for 16-byte loads (kernels/quant_blocks_q6r8.h; k
// a multiple of 2048, a row k / 2048 groups of 1680 bytes). One-row steps of
// kQ6_K_R8 rows on 16-byte boundaries run a wide-load kernel; the rest the
// generic one.
enum class QuantType : std::int32_t {
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_XS = 23,
  kF8_E4M3 = 1000,
  kQ6_K_R8 = 1014  // 1000 + Q6_K's GGUF number
};

// Scales beside the rows, for the types whose blocks hold none (kF8_E4M3):
// weight (r, c) is multiplied by scales[r * ld + c / cols] (r counted from
// the first row the launch covers). `cols` is a multiple of 8, so that a
// lane's 8 consecutive weights share one scale.
struct RowScales {
  const float* scales = nullptr;
  std::int32_t cols = 0;
  std::int64_t ld = 0;
};

// Elements and bytes of one block of `type` (32 or 256 elements; 2048 and
// 1680 for a kQ6_K_R8 group).
int quant_block_elems(QuantType type);
int quant_block_bytes(QuantType type);
// Whether `raw` is a QuantType the kernels decode (a GGUF type id, or one
// of the numbers past GGUF's).
bool quant_type_supported(std::uint32_t raw);

struct QGemvParams {
  const bf16* a = nullptr;  // [m, lda], first k columns; 16-byte aligned
  const void* w = nullptr;  // n rows of k / block_elems blocks, ldw_bytes apart
  QuantType type = QuantType::kQ8_0;
  const bf16* bias = nullptr;  // [n] or null, added to the float sum
  void* out = nullptr;         // [m, ldc]: bf16, or float when out_f32
  bool out_f32 = false;
  std::int32_t m = 0;  // 1..kQGemvMaxRows
  std::int32_t n = 0;
  std::int32_t k = 0;  // a multiple of the block's elements
  std::int64_t lda = 0;
  std::int64_t ldw_bytes = 0;  // at least k / block_elems * block_bytes; even
  std::int64_t ldc = 0;
  RowScales scales;  // kF8_E4M3 only
  // Programmatic dependent launch (launch.h): the kernel waits before it
  // reads `a`.
  bool pdl = false;

  Status validate() const;
};

void launch_qgemv(const QGemvParams& params, cudaStream_t stream);

// Writes the blocks of `rows` weight rows as bf16: out[r, c] for c < cols,
// rows ldo elements apart (prefill and wide steps multiply the result with
// cuBLASLt). The values are the ones the GEMV multiplies, rounded to bf16.
struct DequantParams {
  const void* w = nullptr;
  QuantType type = QuantType::kQ8_0;
  std::int64_t rows = 0;
  std::int32_t cols = 0;  // a multiple of the block's elements
  std::int64_t ldw_bytes = 0;
  bf16* out = nullptr;   // 16-byte aligned
  std::int64_t ldo = 0;  // a multiple of 8
  RowScales scales;      // kF8_E4M3 only

  Status validate() const;
};
void launch_dequantize(const DequantParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
