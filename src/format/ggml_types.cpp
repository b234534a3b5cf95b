#include "format/ggml_types.h"

#include <array>
#include <cstring>
#include <vector>

#include "core/dtype.h"

namespace cellm::format {
namespace {

constexpr std::uint32_t kQK = 32;    // elements per legacy block
constexpr std::uint32_t kQKK = 256;  // elements per k-quant super-block

constexpr std::array kTypes = {
    GgmlTypeInfo{GgmlType::kF32, "F32", 1, 4, true},
    GgmlTypeInfo{GgmlType::kF16, "F16", 1, 2, true},
    GgmlTypeInfo{GgmlType::kQ4_0, "Q4_0", kQK, 18, true},
    GgmlTypeInfo{GgmlType::kQ4_1, "Q4_1", kQK, 20, true},
    GgmlTypeInfo{GgmlType::kQ5_0, "Q5_0", kQK, 22, true},
    GgmlTypeInfo{GgmlType::kQ5_1, "Q5_1", kQK, 24, true},
    GgmlTypeInfo{GgmlType::kQ8_0, "Q8_0", kQK, 34, true},
    GgmlTypeInfo{GgmlType::kQ8_1, "Q8_1", kQK, 36, false},
    GgmlTypeInfo{GgmlType::kQ2_K, "Q2_K", kQKK, 84, true},
    GgmlTypeInfo{GgmlType::kQ3_K, "Q3_K", kQKK, 110, true},
    GgmlTypeInfo{GgmlType::kQ4_K, "Q4_K", kQKK, 144, true},
    GgmlTypeInfo{GgmlType::kQ5_K, "Q5_K", kQKK, 176, true},
    GgmlTypeInfo{GgmlType::kQ6_K, "Q6_K", kQKK, 210, true},
    GgmlTypeInfo{GgmlType::kQ8_K, "Q8_K", kQKK, 292, false},
    GgmlTypeInfo{GgmlType::kIQ4_XS, "IQ4_XS", kQKK, 136, true},
    GgmlTypeInfo{GgmlType::kI8, "I8", 1, 1, false},
    GgmlTypeInfo{GgmlType::kI16, "I16", 1, 2, false},
    GgmlTypeInfo{GgmlType::kI32, "I32", 1, 4, false},
    GgmlTypeInfo{GgmlType::kI64, "I64", 1, 8, false},
    GgmlTypeInfo{GgmlType::kF64, "F64", 1, 8, false},
    GgmlTypeInfo{GgmlType::kBF16, "BF16", 1, 2, true},
};

inline float half_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(bits);
}

// Each decoder writes one block of `out` from one block of `b`.
void block_q4_0(const std::uint8_t* b, float* out) {
  const float d = half_at(b);
  const std::uint8_t* qs = b + 2;
  for (std::uint32_t j = 0; j < kQK / 2; ++j) {
    out[j] = d * static_cast<float>(static_cast<int>(qs[j] & 0x0F) - 8);
    out[j + kQK / 2] = d * static_cast<float>(static_cast<int>(qs[j] >> 4) - 8);
  }
}

void block_q4_1(const std::uint8_t* b, float* out) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  const std::uint8_t* qs = b + 4;
  for (std::uint32_t j = 0; j < kQK / 2; ++j) {
    out[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
    out[j + kQK / 2] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

void block_q5_0(const std::uint8_t* b, float* out) {
  const float d = half_at(b);
  std::uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const std::uint8_t* qs = b + 6;
  for (std::uint32_t j = 0; j < kQK / 2; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + kQK / 2)) & 1u) << 4);
    out[j] = d * static_cast<float>(lo - 16);
    out[j + kQK / 2] = d * static_cast<float>(hi - 16);
  }
}

void block_q5_1(const std::uint8_t* b, float* out) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  std::uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const std::uint8_t* qs = b + 8;
  for (std::uint32_t j = 0; j < kQK / 2; ++j) {
    const auto lo = static_cast<std::uint32_t>(qs[j] & 0x0F) | (((qh >> j) & 1u) << 4);
    const auto hi = static_cast<std::uint32_t>(qs[j] >> 4) | (((qh >> (j + kQK / 2)) & 1u) << 4);
    out[j] = d * static_cast<float>(lo) + m;
    out[j + kQK / 2] = d * static_cast<float>(hi) + m;
  }
}

void block_q8_0(const std::uint8_t* b, float* out) {
  const float d = half_at(b);
  for (std::uint32_t j = 0; j < kQK; ++j) {
    out[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
  }
}

// The 12 scale bytes of Q4_K/Q5_K pack eight 6-bit scales and eight 6-bit
// mins: sub-blocks 0-3 use the low six bits of bytes 0-3 (scales) and 4-7
// (mins); sub-blocks 4-7 take their low nibble from bytes 8-11 and their top
// two bits from the spare high bits of bytes 0-3 / 4-7.
void unpack_scale_min(const std::uint8_t* s, std::uint8_t* sc, std::uint8_t* mn) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    mn[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<std::uint8_t>((s[j + 8] & 0x0F) | ((s[j] >> 6) << 4));
    mn[j + 4] = static_cast<std::uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

// Q2_K {16 scale bytes (low nibble: scale, high: min); 64 bytes of 2-bit
// quants; f16 d, dmin}: element e = 128h + 32s + l (h half, s shift index,
// l < 32) is bits 2s..2s + 1 of qs[32h + l], scaled by scale byte e / 16.
void block_q2_k(const std::uint8_t* b, float* out) {
  const std::uint8_t* scales = b;
  const std::uint8_t* qs = b + 16;
  const float d = half_at(b + 80);
  const float dmin = half_at(b + 82);
  for (int e = 0; e < static_cast<int>(kQKK); ++e) {
    const int half = e / 128, s = (e % 128) / 32, l = e % 32;
    const std::uint8_t sc = scales[e / 16];
    const float dl = d * static_cast<float>(sc & 0x0F);
    const float ml = dmin * static_cast<float>(sc >> 4);
    const int q = (qs[32 * half + l] >> (2 * s)) & 3;
    out[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K {32 bytes hmask; 64 bytes of 2-bit quants; 12 bytes packing sixteen
// 6-bit scales; f16 d}: element e = 128h + 32s + l takes bits 2s..2s + 1 of
// qs[32h + l], minus 4 where bit e / 32 of hmask[l] is clear; scale e / 16
// is (low or high nibble of byte (e / 16) % 8) | 2 bits of byte 8 + (e / 16)
// % 4 at 2 ((e / 16) / 4), less 32.
void block_q3_k(const std::uint8_t* b, float* out) {
  const std::uint8_t* hmask = b;
  const std::uint8_t* qs = b + 32;
  const std::uint8_t* sc = b + 96;
  const float d = half_at(b + 108);
  for (int e = 0; e < static_cast<int>(kQKK); ++e) {
    const int half = e / 128, s = (e % 128) / 32, l = e % 32, is = e / 16;
    const int low = (is < 8 ? sc[is] : sc[is - 8] >> 4) & 0x0F;
    const int high = (sc[8 + is % 4] >> (2 * (is / 4))) & 3;
    const float dl = d * static_cast<float>((low | (high << 4)) - 32);
    const int q = ((qs[32 * half + l] >> (2 * s)) & 3) - (((hmask[l] >> (e / 32)) & 1) ? 0 : 4);
    out[e] = dl * static_cast<float>(q);
  }
}

// IQ4_XS {f16 d; u16 scales_h; 4 bytes scales_l; 128 bytes of 4-bit indices
// into a fixed non-uniform grid}: sub-block ib of 32 has scale (nibble ib % 2
// of scales_l[ib / 2]) | (bits 2ib..2ib + 1 of scales_h) << 4, less 32; its
// element j < 16 is the grid value of the low nibble of qs[16 ib + j], j >= 16
// the high nibble of qs[16 ib + j - 16].
void block_iq4_xs(const std::uint8_t* b, float* out) {
  static constexpr std::int8_t kGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
  const float d = half_at(b);
  std::uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const std::uint8_t* scales_l = b + 4;
  const std::uint8_t* qs = b + 8;
  for (int ib = 0; ib < static_cast<int>(kQKK / 32); ++ib) {
    const int ls =
        ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0F) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      out[32 * ib + j] = dl * static_cast<float>(kGrid[qs[16 * ib + j] & 0x0F]);
      out[32 * ib + j + 16] = dl * static_cast<float>(kGrid[qs[16 * ib + j] >> 4]);
    }
  }
}

void block_q4_k(const std::uint8_t* b, float* out) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  std::uint8_t sc[8], mn[8];
  unpack_scale_min(b + 4, sc, mn);
  const std::uint8_t* qs = b + 16;
  for (int pair = 0; pair < 4; ++pair) {  // 64 elements: low nibbles, then high nibbles
    const float d_lo = d * static_cast<float>(sc[2 * pair]);
    const float m_lo = dmin * static_cast<float>(mn[2 * pair]);
    const float d_hi = d * static_cast<float>(sc[2 * pair + 1]);
    const float m_hi = dmin * static_cast<float>(mn[2 * pair + 1]);
    const std::uint8_t* q = qs + 32 * pair;
    float* o = out + 64 * pair;
    for (int l = 0; l < 32; ++l) {
      o[l] = d_lo * static_cast<float>(q[l] & 0x0F) - m_lo;
      o[l + 32] = d_hi * static_cast<float>(q[l] >> 4) - m_hi;
    }
  }
}

void block_q5_k(const std::uint8_t* b, float* out) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  std::uint8_t sc[8], mn[8];
  unpack_scale_min(b + 4, sc, mn);
  const std::uint8_t* qh = b + 16;  // 32 bytes: bit k of byte l is the fifth bit of sub-block k
  const std::uint8_t* qs = b + 48;  // 128 bytes of nibbles
  for (int sub = 0; sub < 8; ++sub) {
    const float dl = d * static_cast<float>(sc[sub]);
    const float ml = dmin * static_cast<float>(mn[sub]);
    const std::uint8_t* q = qs + 32 * (sub / 2);
    const int shift = (sub % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0x0F) | (((qh[l] >> sub) & 1) << 4);
      out[32 * sub + l] = dl * static_cast<float>(v) - ml;
    }
  }
}

void block_q6_k(const std::uint8_t* b, float* out) {
  const std::uint8_t* ql = b;                                          // 128 bytes: low 4 bits
  const std::uint8_t* qh = b + 128;                                    // 64 bytes: high 2 bits
  const auto* scales = reinterpret_cast<const std::int8_t*>(b + 192);  // 16 signed scales
  const float d = half_at(b + 208);
  for (int half = 0; half < 2; ++half) {  // 128 elements each
    const std::uint8_t* l4 = ql + 64 * half;
    const std::uint8_t* h2 = qh + 32 * half;
    for (int part = 0; part < 4; ++part) {  // 32 elements: nibble of l4[0..63] and 2 bits of h2
      const std::uint8_t* lsrc = l4 + 32 * (part % 2);
      const int lshift = (part / 2) * 4;
      const int hshift = part * 2;
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * half + 32 * part + l;
        const int v = ((lsrc[l] >> lshift) & 0x0F) | (((h2[l] >> hshift) & 3) << 4);
        const float ds = d * static_cast<float>(scales[e / 16]);
        out[e] = ds * static_cast<float>(v - 32);
      }
    }
  }
}

using BlockFn = void (*)(const std::uint8_t*, float*);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return block_q4_0;
    case GgmlType::kQ4_1: return block_q4_1;
    case GgmlType::kQ5_0: return block_q5_0;
    case GgmlType::kQ8_0: return block_q8_0;
    case GgmlType::kQ4_K: return block_q4_k;
    case GgmlType::kQ5_K: return block_q5_k;
    case GgmlType::kQ6_K: return block_q6_k;
    case GgmlType::kQ5_1: return block_q5_1;
    case GgmlType::kQ2_K: return block_q2_k;
    case GgmlType::kQ3_K: return block_q3_k;
    case GgmlType::kIQ4_XS: return block_iq4_xs;
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_1:
    case GgmlType::kQ8_K:
    case GgmlType::kI8:
    case GgmlType::kI16:
    case GgmlType::kI32:
    case GgmlType::kI64:
    case GgmlType::kF64: return nullptr;
  }
  return nullptr;
}

Status check_sizes(const GgmlTypeInfo& info, std::size_t src_bytes, std::size_t dst_elems) {
  if (src_bytes % info.block_bytes != 0 ||
      src_bytes / info.block_bytes * info.block_elems != dst_elems) {
    return invalid_argument("dequantize {}: {} source bytes do not hold exactly {} elements",
                            info.name, src_bytes, dst_elems);
  }
  if (!info.dequantizable) {
    return not_supported(
        "dequantize: type {} is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
        "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS are)",
        info.name);
  }
  return Status::ok();
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t raw_type) {
  for (const auto& t : kTypes) {
    if (static_cast<std::uint32_t>(t.type) == raw_type) return t;
  }
  return std::nullopt;
}

std::string_view ggml_type_name(GgmlType type) {
  const auto info = ggml_type_info(static_cast<std::uint32_t>(type));
  return info ? info->name : std::string_view("unknown");
}

Status dequantize_f32(GgmlType type, std::span<const std::uint8_t> src, std::span<float> dst) {
  const auto info = ggml_type_info(static_cast<std::uint32_t>(type));
  if (!info) return not_supported("dequantize: unknown type {}", static_cast<std::uint32_t>(type));
  CELLM_RETURN_IF_ERROR(check_sizes(*info, src.size(), dst.size()));
  const std::size_t n = dst.size();
  if (type == GgmlType::kF32) {
    if (n > 0) std::memcpy(dst.data(), src.data(), n * 4);
    return Status::ok();
  }
  if (type == GgmlType::kF16) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = half_at(src.data() + 2 * i);
    return Status::ok();
  }
  if (type == GgmlType::kBF16) {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t bits;
      std::memcpy(&bits, src.data() + 2 * i, 2);
      dst[i] = bf16_to_f32(bits);
    }
    return Status::ok();
  }
  const BlockFn fn = block_fn(type);
  const std::size_t blocks = src.size() / info->block_bytes;
  for (std::size_t i = 0; i < blocks; ++i) {
    fn(src.data() + i * info->block_bytes, dst.data() + i * info->block_elems);
  }
  return Status::ok();
}

Status dequantize_bf16(GgmlType type, std::span<const std::uint8_t> src,
                       std::span<std::uint16_t> dst) {
  const auto info = ggml_type_info(static_cast<std::uint32_t>(type));
  if (!info) return not_supported("dequantize: unknown type {}", static_cast<std::uint32_t>(type));
  CELLM_RETURN_IF_ERROR(check_sizes(*info, src.size(), dst.size()));
  if (type == GgmlType::kBF16) {
    if (!dst.empty()) std::memcpy(dst.data(), src.data(), dst.size() * 2);
    return Status::ok();
  }
  // One block (or a bounded run of plain elements) at a time through f32.
  constexpr std::size_t kChunkBlocks = 64;
  std::vector<float> tmp(kChunkBlocks * info->block_elems);
  const std::size_t blocks = src.size() / info->block_bytes;
  for (std::size_t first = 0; first < blocks; first += kChunkBlocks) {
    const std::size_t count = std::min(kChunkBlocks, blocks - first);
    const std::size_t elems = count * info->block_elems;
    CELLM_RETURN_IF_ERROR(
        dequantize_f32(type, src.subspan(first * info->block_bytes, count * info->block_bytes),
                       std::span<float>(tmp.data(), elems)));
    std::uint16_t* out = dst.data() + first * info->block_elems;
    for (std::size_t i = 0; i < elems; ++i) out[i] = f32_to_bf16(tmp[i]);
  }
  return Status::ok();
}

}  // namespace cellm::format
