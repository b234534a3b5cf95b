#include "format/fp8.h"

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

namespace cellm::format {
namespace {

// 2^e for small |e|, by repeated multiplication (exact, constexpr).
constexpr float pow2(int e) {
  float v = 1.0f;
  for (; e > 0; --e) v *= 2.0f;
  for (; e < 0; ++e) v *= 0.5f;
  return v;
}

constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (int code = 0; code < 256; ++code) {
    const int exp = (code >> 3) & 0xF;
    const int mant = code & 0x7;
    float mag;
    if (exp == 0xF && mant == 0x7) {
      mag = std::numeric_limits<float>::quiet_NaN();  // E4M3FN's only non-finite code
    } else if (exp == 0) {
      mag = static_cast<float>(mant) * pow2(-9);  // subnormal: m/8 × 2^(1-7)
    } else {
      mag = (1.0f + static_cast<float>(mant) / 8.0f) * pow2(exp - 7);
    }
    t[static_cast<std::size_t>(code)] = (code & 0x80) != 0 ? -mag : mag;
  }
  return t;
}

constexpr std::array<float, 256> kE4M3 = make_e4m3_table();

}  // namespace

const std::array<float, 256>& e4m3_values() {
  return kE4M3;
}

std::uint8_t f32_to_e4m3(float x) {
  const auto sign = static_cast<std::uint8_t>((std::bit_cast<std::uint32_t>(x) >> 24) & 0x80u);
  const float a = std::fabs(x);
  if (std::isnan(a)) return static_cast<std::uint8_t>(sign | 0x7F);
  if (a > 448.0f) return static_cast<std::uint8_t>(sign | 0x7E);  // satfinite
  // E4M3 values are integer multiples of a quantum: 2^-9 below the smallest
  // normal 2^-6 (subnormals and the first binade share it), else 2^(E-3) in
  // the binade [2^E, 2^(E+1)). Scaling by a power of two is exact in float,
  // so q holds a / quantum exactly, and so does its fractional part.
  int e = 0;
  int quantum_exp = -9;
  if (a >= 0x1p-6f) {
    (void)std::frexp(a, &e);  // a = m × 2^e, m in [0.5, 1): the binade is E = e - 1
    quantum_exp = e - 1 - 3;
  }
  const float q = std::ldexp(a, -quantum_exp);  // in [0, 16)
  const auto whole = static_cast<std::uint32_t>(q);
  const float frac = q - static_cast<float>(whole);
  std::uint32_t n = whole;
  if (frac > 0.5f || (frac == 0.5f && (whole & 1u) != 0)) ++n;  // nearest, ties to even
  std::uint32_t code = 0;
  if (quantum_exp == -9) {
    code = n;  // subnormal m × 2^-9; n = 8 is the smallest normal, code 0x08, and so on
  } else {
    // Normal: n in [8, 16]; 16 carries into the next binade's exponent field.
    code = (static_cast<std::uint32_t>(e - 1 + 7) << 3) + (n - 8);
  }
  if (code > 0x7Eu) code = 0x7Eu;  // (448, 464] would round to 480: saturate
  return static_cast<std::uint8_t>(sign | code);
}

Result<Tensor> dequantize_e4m3(const Tensor& codes, const Tensor& scales, std::int64_t block_rows,
                               std::int64_t block_cols, DType out_dtype, std::string_view what) {
  if (codes.dtype() != DType::kU8 || codes.rank() != 2 || codes.device() != Device::kCpu) {
    return invalid_argument("{}: FP8 codes must be a 2-D host u8 tensor, not {}", what,
                            codes.describe());
  }
  if (scales.device() != Device::kCpu ||
      (scales.dtype() != DType::kF32 && scales.dtype() != DType::kBF16 &&
       scales.dtype() != DType::kF16)) {
    return invalid_argument("{}: scales must be a host f32, bf16 or f16 tensor, not {}", what,
                            scales.describe());
  }
  if (out_dtype != DType::kF32 && out_dtype != DType::kBF16) {
    return invalid_argument("{}: FP8 weights dequantize to f32 or bf16, not {}", what,
                            dtype_name(out_dtype));
  }
  if (block_rows <= 0 || block_cols <= 0) {
    return invalid_argument("{}: scale block [{}, {}] must be positive", what, block_rows,
                            block_cols);
  }
  const std::int64_t rows = codes.dim(0);
  const std::int64_t cols = codes.dim(1);
  const std::int64_t grid_rows = (rows + block_rows - 1) / block_rows;
  const std::int64_t grid_cols = (cols + block_cols - 1) / block_cols;
  if (scales.numel() != grid_rows * grid_cols) {
    return invalid_argument("{}: {} scales for a [{}, {}] grid of [{}, {}] blocks", what,
                            scales.numel(), grid_rows, grid_cols, block_rows, block_cols);
  }
  std::vector<float> grid(static_cast<std::size_t>(scales.numel()));
  for (std::int64_t i = 0; i < scales.numel(); ++i) {
    grid[static_cast<std::size_t>(i)] = element_as_f32(scales, i);
  }
  Tensor out = Tensor::empty(out_dtype, {rows, cols});
  const auto* src = static_cast<const std::uint8_t*>(codes.data());
  const bool f32 = out_dtype == DType::kF32;
  float* dst32 = f32 ? out.data_as<float>() : nullptr;
  std::uint16_t* dst16 = f32 ? nullptr : out.data_as<std::uint16_t>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* scale_row = grid.data() + (r / block_rows) * grid_cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = r * cols + c;
      const float v = kE4M3[src[i]] * scale_row[c / block_cols];
      if (f32) {
        dst32[i] = v;
      } else {
        dst16[i] = f32_to_bf16(v);
      }
    }
  }
  return out;
}

}  // namespace cellm::format
