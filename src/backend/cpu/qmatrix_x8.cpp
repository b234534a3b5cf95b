#include "backend/cpu/qmatrix_x8.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/qmatrix.h"
#include "core/check.h"

namespace cellm::cpu {
namespace {

using format::GgmlType;

// Element e (0..31) of a 32-element block as the unsigned quant the x8
// kernels multiply (value = d * q + offset).
std::uint8_t quant(GgmlType type, const std::uint8_t* block, int e) {
  switch (type) {
    case GgmlType::kQ4_0: {
      const auto& b = *reinterpret_cast<const BlockQ4_0*>(block);
      return e < 16 ? b.qs[e] & 0xF : b.qs[e - 16] >> 4;
    }
    case GgmlType::kQ4_1: {
      const auto& b = *reinterpret_cast<const BlockQ4_1*>(block);
      return e < 16 ? b.qs[e] & 0xF : b.qs[e - 16] >> 4;
    }
    case GgmlType::kQ5_0: {
      const auto& b = *reinterpret_cast<const BlockQ5_0*>(block);
      std::uint32_t qh;
      std::memcpy(&qh, b.qh, 4);
      const int lo = e < 16 ? b.qs[e] & 0xF : b.qs[e - 16] >> 4;
      return static_cast<std::uint8_t>(lo | (((qh >> e) & 1u) << 4));
    }
    case GgmlType::kQ8_0: {
      const auto& b = *reinterpret_cast<const BlockQ8_0*>(block);
      return static_cast<std::uint8_t>(static_cast<int>(b.qs[e]) + 128);
    }
    default: CELLM_CHECK(false, "no x8 layout for {}", format::ggml_type_name(type));
  }
  return 0;
}

std::size_t source_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return sizeof(BlockQ4_0);
    case GgmlType::kQ4_1: return sizeof(BlockQ4_1);
    case GgmlType::kQ5_0: return sizeof(BlockQ5_0);
    default: return sizeof(BlockQ8_0);
  }
}

// Writes one group block: `src[r]` is row r's block.
void pack_group_block(GgmlType type, const std::uint8_t* const* src, std::uint8_t* out) {
  std::uint8_t* p = out;
  for (int r = 0; r < kX8Rows; ++r) std::memcpy(p + 2 * r, src[r], 2);  // d is each block's first field
  p += 16;
  if (type == GgmlType::kQ4_1) {
    for (int r = 0; r < kX8Rows; ++r) std::memcpy(p + 2 * r, src[r] + 2, 2);  // m follows d
    p += 16;
  }
  if (type == GgmlType::kQ8_0) {
    for (int g = 0; g < 8; ++g) {
      for (int r = 0; r < kX8Rows; ++r) {
        for (int k = 0; k < 4; ++k) p[32 * g + 4 * r + k] = quant(type, src[r], 4 * g + k);
      }
    }
    return;
  }
  for (int g = 0; g < 4; ++g) {
    for (int r = 0; r < kX8Rows; ++r) {
      for (int k = 0; k < 4; ++k) {
        const int lo = quant(type, src[r], 4 * g + k) & 0xF;
        const int hi = quant(type, src[r], 4 * (g + 4) + k) & 0xF;
        p[32 * g + 4 * r + k] = static_cast<std::uint8_t>(lo | (hi << 4));
      }
    }
  }
  if (type == GgmlType::kQ5_0) {
    p += 128;
    for (int r = 0; r < kX8Rows; ++r) {
      for (int k = 0; k < 4; ++k) {
        std::uint8_t bits = 0;
        for (int g = 0; g < 8; ++g) {
          bits = static_cast<std::uint8_t>(bits | (((quant(type, src[r], 4 * g + k) >> 4) & 1) << g));
        }
        p[4 * r + k] = bits;
      }
    }
  }
}

}  // namespace

bool x8_type(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 ||
         type == GgmlType::kQ8_0;
}

std::size_t x8_group_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return 16 + 128;
    case GgmlType::kQ4_1: return 32 + 128;
    case GgmlType::kQ5_0: return 16 + 128 + 32;
    case GgmlType::kQ8_0: return 16 + 256;
    default: return 0;
  }
}

std::vector<std::uint8_t> repack_x8(GgmlType type, const std::uint8_t* data, std::int64_t rows,
                                    std::int64_t cols, std::size_t row_bytes) {
  CELLM_CHECK(x8_type(type) && rows % kX8Rows == 0 && cols % 32 == 0,
              "repack_x8: {} rows of {} {} columns", rows, cols, format::ggml_type_name(type));
  const std::int64_t blocks = cols / 32;
  const std::size_t gb = x8_group_block_bytes(type);
  const std::size_t sb = source_block_bytes(type);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows / kX8Rows * blocks) * gb);
  for (std::int64_t g = 0; g < rows / kX8Rows; ++g) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::uint8_t* src[kX8Rows];
      for (int r = 0; r < kX8Rows; ++r) {
        src[r] = data + static_cast<std::size_t>(g * kX8Rows + r) * row_bytes +
                 static_cast<std::size_t>(b) * sb;
      }
      pack_group_block(type, src, out.data() + static_cast<std::size_t>(g * blocks + b) * gb);
    }
  }
  return out;
}

void qgemm_x8_slice(const QMatrix& w, const QuantActs& act, float* y, std::int64_t y_stride,
                    int part, int parts) {
  using Kernel = void (*)(const std::uint8_t*, std::int64_t, const std::uint8_t* const*, int,
                          float*);
  Kernel kernel = nullptr;
  switch (w.type) {
    case GgmlType::kQ4_0: kernel = avx2::x8_q4_0; break;
    case GgmlType::kQ4_1: kernel = avx2::x8_q4_1; break;
    case GgmlType::kQ5_0: kernel = avx2::x8_q5_0; break;
    case GgmlType::kQ8_0: kernel = avx2::x8_q8_0; break;
    default: CELLM_CHECK(false, "qgemm_x8: {}", format::ggml_type_name(w.type));
  }
  const std::int64_t groups = w.rows / kX8Rows;
  const std::int64_t blocks = w.cols / 32;
  const std::int64_t per = (groups + parts - 1) / parts;
  const std::int64_t g0 = std::min(groups, per * part);
  const std::int64_t g1 = std::min(groups, g0 + per);
  // A few groups' weights stay in cache while every activation tile passes.
  constexpr std::int64_t kGroupBlock = 4;
  float out[kTile * kX8Rows];
  for (std::int64_t gb = g0; gb < g1; gb += kGroupBlock) {
    const std::int64_t ge = std::min(g1, gb + kGroupBlock);
    for (std::int64_t i = 0; i < act.t; i += kTile) {
      const int n = static_cast<int>(std::min<std::int64_t>(kTile, act.t - i));
      const std::uint8_t* acts[kTile];
      for (int k = 0; k < n; ++k) acts[k] = act.row(i + k);
      for (std::int64_t g = gb; g < ge; ++g) {
        kernel(w.data + static_cast<std::size_t>(g) * w.group_bytes, blocks, acts, n, out);
        for (int k = 0; k < n; ++k) {
          std::memcpy(y + (i + k) * y_stride + g * kX8Rows, out + k * kX8Rows,
                      sizeof(float) * kX8Rows);
        }
      }
    }
  }
}

}  // namespace cellm::cpu
