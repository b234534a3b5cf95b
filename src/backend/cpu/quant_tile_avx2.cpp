// The float-accumulated kernels of quant_dot.h: one-row dots for decode and
// the prefill tiles (weight rows x kTile activation rows). Unlike the
// bit-exact dots of quant_dot_avx2.cpp they turn each block's integer sums
// into floats at once and accumulate in vector registers, which is what
// makes them fast; they agree with the exact dots within float rounding.
//
// AVX2 functions carry its target attribute; the four-row tiles carry
// AVX-512 VNNI's (vpdpbusd: u8 x s8 sums in one instruction, and 32 vector
// registers for 16 accumulators) and run only where dot_tile_kernel found
// that extension. The file needs no special compiler flags.
#include <cstring>

#include "backend/cpu/quant_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include "backend/cpu/quant_avx2_inl.h"

#define CELLM_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))

namespace cellm::cpu::avx2 {
using namespace detail;
namespace {

// The one-weight-row tile loop: `weights(b, &dw, &offset)` gives block b's
// 32 unsigned quants (or, with `sign`, signed ones moved onto the
// activations), its scale, and the per-unit offset applied to the
// activation sum (value = dw * q + offset: -8 dw, -16 dw or Q4_1's min).
template <bool kSign, int kN = kTile, typename Weights>
CELLM_AVX2 inline void tile_loop(const std::uint8_t* const* a, std::int64_t cols, float* out,
                                 Weights weights) {
  const ActQ8* act[kN];
  for (int i = 0; i < kN; ++i) act[i] = reinterpret_cast<const ActQ8*>(a[i]);
  __m256 acc[kN];
  float off[kN] = {};
  for (int i = 0; i < kN; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    float dw, offset;
    const __m256i q = weights(b, &dw, &offset);
    const __m256i uq = kSign ? _mm256_sign_epi8(q, q) : q;
    for (int i = 0; i < kN; ++i) {
      __m256i x = load32(act[i][b].qs);
      if (kSign) x = _mm256_sign_epi8(x, q);
      const __m256 p = _mm256_cvtepi32_ps(dot_u8s8(uq, x));
      acc[i] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * act[i][b].d), acc[i]);
      off[i] += offset * act[i][b].d * static_cast<float>(act[i][b].sum);
    }
  }
  for (int i = 0; i < kN; ++i) out[i] = hsum_ps(acc[i]) + off[i];
}

// Block b of the 32-element types as unsigned (or, for Q8_0, signed)
// quants with its scale and offset, for tile_loop and the VNNI tile.
struct Q4_0 {
  static constexpr bool kSign = false;
  CELLM_AVX2 static __m256i unpack(const void* row, std::int64_t b, float* dw, float* offset) {
    const auto& blk = static_cast<const BlockQ4_0*>(row)[b];
    *dw = h2f(blk.d);
    *offset = -8.0f * *dw;
    return unpack_nibbles(blk.qs);
  }
};
struct Q4_1 {
  static constexpr bool kSign = false;
  CELLM_AVX2 static __m256i unpack(const void* row, std::int64_t b, float* dw, float* offset) {
    const auto& blk = static_cast<const BlockQ4_1*>(row)[b];
    *dw = h2f(blk.d);
    *offset = h2f(blk.m);
    return unpack_nibbles(blk.qs);
  }
};
struct Q5_0 {
  static constexpr bool kSign = false;
  CELLM_AVX2 static __m256i unpack(const void* row, std::int64_t b, float* dw, float* offset) {
    const auto& blk = static_cast<const BlockQ5_0*>(row)[b];
    std::uint32_t qh;
    std::memcpy(&qh, blk.qh, 4);
    *dw = h2f(blk.d);
    *offset = -16.0f * *dw;
    const __m256i hi = _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(unpack_nibbles(blk.qs), hi);
  }
};
struct Q8_0 {
  static constexpr bool kSign = true;
  CELLM_AVX2 static __m256i unpack(const void* row, std::int64_t b, float* dw, float* offset) {
    const auto& blk = static_cast<const BlockQ8_0*>(row)[b];
    *dw = h2f(blk.d);
    *offset = 0.0f;
    return load32(blk.qs);
  }
};

template <typename T>
CELLM_AVX2 inline void tile_one(const void* w, const std::uint8_t* const* a, std::int64_t cols,
                                float* out) {
  tile_loop<T::kSign>(a, cols, out, [&](std::int64_t b, float* dw, float* offset) CELLM_AVX2 {
    return T::unpack(w, b, dw, offset);
  });
}

template <typename T>
CELLM_AVX2 inline float row_one(const void* w, const void* a1, std::int64_t cols) {
  const std::uint8_t* const a[1] = {static_cast<const std::uint8_t*>(a1)};
  float out[1];
  tile_loop<T::kSign, 1>(a, cols, out, [&](std::int64_t b, float* dw, float* offset) CELLM_AVX2 {
    return T::unpack(w, b, dw, offset);
  });
  return out[0];
}

// Four weight rows x kTile activation rows: 16 float accumulators. Each
// pair's arithmetic is tile_loop's, operation for operation (the same int32
// lanes, products and roundings), so a four-row tile returns exactly what
// four one-row tiles do; the offsets (value = dw * q + offset) are summed
// apart, four tokens to a 128-bit vector.
template <typename T>
CELLM_VNNI inline void vnni_tile(const void* w, std::size_t rb, const std::uint8_t* const* a,
                                 std::int64_t cols, float* out) {
  constexpr int kR = kVnniTileRows;
  const ActQ8* act[kTile];
  for (int i = 0; i < kTile; ++i) act[i] = reinterpret_cast<const ActQ8*>(a[i]);
  const auto* base = static_cast<const std::uint8_t*>(w);
  __m256 acc[kR][kTile];
  __m128 off[kR];
  for (int r = 0; r < kR; ++r) {
    off[r] = _mm_setzero_ps();
    for (int i = 0; i < kTile; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  for (std::int64_t b = 0; b < cols / 32; ++b) {
    __m256i q[kR];
    __m256i uq[kR];
    float dw[kR], offset[kR];
    for (int r = 0; r < kR; ++r) {
      q[r] = T::unpack(base + r * rb, b, &dw[r], &offset[r]);
      uq[r] = T::kSign ? _mm256_sign_epi8(q[r], q[r]) : q[r];
    }
    for (int i = 0; i < kTile; ++i) {
      const __m256i x = load32(act[i][b].qs);
      const __m256 da = _mm256_set1_ps(act[i][b].d);
      for (int r = 0; r < kR; ++r) {
        const __m256i xs = T::kSign ? _mm256_sign_epi8(x, q[r]) : x;
        const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), uq[r], xs);
        const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(dw[r]), da);
        acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[r][i]);
      }
    }
    if (!T::kSign) {
      // (offset * d) * sum, then the add, rounded step by step as
      // tile_loop's scalar expression is: the two tiles agree bit for bit.
      const __m128 d = _mm_setr_ps(act[0][b].d, act[1][b].d, act[2][b].d, act[3][b].d);
      const __m128 sum = _mm_cvtepi32_ps(
          _mm_setr_epi32(act[0][b].sum, act[1][b].sum, act[2][b].sum, act[3][b].sum));
      for (int r = 0; r < kR; ++r) {
        off[r] = _mm_add_ps(off[r], _mm_mul_ps(_mm_mul_ps(_mm_set1_ps(offset[r]), d), sum));
      }
    }
  }
  for (int r = 0; r < kR; ++r) {
    float o[kTile];
    _mm_storeu_ps(o, off[r]);
    for (int i = 0; i < kTile; ++i) out[r * kTile + i] = hsum_ps(acc[r][i]) + o[i];
  }
}

// Q4_K / Q5_K: one weight row x kTile activation rows. Per 64 elements the
// weight's low and high nibbles (plus Q5_K's fifth bits) are unpacked once
// and multiplied by every token's quants, each product weighted by its
// sub-block scale in the int16 -> int32 step; mins come from the tokens'
// 16-element sums.
template <bool kFifth, typename Block>
CELLM_AVX2 inline void k4_tile(const Block* wb, const std::uint8_t* const* a, std::int64_t cols,
                               float* out) {
  const ActQ8K* act[kTile];
  for (int i = 0; i < kTile; ++i) act[i] = reinterpret_cast<const ActQ8K*>(a[i]);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  __m256 acc[kTile];
  float mins[kTile] = {};
  for (int i = 0; i < kTile; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / 256; ++b) {
    const Block& blk = wb[b];
    std::int32_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) k_scale_min(j, blk.scales, &sc[j], &m[j]);
    __m256i isum[kTile];
    for (int i = 0; i < kTile; ++i) isum[i] = _mm256_setzero_si256();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifth) qh = load32(blk.qh);
    for (int j = 0; j < 4; ++j) {
      const __m256i q = load32(blk.qs + 32 * j);
      __m256i lo = _mm256_and_si256(q, mask);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      if constexpr (kFifth) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m128i c0 = _mm_cvtsi32_si128(2 * j);
        const __m128i c1 = _mm_cvtsi32_si128(2 * j + 1);
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, c0), one), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, c1), one), 4));
      }
      const __m256i s0 = _mm256_set1_epi16(static_cast<short>(sc[2 * j]));
      const __m256i s1 = _mm256_set1_epi16(static_cast<short>(sc[2 * j + 1]));
      for (int i = 0; i < kTile; ++i) {
        const std::int8_t* x = act[i][b].qs + 64 * j;
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(x)), s0);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(x + 32)), s1);
        isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(p0, p1));
      }
    }
    const float d = h2f(blk.d);
    const float dmin = h2f(blk.dmin);
    for (int i = 0; i < kTile; ++i) {
      const std::int16_t* bs = act[i][b].bsums;
      std::int32_t msum = 0;
      for (int j = 0; j < 8; ++j) msum += m[j] * (bs[2 * j] + bs[2 * j + 1]);
      const float da = act[i][b].d;
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_set1_ps(d * da), acc[i]);
      mins[i] += dmin * da * static_cast<float>(msum);
    }
  }
  for (int i = 0; i < kTile; ++i) out[i] = hsum_ps(acc[i]) - mins[i];
}

}  // namespace

CELLM_AVX2 void tile_q4_0(const void* w, std::size_t, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  tile_one<Q4_0>(w, a, cols, out);
}
CELLM_AVX2 void tile_q4_1(const void* w, std::size_t, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  tile_one<Q4_1>(w, a, cols, out);
}
CELLM_AVX2 void tile_q5_0(const void* w, std::size_t, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  tile_one<Q5_0>(w, a, cols, out);
}
CELLM_AVX2 void tile_q8_0(const void* w, std::size_t, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  tile_one<Q8_0>(w, a, cols, out);
}

CELLM_AVX2 float row_q4_0(const void* w, const void* a, std::int64_t cols) {
  return row_one<Q4_0>(w, a, cols);
}
CELLM_AVX2 float row_q4_1(const void* w, const void* a, std::int64_t cols) {
  return row_one<Q4_1>(w, a, cols);
}
CELLM_AVX2 float row_q5_0(const void* w, const void* a, std::int64_t cols) {
  return row_one<Q5_0>(w, a, cols);
}
CELLM_AVX2 float row_q8_0(const void* w, const void* a, std::int64_t cols) {
  return row_one<Q8_0>(w, a, cols);
}

CELLM_VNNI void vnni_q4_0(const void* w, std::size_t rb, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  vnni_tile<Q4_0>(w, rb, a, cols, out);
}
CELLM_VNNI void vnni_q4_1(const void* w, std::size_t rb, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  vnni_tile<Q4_1>(w, rb, a, cols, out);
}
CELLM_VNNI void vnni_q5_0(const void* w, std::size_t rb, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  vnni_tile<Q5_0>(w, rb, a, cols, out);
}
CELLM_VNNI void vnni_q8_0(const void* w, std::size_t rb, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  vnni_tile<Q8_0>(w, rb, a, cols, out);
}

CELLM_AVX2 void tile_q4_k(const void* w, std::size_t, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  k4_tile<false>(static_cast<const BlockQ4_K*>(w), a, cols, out);
}
CELLM_AVX2 void tile_q5_k(const void* w, std::size_t, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  k4_tile<true>(static_cast<const BlockQ5_K*>(w), a, cols, out);
}

// Q6_K: one weight row x kTile activation rows; the 6-bit quants are
// unsigned (q + 32), so the offset is 32 times the scaled 16-element sums.
CELLM_AVX2 void tile_q6_k(const void* w, std::size_t, const std::uint8_t* const* a,
                          std::int64_t cols, float* out) {
  const auto* wb = static_cast<const BlockQ6_K*>(w);
  const ActQ8K* act[kTile];
  for (int i = 0; i < kTile; ++i) act[i] = reinterpret_cast<const ActQ8K*>(a[i]);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(0x30);
  __m256 acc[kTile];
  for (int i = 0; i < kTile; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < cols / 256; ++b) {
    const BlockQ6_K& blk = wb[b];
    __m256i isum[kTile];
    for (int i = 0; i < kTile; ++i) isum[i] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load32(blk.ql + 64 * half);
      const __m256i ql1 = load32(blk.ql + 64 * half + 32);
      const __m256i qh = load32(blk.qh + 32 * half);
      const std::int8_t* sc = blk.scales + 8 * half;
      const __m256i qv[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, m4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4),
                          _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                          _mm256_and_si256(qh, m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2))};
      for (int k = 0; k < 4; ++k) {
        // Lanes 0..7 hold elements 0..15 (scale 2k), lanes 8..15 elements 16..31 (2k + 1).
        const __m256i s =
            _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
        for (int i = 0; i < kTile; ++i) {
          const __m256i p =
              _mm256_maddubs_epi16(qv[k], load32(act[i][b].qs + 128 * half + 32 * k));
          isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p, s));
        }
      }
    }
    const float d = h2f(blk.d);
    for (int i = 0; i < kTile; ++i) {
      std::int32_t offset = 0;
      for (int g = 0; g < 16; ++g) offset += blk.scales[g] * act[i][b].bsums[g];
      const __m256i corrected = _mm256_sub_epi32(
          isum[i], _mm256_setr_epi32(32 * offset, 0, 0, 0, 0, 0, 0, 0));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corrected), _mm256_set1_ps(d * act[i][b].d),
                               acc[i]);
    }
  }
  for (int i = 0; i < kTile; ++i) out[i] = hsum_ps(acc[i]);
}

}  // namespace cellm::cpu::avx2

#else  // not x86: dot_tile_kernel never picks these; the rows fall back to the exact dots.

namespace cellm::cpu::avx2 {
#define CELLM_NO_TILE(name)                                                                   \
  void name(const void*, std::size_t, const std::uint8_t* const*, std::int64_t, float*) {}
CELLM_NO_TILE(tile_q4_0)
CELLM_NO_TILE(tile_q4_1)
CELLM_NO_TILE(tile_q5_0)
CELLM_NO_TILE(tile_q8_0)
CELLM_NO_TILE(tile_q4_k)
CELLM_NO_TILE(tile_q5_k)
CELLM_NO_TILE(tile_q6_k)
CELLM_NO_TILE(vnni_q4_0)
CELLM_NO_TILE(vnni_q4_1)
CELLM_NO_TILE(vnni_q5_0)
CELLM_NO_TILE(vnni_q8_0)
#undef CELLM_NO_TILE
float row_q4_0(const void* w, const void* a, std::int64_t c) { return scalar::dot_q4_0(w, a, c); }
float row_q4_1(const void* w, const void* a, std::int64_t c) { return scalar::dot_q4_1(w, a, c); }
float row_q5_0(const void* w, const void* a, std::int64_t c) { return scalar::dot_q5_0(w, a, c); }
float row_q8_0(const void* w, const void* a, std::int64_t c) { return scalar::dot_q8_0(w, a, c); }
}  // namespace cellm::cpu::avx2

#endif
