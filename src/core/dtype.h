// Element types and the conversions between the 16-bit float formats and
// float32 (round-to-nearest-even, NaN preserved). Host-only.
//
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cellm/status.h"

namespace cellm {

// kF8E4M3: one byte, the OCP E4M3FN code (format/fp8.h decodes it). Only the
// CUDA KV pool stores it today (`--kv-dtype fp8`); checkpoints' FP8 tensors
// load as kU8 codes with their scales beside them.
enum class DType : std::uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kF8E4M3 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ..., "fp8" (E4M3)
Result<DType> parse_dtype(std::string_view name);
// The K/V element types a program may be asked for (`--kv-dtype`): "bf16",
// "fp8" (E4M3; also "f8e4m3") and "f32". Any other name is refused with the
// accepted ones named. Which backend takes which is the executor factory's
// business (app/executor_factory.cpp).
Result<DType> parse_kv_dtype(std::string_view name);

inline float bf16_to_f32(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

inline std::uint16_t f32_to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);  // keep NaN quiet
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(std::uint16_t bits);
std::uint16_t f32_to_f16(float value);

}  // namespace cellm
