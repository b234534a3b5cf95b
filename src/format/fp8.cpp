#include "format/fp8.h"

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
