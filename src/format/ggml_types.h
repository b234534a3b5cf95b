// GGML tensor element types as GGUF files number them, their block geometry,
// and dequantization of the supported ones (F32, F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) to f32 or bf16. The arithmetic follows the
// order of the reference dequantizers (scale products first, then the quant), in f32 without fused
// multiply-add, so results are bit-identical to them.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "cellm/status.h"

namespace cellm::format {

enum class GgmlType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;      // "Q4_K"
  std::uint32_t block_elems;  // elements per block (1 for plain types)
  std::uint32_t block_bytes;  // bytes per block
  bool dequantizable;         // cellm can turn it into floats
};

// Geometry of a raw type id from a file; nullopt for ids cellm does not know.
std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t raw_type);
std::string_view ggml_type_name(GgmlType type);

// Decodes `src` (whole blocks of `type`) into `dst`, which must hold exactly
// the blocks' element count. NotSupported for types cellm cannot decode,
// InvalidArgument when the sizes disagree.
Status dequantize_f32(GgmlType type, std::span<const std::uint8_t> src, std::span<float> dst);
// The same, rounded to bf16 (round-to-nearest-even) as raw bits.
Status dequantize_bf16(GgmlType type, std::span<const std::uint8_t> src,
                       std::span<std::uint16_t> dst);

}  // namespace cellm::format
