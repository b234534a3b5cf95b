#include "backend/cpu/quant_dot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/check.h"
#include "core/dtype.h"

namespace cellm::cpu {
namespace {

using format::GgmlType;

// f16 -> f32 through a table: exact, so it equals F16C's conversion.
const std::array<float, 65536>& f16_table() {
  static const std::array<float, 65536> table = [] {
    std::array<float, 65536> t{};
    for (std::uint32_t i = 0; i < 65536; ++i) t[i] = f16_to_f32(static_cast<std::uint16_t>(i));
    return t;
  }();
  return table;
}

inline float h2f(std::uint16_t h) {
  return f16_table()[h];
}

}  // namespace

std::string_view isa_name(Isa isa) {
  return isa == Isa::kAvx2 ? "avx2" : "scalar";
}

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (ECX bit 29): Clang 14's __builtin_cpu_supports
// does not know the "f16c" name that GCC accepts.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

Isa best_isa() {
#if defined(__x86_64__) || defined(__i386__)
  static const Isa best = [] {
    __builtin_cpu_init();
    return avx2::compiled() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   has_f16c()
               ? Isa::kAvx2
               : Isa::kScalar;
  }();
  return best;
#else
  return Isa::kScalar;
#endif
}

Isa active_isa() {
  return best_isa();
}

bool has_quant_kernel(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

ActKind act_kind(GgmlType type) {
  return type == GgmlType::kQ4_K || type == GgmlType::kQ5_K || type == GgmlType::kQ6_K
             ? ActKind::kQ8K
             : ActKind::kQ8;
}

std::int64_t act_block_elems(ActKind kind) {
  return kind == ActKind::kQ8K ? 256 : 32;
}

std::size_t act_row_bytes(ActKind kind, std::int64_t cols) {
  const std::int64_t blocks = cols / act_block_elems(kind);
  return static_cast<std::size_t>(blocks) * (kind == ActKind::kQ8K ? sizeof(ActQ8K) : sizeof(ActQ8));
}

DotFn dot_kernel(GgmlType type, Isa isa) {
  const bool v = isa == Isa::kAvx2 && avx2::compiled();
  switch (type) {
    case GgmlType::kQ4_0: return v ? avx2::dot_q4_0 : scalar::dot_q4_0;
    case GgmlType::kQ4_1: return v ? avx2::dot_q4_1 : scalar::dot_q4_1;
    case GgmlType::kQ5_0: return v ? avx2::dot_q5_0 : scalar::dot_q5_0;
    case GgmlType::kQ8_0: return v ? avx2::dot_q8_0 : scalar::dot_q8_0;
    case GgmlType::kQ4_K: return v ? avx2::dot_q4_k : scalar::dot_q4_k;
    case GgmlType::kQ5_K: return v ? avx2::dot_q5_k : scalar::dot_q5_k;
    case GgmlType::kQ6_K: return v ? avx2::dot_q6_k : scalar::dot_q6_k;
    default: return nullptr;
  }
}

bool has_avx512_vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    __builtin_cpu_init();
    return avx2::compiled() && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return has;
#else
  return false;
#endif
}

TileKernel dot_tile_kernel(GgmlType type, Isa isa, bool allow_vnni) {
  if (isa != Isa::kAvx2 || !avx2::compiled()) return {};
  if (allow_vnni && has_avx512_vnni()) {
    switch (type) {
      case GgmlType::kQ4_0: return {avx2::vnni_q4_0, avx2::kVnniTileRows};
      case GgmlType::kQ4_1: return {avx2::vnni_q4_1, avx2::kVnniTileRows};
      case GgmlType::kQ5_0: return {avx2::vnni_q5_0, avx2::kVnniTileRows};
      case GgmlType::kQ8_0: return {avx2::vnni_q8_0, avx2::kVnniTileRows};
      default: break;
    }
  }
  switch (type) {
    case GgmlType::kQ4_0: return {avx2::tile_q4_0, 1};
    case GgmlType::kQ4_1: return {avx2::tile_q4_1, 1};
    case GgmlType::kQ5_0: return {avx2::tile_q5_0, 1};
    case GgmlType::kQ8_0: return {avx2::tile_q8_0, 1};
    case GgmlType::kQ4_K: return {avx2::tile_q4_k, 1};
    case GgmlType::kQ5_K: return {avx2::tile_q5_k, 1};
    case GgmlType::kQ6_K: return {avx2::tile_q6_k, 1};
    default: return {};
  }
}

DotFn dot_row_kernel(GgmlType type, Isa isa) {
  if (isa == Isa::kAvx2 && avx2::compiled()) {
    switch (type) {
      case GgmlType::kQ4_0: return avx2::row_q4_0;
      case GgmlType::kQ4_1: return avx2::row_q4_1;
      case GgmlType::kQ5_0: return avx2::row_q5_0;
      case GgmlType::kQ8_0: return avx2::row_q8_0;
      default: break;
    }
  }
  return dot_kernel(type, isa);
}

void quantize_act(ActKind kind, const float* x, std::int64_t cols, void* out, Isa isa) {
  const std::int64_t bs = act_block_elems(kind);
  CELLM_CHECK(cols % bs == 0, "quantize_act: {} columns are not whole blocks of {}", cols, bs);
  if (isa == Isa::kAvx2 && avx2::compiled()) {
    avx2::quantize_act(kind, x, cols, out);
    return;
  }
  for (std::int64_t b = 0; b < cols / bs; ++b) {
    const float* xb = x + b * bs;
    float amax = 0.0f;
    for (std::int64_t i = 0; i < bs; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    std::int8_t* qs;
    if (kind == ActKind::kQ8) {
      auto* blk = static_cast<ActQ8*>(out) + b;
      blk->d = d;
      qs = blk->qs;
    } else {
      auto* blk = static_cast<ActQ8K*>(out) + b;
      blk->d = d;
      qs = blk->qs;
    }
    std::int32_t sum = 0;
    for (std::int64_t i = 0; i < bs; ++i) {
      const float q = std::nearbyint(xb[i] * id);
      const auto v = static_cast<std::int8_t>(std::clamp(q, -127.0f, 127.0f));
      qs[i] = v;
      sum += v;
    }
    if (kind == ActKind::kQ8) {
      (static_cast<ActQ8*>(out) + b)->sum = sum;
    } else {
      auto* blk = static_cast<ActQ8K*>(out) + b;
      for (int g = 0; g < 16; ++g) {
        std::int32_t s = 0;
        for (int i = 0; i < 16; ++i) s += qs[g * 16 + i];
        blk->bsums[g] = static_cast<std::int16_t>(s);
      }
    }
  }
}

namespace scalar {

float dot_q4_0(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ4_0*>(w);
  const auto* ab = static_cast<const ActQ8*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    std::int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (wb[b].qs[j] & 0xF) * ab[b].qs[j] + (wb[b].qs[j] >> 4) * ab[b].qs[j + 16];
    }
    isum -= 8 * ab[b].sum;
    acc = combine::scaled(acc, h2f(wb[b].d), ab[b].d, isum);
  }
  return acc;
}

float dot_q4_1(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ4_1*>(w);
  const auto* ab = static_cast<const ActQ8*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    std::int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += (wb[b].qs[j] & 0xF) * ab[b].qs[j] + (wb[b].qs[j] >> 4) * ab[b].qs[j + 16];
    }
    acc = combine::scaled_min(acc, h2f(wb[b].d), h2f(wb[b].m), ab[b].d, isum, ab[b].sum);
  }
  return acc;
}

float dot_q5_0(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ5_0*>(w);
  const auto* ab = static_cast<const ActQ8*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    std::uint32_t qh;
    std::memcpy(&qh, wb[b].qh, 4);
    std::int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      const int lo = (wb[b].qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (wb[b].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      isum += lo * ab[b].qs[j] + hi * ab[b].qs[j + 16];
    }
    isum -= 16 * ab[b].sum;
    acc = combine::scaled(acc, h2f(wb[b].d), ab[b].d, isum);
  }
  return acc;
}

float dot_q8_0(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ8_0*>(w);
  const auto* ab = static_cast<const ActQ8*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    std::int32_t isum = 0;
    for (int j = 0; j < 32; ++j) isum += wb[b].qs[j] * ab[b].qs[j];
    acc = combine::scaled(acc, h2f(wb[b].d), ab[b].d, isum);
  }
  return acc;
}

float dot_q4_k(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ4_K*>(w);
  const auto* ab = static_cast<const ActQ8K*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 256; ++b) {
    std::int32_t isum = 0, msum = 0;
    for (int j = 0; j < 4; ++j) {
      std::int32_t sc0, m0, sc1, m1;
      k_scale_min(2 * j, wb[b].scales, &sc0, &m0);
      k_scale_min(2 * j + 1, wb[b].scales, &sc1, &m1);
      const std::uint8_t* q = wb[b].qs + 32 * j;
      const std::int8_t* x = ab[b].qs + 64 * j;
      std::int32_t s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        s0 += (q[l] & 0xF) * x[l];
        s1 += (q[l] >> 4) * x[l + 32];
      }
      isum += sc0 * s0 + sc1 * s1;
      msum += m0 * (ab[b].bsums[4 * j] + ab[b].bsums[4 * j + 1]) +
              m1 * (ab[b].bsums[4 * j + 2] + ab[b].bsums[4 * j + 3]);
    }
    acc = combine::k_block(acc, h2f(wb[b].d), h2f(wb[b].dmin), ab[b].d, isum, msum);
  }
  return acc;
}

float dot_q5_k(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ5_K*>(w);
  const auto* ab = static_cast<const ActQ8K*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 256; ++b) {
    std::int32_t isum = 0, msum = 0;
    for (int j = 0; j < 4; ++j) {
      std::int32_t sc0, m0, sc1, m1;
      k_scale_min(2 * j, wb[b].scales, &sc0, &m0);
      k_scale_min(2 * j + 1, wb[b].scales, &sc1, &m1);
      const std::uint8_t* q = wb[b].qs + 32 * j;
      const std::int8_t* x = ab[b].qs + 64 * j;
      std::int32_t s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        const int h0 = (wb[b].qh[l] >> (2 * j)) & 1;
        const int h1 = (wb[b].qh[l] >> (2 * j + 1)) & 1;
        s0 += ((q[l] & 0xF) | (h0 << 4)) * x[l];
        s1 += ((q[l] >> 4) | (h1 << 4)) * x[l + 32];
      }
      isum += sc0 * s0 + sc1 * s1;
      msum += m0 * (ab[b].bsums[4 * j] + ab[b].bsums[4 * j + 1]) +
              m1 * (ab[b].bsums[4 * j + 2] + ab[b].bsums[4 * j + 3]);
    }
    acc = combine::k_block(acc, h2f(wb[b].d), h2f(wb[b].dmin), ab[b].d, isum, msum);
  }
  return acc;
}

float dot_q6_k(const void* w, const void* a, std::int64_t cols) {
  const auto* wb = static_cast<const BlockQ6_K*>(w);
  const auto* ab = static_cast<const ActQ8K*>(a);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / 256; ++b) {
    std::int32_t isum = 0;
    for (int half = 0; half < 2; ++half) {
      const std::uint8_t* ql = wb[b].ql + 64 * half;
      const std::uint8_t* qh = wb[b].qh + 32 * half;
      const std::int8_t* sc = wb[b].scales + 8 * half;
      const std::int8_t* x = ab[b].qs + 128 * half;
      std::int32_t s[8] = {};
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = (ql[l] & 0xF) | ((qh[l] & 3) << 4);
        const int q2 = (ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4);
        const int q3 = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
        const int q4 = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        s[is] += q1 * x[l];
        s[is + 2] += q2 * x[l + 32];
        s[is + 4] += q3 * x[l + 64];
        s[is + 6] += q4 * x[l + 96];
      }
      for (int g = 0; g < 8; ++g) isum += sc[g] * s[g];
    }
    // The quants are stored +32: take 32 * sum(scale * x) back out.
    std::int32_t offset = 0;
    for (int g = 0; g < 16; ++g) offset += wb[b].scales[g] * ab[b].bsums[g];
    isum -= 32 * offset;
    acc = combine::scaled(acc, h2f(wb[b].d), ab[b].d, isum);
  }
  return acc;
}

}  // namespace scalar

}  // namespace cellm::cpu
