// FP8 E4M3 (the OCP "E4M3FN" variant safetensors calls F8_E4M3): decoding to
// float32 and dequantization of a 2-D tensor of E4M3 codes with a grid of
// float scales (value = decoded code × scale of the code's block).
//
// E4M3FN has 1 sign, 4 exponent (bias 7) and 3 mantissa bits, no infinities,
// a single NaN pattern per sign (S.1111.111 = 0x7F / 0xFF), subnormals
// m × 2^-9 and a largest finite value of 448 (0x7E). Decoding is a lookup in
// a 256-entry table of exact float32 values.
//
// One scale layout covers every FP8 checkpoint format: a grid of
// [ceil(rows / block_rows), ceil(cols / block_cols)] scales. A per-tensor
// scale is one block of the whole tensor, per-channel (output row) scales are
// blocks of [1, cols], and fine-grained checkpoints use e.g. [128, 128]; edge
// blocks may be partial.
//
// Thread-safety: pure functions over immutable tables.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "cellm/status.h"
#include "core/tensor.h"

namespace cellm::format {

// The float32 value of every E4M3FN code, indexed by the code.
const std::array<float, 256>& e4m3_values();

inline float e4m3_to_f32(std::uint8_t code) {
  return e4m3_values()[code];
}

// The E4M3FN code nearest to `x`, ties to the even code (round to nearest
// even), exact for every float. Magnitudes beyond 448 (infinities included)
// saturate to ±448 (0x7E / 0xFE) rather than becoming NaN: the "satfinite"
// conversion of CUDA's __nv_cvt_float_to_fp8, so host-quantized weights
// match what a device conversion would give. NaN becomes 0x7F with x's sign
// bit; ±0 and values that round to zero keep their sign.
std::uint8_t f32_to_e4m3(float x);

// `codes` is a u8 [rows, cols] tensor of E4M3 codes; `scales` an f32, bf16 or
// f16 tensor of numel ceil(rows / block_rows) × ceil(cols / block_cols),
// row-major over the grid (its shape is the caller's business: [], [1],
// [rows, 1] and [gr, gc] all qualify). Returns an f32 or bf16 [rows, cols]
// tensor holding e4m3_to_f32(code) × float(scale), the product rounded once
// to f32 (then to bf16 when asked). `what` names the tensor in errors.
Result<Tensor> dequantize_e4m3(const Tensor& codes, const Tensor& scales, std::int64_t block_rows,
                               std::int64_t block_cols, DType out_dtype, std::string_view what);

}  // namespace cellm::format
