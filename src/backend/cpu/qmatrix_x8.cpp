#include "backend/cpu/qmatrix_x8.h"

#include <algorithm>
#include <cstddef>
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
    case GgmlType::kQ4_K: return sizeof(BlockQ4_K);
    case GgmlType::kQ6_K: return sizeof(BlockQ6_K);
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

// Element e (0..255) of a K block as its unsigned quant: Q4_K's nibble,
// Q6_K's six bits (value = d * scale * (q - 32)).
int k_quant(GgmlType type, const std::uint8_t* block, int e) {
  if (type == GgmlType::kQ4_K) {
    const auto& b = *reinterpret_cast<const BlockQ4_K*>(block);
    const int within = e % 64;
    const std::uint8_t byte = b.qs[32 * (e / 64) + within % 32];
    return within < 32 ? byte & 0xF : byte >> 4;
  }
  const auto& b = *reinterpret_cast<const BlockQ6_K*>(block);
  const int l = e % 128, quarter = l / 32, p = l % 32;
  const std::uint8_t* ql = b.ql + 64 * (e / 128);
  const std::uint8_t* qh = b.qh + 32 * (e / 128);
  // Quarters 0 and 2 share ql[p], 1 and 3 share ql[p + 32] (low, high nibble).
  const std::uint8_t byte = quarter % 2 == 0 ? ql[p] : ql[p + 32];
  const int nib = quarter < 2 ? byte & 0xF : byte >> 4;
  return nib | (((qh[p] >> (2 * quarter)) & 3) << 4);
}

// One K group block (layouts in qgemm_x8k_vnni.cpp): `src[r]` is row r's block.
void pack_k_group_block(GgmlType type, const std::uint8_t* const* src, std::uint8_t* out) {
  std::uint8_t* p = out;
  const bool q4k = type == GgmlType::kQ4_K;
  // d (both) and dmin (Q4_K) lead their blocks in Q4_K; Q6_K keeps d last.
  for (int r = 0; r < kX8Rows; ++r) {
    std::memcpy(p + 2 * r, q4k ? src[r] : src[r] + offsetof(BlockQ6_K, d), 2);
  }
  p += 16;
  if (q4k) {
    for (int r = 0; r < kX8Rows; ++r) std::memcpy(p + 2 * r, src[r] + 2, 2);
    p += 16;
    for (int s = 0; s < 8; ++s) {
      for (int r = 0; r < kX8Rows; ++r) {
        std::int32_t sc, m;
        k_scale_min(s, reinterpret_cast<const BlockQ4_K*>(src[r])->scales, &sc, &m);
        p[8 * s + r] = static_cast<std::uint8_t>(sc);
        p[64 + 8 * s + r] = static_cast<std::uint8_t>(m);
      }
    }
    p += 128;
  } else {
    for (int s = 0; s < 16; ++s) {
      for (int r = 0; r < kX8Rows; ++r) {
        p[8 * s + r] = static_cast<std::uint8_t>(reinterpret_cast<const BlockQ6_K*>(src[r])->scales[s]);
      }
    }
    p += 128;
  }
  // Nibbles: chunk j, vector g, byte 4r + k: element 64j + 4g + k low,
  // element 64j + 32 + 4g + k high.
  for (int j = 0; j < 4; ++j) {
    for (int g = 0; g < 8; ++g) {
      for (int r = 0; r < kX8Rows; ++r) {
        for (int k = 0; k < 4; ++k) {
          const int lo = k_quant(type, src[r], 64 * j + 4 * g + k) & 0xF;
          const int hi = k_quant(type, src[r], 64 * j + 32 + 4 * g + k) & 0xF;
          p[32 * (8 * j + g) + 4 * r + k] = static_cast<std::uint8_t>(lo | (hi << 4));
        }
      }
    }
  }
  if (q4k) return;
  p += 1024;
  // Q6_K's high two bits: chunk j, vector h, byte 4r + k, bits 2t..2t+1:
  // element 64j + 4(4h + t) + k.
  for (int j = 0; j < 4; ++j) {
    for (int h = 0; h < 4; ++h) {
      for (int r = 0; r < kX8Rows; ++r) {
        for (int k = 0; k < 4; ++k) {
          int bits = 0;
          for (int t = 0; t < 4; ++t) bits |= (k_quant(type, src[r], 64 * j + 4 * (4 * h + t) + k) >> 4) << (2 * t);
          p[32 * (4 * j + h) + 4 * r + k] = static_cast<std::uint8_t>(bits);
        }
      }
    }
  }
}

bool k_type(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ6_K;
}

}  // namespace

bool x8_type(GgmlType type) {
  return type == GgmlType::kQ4_0 || type == GgmlType::kQ4_1 || type == GgmlType::kQ5_0 ||
         type == GgmlType::kQ8_0 || k_type(type);
}

std::size_t x8_group_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return 16 + 128;
    case GgmlType::kQ4_1: return 32 + 128;
    case GgmlType::kQ5_0: return 16 + 128 + 32;
    case GgmlType::kQ8_0: return 16 + 256;
    case GgmlType::kQ4_K: return 32 + 128 + 1024;
    case GgmlType::kQ6_K: return 16 + 128 + 1024 + 512;
    default: return 0;
  }
}

std::vector<std::uint8_t> repack_x8(GgmlType type, const std::uint8_t* data, std::int64_t rows,
                                    std::int64_t cols, std::size_t row_bytes) {
  const std::int64_t elems = k_type(type) ? 256 : 32;
  CELLM_CHECK(x8_type(type) && rows % kX8Rows == 0 && cols % elems == 0,
              "repack_x8: {} rows of {} {} columns", rows, cols, format::ggml_type_name(type));
  const std::int64_t blocks = cols / elems;
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
      std::uint8_t* dst = out.data() + static_cast<std::size_t>(g * blocks + b) * gb;
      if (k_type(type)) {
        pack_k_group_block(type, src, dst);
      } else {
        pack_group_block(type, src, dst);
      }
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
    case GgmlType::kQ4_K: kernel = avx2::x8_q4_k; break;
    case GgmlType::kQ6_K: kernel = avx2::x8_q6_k; break;
    default: CELLM_CHECK(false, "qgemm_x8: {}", format::ggml_type_name(w.type));
  }
  const std::int64_t groups = w.rows / kX8Rows;
  const std::int64_t blocks = w.cols / (k_type(w.type) ? 256 : 32);
  const std::int64_t per = (groups + parts - 1) / parts;
  const std::int64_t g0 = std::min(groups, per * part);
  const std::int64_t g1 = std::min(groups, g0 + per);
  // A few groups' weights stay in cache while every activation tile passes.
  constexpr std::int64_t kGroupBlock = 4;
  float out[kX8MaxActs * kX8Rows];
  for (std::int64_t gb = g0; gb < g1; gb += kGroupBlock) {
    const std::int64_t ge = std::min(g1, gb + kGroupBlock);
    for (std::int64_t i = 0; i < act.t; i += kX8MaxActs) {
      const int n = static_cast<int>(std::min<std::int64_t>(kX8MaxActs, act.t - i));
      const std::uint8_t* acts[kX8MaxActs];
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
