// The x8 layout's kernels (qmatrix_x8.h) on AVX-512 VNNI with 256-bit
// vectors: per 32-element block, eight vpdpbusd against broadcast groups of
// four activation bytes give the eight rows' integer dots in one vector,
// scaled by the rows' f16 scales (one conversion) and the token's scale.
// value = d * q + offset: the offset (-8 d, Q4_1's min, -16 d, -128 d)
// times the token's scaled activation sum is added in the same vector.
// Only called where dot_tile_kernel's check found VNNI; the file needs no
// special compiler flags.
#include <cstring>

#include "backend/cpu/qmatrix_x8.h"

#if defined(__x86_64__) || defined(__i386__)
#include "backend/cpu/x8_vnni_inl.h"

namespace cellm::cpu::avx2 {
namespace {

using x8::bcast4;
using x8::load32;
using x8::scales8;

// Fills v[0..7] with block's quants and returns the offsets per row.
struct Q4_0 {
  static constexpr std::size_t kBytes = 16 + 128;
  CELLM_X8 static __m256 unpack(const std::uint8_t* blk, __m256 d, __m256i* v) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    for (int g = 0; g < 4; ++g) {
      const __m256i p = load32(blk + 16 + 32 * g);
      v[g] = _mm256_and_si256(p, m);
      v[g + 4] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m);
    }
    return _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
  }
};
struct Q4_1 {
  static constexpr std::size_t kBytes = 32 + 128;
  CELLM_X8 static __m256 unpack(const std::uint8_t* blk, __m256, __m256i* v) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    for (int g = 0; g < 4; ++g) {
      const __m256i p = load32(blk + 32 + 32 * g);
      v[g] = _mm256_and_si256(p, m);
      v[g + 4] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m);
    }
    return scales8(blk + 16);
  }
};
struct Q5_0 {
  static constexpr std::size_t kBytes = 16 + 128 + 32;
  CELLM_X8 static __m256 unpack(const std::uint8_t* blk, __m256 d, __m256i* v) {
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i bit = _mm256_set1_epi8(0x10);
    for (int g = 0; g < 4; ++g) {
      const __m256i p = load32(blk + 16 + 32 * g);
      v[g] = _mm256_and_si256(p, m);
      v[g + 4] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m);
    }
    // Bit g of each byte becomes bit 4 of vector g's byte (shifts within
    // 16-bit lanes keep each byte's bits in place for the mask).
    const __m256i h = load32(blk + 16 + 128);
    v[0] = _mm256_or_si256(v[0], _mm256_and_si256(_mm256_slli_epi16(h, 4), bit));
    v[1] = _mm256_or_si256(v[1], _mm256_and_si256(_mm256_slli_epi16(h, 3), bit));
    v[2] = _mm256_or_si256(v[2], _mm256_and_si256(_mm256_slli_epi16(h, 2), bit));
    v[3] = _mm256_or_si256(v[3], _mm256_and_si256(_mm256_slli_epi16(h, 1), bit));
    v[4] = _mm256_or_si256(v[4], _mm256_and_si256(h, bit));
    v[5] = _mm256_or_si256(v[5], _mm256_and_si256(_mm256_srli_epi16(h, 1), bit));
    v[6] = _mm256_or_si256(v[6], _mm256_and_si256(_mm256_srli_epi16(h, 2), bit));
    v[7] = _mm256_or_si256(v[7], _mm256_and_si256(_mm256_srli_epi16(h, 3), bit));
    return _mm256_mul_ps(d, _mm256_set1_ps(-16.0f));
  }
};
struct Q8_0 {
  static constexpr std::size_t kBytes = 16 + 256;
  CELLM_X8 static __m256 unpack(const std::uint8_t* blk, __m256 d, __m256i* v) {
    for (int g = 0; g < 8; ++g) v[g] = load32(blk + 16 + 32 * g);
    return _mm256_mul_ps(d, _mm256_set1_ps(-128.0f));
  }
};

template <typename T, int N>
CELLM_X8 inline void group_rows(const std::uint8_t* group, std::int64_t blocks,
                                const std::uint8_t* const* acts, float* out) {
  const ActQ8* a[N];
  for (int i = 0; i < N; ++i) a[i] = reinterpret_cast<const ActQ8*>(acts[i]);
  __m256 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint8_t* blk = group + static_cast<std::size_t>(b) * T::kBytes;
    const __m256 d = scales8(blk);
    __m256i v[8];
    const __m256 offset = T::unpack(blk, d, v);
    for (int i = 0; i < N; ++i) {
      const ActQ8& x = a[i][b];
      __m256i s = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) s = _mm256_dpbusd_epi32(s, v[g], bcast4(x.qs + 4 * g));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(d, _mm256_set1_ps(x.d)),
                               acc[i]);
      acc[i] = _mm256_fmadd_ps(offset, _mm256_set1_ps(x.d * static_cast<float>(x.sum)), acc[i]);
    }
  }
  for (int i = 0; i < N; ++i) _mm256_storeu_ps(out + i * kX8Rows, acc[i]);
}

template <typename T>
CELLM_X8 inline void group(const std::uint8_t* g, std::int64_t blocks,
                           const std::uint8_t* const* acts, int n, float* out) {
  switch (n) {
    case 8: group_rows<T, 8>(g, blocks, acts, out); return;
    case 7: group_rows<T, 7>(g, blocks, acts, out); return;
    case 6: group_rows<T, 6>(g, blocks, acts, out); return;
    case 5: group_rows<T, 5>(g, blocks, acts, out); return;
    case 4: group_rows<T, 4>(g, blocks, acts, out); return;
    case 3: group_rows<T, 3>(g, blocks, acts, out); return;
    case 2: group_rows<T, 2>(g, blocks, acts, out); return;
    default: group_rows<T, 1>(g, blocks, acts, out); return;
  }
}

}  // namespace

CELLM_X8 void x8_q4_0(const std::uint8_t* g, std::int64_t blocks, const std::uint8_t* const* a,
                      int n, float* out) {
  group<Q4_0>(g, blocks, a, n, out);
}
CELLM_X8 void x8_q4_1(const std::uint8_t* g, std::int64_t blocks, const std::uint8_t* const* a,
                      int n, float* out) {
  group<Q4_1>(g, blocks, a, n, out);
}
CELLM_X8 void x8_q5_0(const std::uint8_t* g, std::int64_t blocks, const std::uint8_t* const* a,
                      int n, float* out) {
  group<Q5_0>(g, blocks, a, n, out);
}
CELLM_X8 void x8_q8_0(const std::uint8_t* g, std::int64_t blocks, const std::uint8_t* const* a,
                      int n, float* out) {
  group<Q8_0>(g, blocks, a, n, out);
}

}  // namespace cellm::cpu::avx2

#else  // not x86: qmatrix_from_gguf never makes the x8 layout.

namespace cellm::cpu::avx2 {
void x8_q4_0(const std::uint8_t*, std::int64_t, const std::uint8_t* const*, int, float*) {}
void x8_q4_1(const std::uint8_t*, std::int64_t, const std::uint8_t* const*, int, float*) {}
void x8_q5_0(const std::uint8_t*, std::int64_t, const std::uint8_t* const*, int, float*) {}
void x8_q8_0(const std::uint8_t*, std::int64_t, const std::uint8_t* const*, int, float*) {}
}  // namespace cellm::cpu::avx2

#endif
