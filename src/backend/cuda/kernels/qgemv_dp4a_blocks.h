// The int8 GEMV's view of each GGUF block type (qgemv_dp4a.cu; Q6_K and
// Q6_K_R8 in qgemv_dp4a_blocks_q6.h): how a lane loads one unit of a weight
// row (32 weights of the 32-weight types, 64 of the 256-weight ones), the
// row's float scales of that unit (prep), the activations of the same
// positions (Act) and the unit's integer dot products with __dp4a, the
// float scale math once per sub-block (dot).
// Bit layouts as kernels/quant_blocks.h documents them (its helpers are
// reused: scale_min, half_bits, Q6R8Wide::quants).
//
// Loads take the row's alignment A as a template argument (16, 4 or 2: the
// largest that the row start and stride share, capped by what the type's
// offsets keep): 16-byte loads for Q4_K / Q5_K / Q6_K_R8 rows on 16-byte
// boundaries (the uploads put Q4_K and Q6_K_R8 there), 4-byte words
// otherwise, 2-byte halves where the rows sit on 2-byte boundaries.
//
// Every float operation is explicit (fmaf, mul_rn: no contraction left to
// the compiler), so every instantiation computes a row's sums alike.
//
// Plain C++ for the host as well (quant_blocks.h's convention): the host
// test (qgemv_dp4a_blocks_test) runs every type's lanes without a GPU
// against the reference dequantizer, with host stand-ins for __ldg, __dp4a,
// __funnelshift_rc and __fmul_rn.
//
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if !defined(__CUDACC__)
#include <vector_functions.h>
#include <vector_types.h>
#endif

#include "backend/cuda/kernels/quant_blocks.h"
#include "backend/cuda/kernels/quant_blocks_q6r8.h"

// nvcc unrolls the fixed loops (registers, not local memory); the host
// compiler needs no hint.
#if defined(__CUDACC__)
#define CELLM_DP4A_UNROLL _Pragma("unroll")
#else
#define CELLM_DP4A_UNROLL
#endif

namespace cellm::cuda::dp4a {

using qblocks::half_bits;
using qblocks::ld16;
using qblocks::small_if;

// One activation row of the quantized scratch (Q8Rows).
struct ActRow {
  const std::int8_t* q;
  const float* d;
  const float* s;
};

// A read-only load of a T at p (aligned to T on the device).
template <class T>
CELLM_QB_FN T ldg(const void* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const T*>(p));
#else
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
#endif
}

// Four signed byte products added to acc.
CELLM_QB_FN int dot4(std::uint32_t w, std::uint32_t x, int acc) {
#if defined(__CUDA_ARCH__)
  return __dp4a(static_cast<int>(w), static_cast<int>(x), acc);
#else
  for (int i = 0; i < 4; ++i) {
    acc += static_cast<std::int8_t>(w >> (8 * i)) * static_cast<std::int8_t>(x >> (8 * i));
  }
  return acc;
#endif
}

// The 32 bits of hi:lo from bit `shift` up (shift clamped to 32).
CELLM_QB_FN std::uint32_t funnel(std::uint32_t lo, std::uint32_t hi, std::uint32_t shift) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_rc(lo, hi, shift);
#else
  return shift >= 32
             ? hi
             : static_cast<std::uint32_t>(((static_cast<std::uint64_t>(hi) << 32) | lo) >> shift);
#endif
}

// A product that is never fused into a neighbouring add.
CELLM_QB_FN float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

template <int A>
CELLM_QB_FN std::uint32_t ldw(const std::uint8_t* p) {
  if constexpr (A >= 4) {
    return ldg<std::uint32_t>(p);
  } else {
    return ld16(p) | (ld16(p + 2) << 16);
  }
}

template <int A>
CELLM_QB_FN uint4 ld128(const std::uint8_t* p) {
  if constexpr (A >= 16) {
    return ldg<uint4>(p);
  } else {
    return make_uint4(ldw<A>(p), ldw<A>(p + 4), ldw<A>(p + 8), ldw<A>(p + 12));
  }
}

CELLM_QB_FN uint4 act16(const ActRow& x, int pos) {
  return ldg<uint4>(x.q + pos);
}

CELLM_QB_FN std::uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// 32 codes of a 32-block as eight words.
struct Act32 {
  uint4 lo, hi;
  float d, s;
  CELLM_QB_FN std::uint32_t at(int i) const { return i < 4 ? word(lo, i) : word(hi, i - 4); }
};
CELLM_QB_FN void load_act32(Act32& a, const ActRow& x, int block) {
  a.lo = act16(x, 32 * block);
  a.hi = act16(x, 32 * block + 16);
  a.d = ldg<float>(x.d + block);
  a.s = ldg<float>(x.s + block);
}

// ---- Q4_0 and Q8_0: {f16 d; quants}, 18 or 34 bytes --------------------------
// Block b starts at an odd multiple of 2 when b is odd, so a lane reads the
// 4-byte words from the start of its block rounded down to 4 bytes (an odd
// block's first word takes the previous block's last two quants, then d) and
// shifts the quants into place by 16 bits (even b) or 32 (odd b). The last
// word of an even block is half another block's: its top half is read only
// for odd b, so nothing past the row's last block is read.
template <int kBytes>
struct SmallRaw {
  static constexpr int kWords = (kBytes + 2) / 4;  // 5 or 9: the quants' words and d
  std::uint32_t w[kWords];
  std::uint32_t shift;  // 16 (even block) or 32 (odd)
};
template <int kBytes, int A>
CELLM_QB_FN void load_small(SmallRaw<kBytes>& r, const std::uint8_t* row, int b) {
  const int off = kBytes * b;
  const bool odd = (b & 1) != 0;
  const std::uint8_t* p = row + (odd ? off - 2 : off);
  CELLM_DP4A_UNROLL
  for (int i = 0; i + 1 < SmallRaw<kBytes>::kWords; ++i) r.w[i] = ldw<A>(p + 4 * i);
  const std::uint8_t* last = p + 4 * (SmallRaw<kBytes>::kWords - 1);
  r.w[SmallRaw<kBytes>::kWords - 1] = ld16(last) | (odd ? ld16(last + 2) << 16 : 0u);
  r.shift = odd ? 32u : 16u;
}
template <int kBytes>
CELLM_QB_FN float small_d(const SmallRaw<kBytes>& r) {
  return half_bits(r.shift == 16u ? r.w[0] : r.w[0] >> 16);
}
// Quant word i (quants 4i..4i + 3) of the block.
template <int kBytes>
CELLM_QB_FN std::uint32_t small_q(const SmallRaw<kBytes>& r, int i) {
  return funnel(r.w[i], r.w[i + 1], r.shift);
}

// What Q4_0 and Q8_0 share: the loads above, d as the unit's scale and the
// 32-block's activations.
template <int kBytes>
struct SmallBlock {
  static constexpr int kUnit = 32, kMaxAlign = 4;
  using Raw = SmallRaw<kBytes>;
  using Scales = float;
  using Act = Act32;
  template <int A>
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int u) {
    load_small<kBytes, A>(r, row, u);
  }
  CELLM_QB_FN static Scales prep(const Raw& r, int /*u*/) { return small_d(r); }
  CELLM_QB_FN static void load_act(Act& a, const ActRow& x, int u) { load_act32(a, x, u); }
};

// Q4_0: weight = d (q - 8), nibble j low = weight j, high = weight j + 16.
// sum(w x) = d (da sum(q c) - 8 s).
struct Q4_0 : SmallBlock<18> {
  CELLM_QB_FN static float dot(const Raw& r, Scales d, const Act& a, float acc) {
    int sum = 0;
    CELLM_DP4A_UNROLL
    for (int i = 0; i < 4; ++i) {
      const std::uint32_t q = small_q(r, i);
      sum = dot4(q & 0x0f0f0f0fu, a.at(i), sum);
      sum = dot4((q >> 4) & 0x0f0f0f0fu, a.at(4 + i), sum);
    }
    return fmaf(d, fmaf(-8.0f, a.s, mul_rn(a.d, small_if(sum))), acc);
  }
};

// Q8_0: weight = d q (int8).
struct Q8_0 : SmallBlock<34> {
  CELLM_QB_FN static float dot(const Raw& r, Scales d, const Act& a, float acc) {
    int sum = 0;
    CELLM_DP4A_UNROLL
    for (int i = 0; i < 8; ++i) sum = dot4(small_q(r, i), a.at(i), sum);
    return fmaf(d, mul_rn(a.d, small_if(sum)), acc);
  }
};

// Q4_1 {f16 d, m; 16 bytes}: 20-byte blocks keep every word on a 4-byte
// boundary of the row. weight = d q + m: sum(w x) = d da sum(q c) + m s.
struct Q4_1 {
  static constexpr int kUnit = 32, kMaxAlign = 4;
  struct Raw {
    std::uint32_t dm, q[4];
  };
  struct Scales {
    float d, m;
  };
  using Act = Act32;
  template <int A>
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int u) {
    const std::uint8_t* b = row + 20 * u;
    r.dm = ldw<A>(b);
    CELLM_DP4A_UNROLL
    for (int i = 0; i < 4; ++i) r.q[i] = ldw<A>(b + 4 + 4 * i);
  }
  CELLM_QB_FN static Scales prep(const Raw& r, int /*u*/) {
    return {half_bits(r.dm), half_bits(r.dm >> 16)};
  }
  CELLM_QB_FN static void load_act(Act& a, const ActRow& x, int u) { load_act32(a, x, u); }
  CELLM_QB_FN static float dot(const Raw& r, const Scales& sc, const Act& a, float acc) {
    int sum = 0;
    CELLM_DP4A_UNROLL
    for (int i = 0; i < 4; ++i) {
      sum = dot4(r.q[i] & 0x0f0f0f0fu, a.at(i), sum);
      sum = dot4((r.q[i] >> 4) & 0x0f0f0f0fu, a.at(4 + i), sum);
    }
    return fmaf(sc.m, a.s, fmaf(sc.d, mul_rn(a.d, small_if(sum)), acc));
  }
};

// ---- Q4_K and Q5_K: a unit is sub-blocks 2c and 2c + 1 of super-block sb ---
// (u = 4 sb + c): weights 64u.. of the row, the activations' 32-blocks 2u and
// 2u + 1. Quant bytes 32c.. hold sub-block 2c in their low nibbles and
// 2c + 1 in their high ones, in position order, so quant word i lines up with
// activation word i of each block. weight = ds q - dm:
// sum(w x) = ds da sum(q c) - dm s, per sub-block.
struct Act64 {
  uint4 c[4];  // codes 64u..64u + 63
  float2 d, s;
  CELLM_QB_FN std::uint32_t at(int half, int i) const { return word(c[2 * half + i / 4], i % 4); }
};
CELLM_QB_FN void load_act64(Act64& a, const ActRow& x, int u) {
  CELLM_DP4A_UNROLL
  for (int i = 0; i < 4; ++i) a.c[i] = act16(x, 64 * u + 16 * i);
  a.d = ldg<float2>(x.d + 2 * u);
  a.s = ldg<float2>(x.s + 2 * u);
}
struct KScales {
  float ds0, dm0, ds1, dm1;
};
// Sub-blocks 2c and 2c + 1's d * scale and dmin * min (qblocks::scale_min's
// values), both pairs at once: their 6-bit scales and mins are bytes 2c,
// 2c + 1 of the scale words (c < 2), or the low and high nibbles of bytes
// 2c - 4, 2c - 3 of the third word topped by bits 6-7 of the first two words'
// bytes (c >= 2): a shift picks the byte pair, masks assemble both values in
// one word, a select per lane picks the case (c is the lane's, so the warp
// does not branch).
CELLM_QB_FN KScales k_scales(const uint4& head, int u) {
  const int c = u & 3;
  const int at = 16 * (c & 1);
  const std::uint32_t s0 = head.y >> at, s1 = head.z >> at, s2 = head.w >> at;
  const std::uint32_t sc = c < 2 ? s0 & 0x3f3fu : (s2 & 0x0f0fu) | ((s0 >> 2) & 0x3030u);
  const std::uint32_t mn = c < 2 ? s1 & 0x3f3fu : ((s2 >> 4) & 0x0f0fu) | ((s1 >> 2) & 0x3030u);
  const float d = half_bits(head.x), dmin = half_bits(head.x >> 16);
  return {mul_rn(d, qblocks::small_uf(sc & 0xffu)), mul_rn(dmin, qblocks::small_uf(mn & 0xffu)),
          mul_rn(d, qblocks::small_uf(sc >> 8)), mul_rn(dmin, qblocks::small_uf(mn >> 8))};
}
CELLM_QB_FN float k_dot(const KScales& sc, int sum0, int sum1, const Act64& a, float acc) {
  acc = fmaf(sc.ds0, mul_rn(a.d.x, small_if(sum0)), acc);
  acc = fmaf(-sc.dm0, a.s.x, acc);
  acc = fmaf(sc.ds1, mul_rn(a.d.y, small_if(sum1)), acc);
  return fmaf(-sc.dm1, a.s.y, acc);
}

// What Q4_K and Q5_K share: the unit, the scales of its two sub-blocks
// (from the 16-byte head every Raw starts with) and the activations.
struct KBlock {
  static constexpr int kUnit = 64, kMaxAlign = 16;
  using Scales = KScales;
  using Act = Act64;
  template <class Raw>
  CELLM_QB_FN static Scales prep(const Raw& r, int u) {
    return k_scales(r.head, u);
  }
  CELLM_QB_FN static void load_act(Act& a, const ActRow& x, int u) { load_act64(a, x, u); }
};

struct Q4_K : KBlock {
  struct Raw {
    uint4 head, q0, q1;
  };
  template <int A>
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int u) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(u >> 2) * 144;
    r.head = ld128<A>(b);
    r.q0 = ld128<A>(b + 16 + 32 * (u & 3));
    r.q1 = ld128<A>(b + 32 + 32 * (u & 3));
  }
  CELLM_QB_FN static float dot(const Raw& r, const Scales& sc, const Act& a, float acc) {
    int sum0 = 0, sum1 = 0;
    CELLM_DP4A_UNROLL
    for (int i = 0; i < 8; ++i) {
      const std::uint32_t q = word(i < 4 ? r.q0 : r.q1, i % 4);
      sum0 = dot4(q & 0x0f0f0f0fu, a.at(0, i), sum0);
      sum1 = dot4((q >> 4) & 0x0f0f0f0fu, a.at(1, i), sum1);
    }
    return k_dot(sc, sum0, sum1, a, acc);
  }
};

// Q5_K: Q4_K's head and nibbles (quants at 48) plus qh[32] at 16: bit j of
// qh[l] is the fifth bit of weight l of sub-block j.
struct Q5_K : KBlock {
  struct Raw {
    uint4 head, h0, h1, q0, q1;
    int c;
  };
  template <int A>
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int u) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(u >> 2) * 176;
    r.head = ld128<A>(b);
    r.h0 = ld128<A>(b + 16);
    r.h1 = ld128<A>(b + 32);
    r.q0 = ld128<A>(b + 48 + 32 * (u & 3));
    r.q1 = ld128<A>(b + 64 + 32 * (u & 3));
    r.c = u & 3;
  }
  CELLM_QB_FN static float dot(const Raw& r, const Scales& sc, const Act& a, float acc) {
    int sum0 = 0, sum1 = 0;
    const int lo_bit = 2 * r.c;
    CELLM_DP4A_UNROLL
    for (int i = 0; i < 8; ++i) {
      const std::uint32_t q = word(i < 4 ? r.q0 : r.q1, i % 4);
      const std::uint32_t h = word(i < 4 ? r.h0 : r.h1, i % 4);
      const std::uint32_t q0 = (q & 0x0f0f0f0fu) | (((h >> lo_bit) & 0x01010101u) << 4);
      const std::uint32_t q1 =
          ((q >> 4) & 0x0f0f0f0fu) | (((h >> (lo_bit + 1)) & 0x01010101u) << 4);
      sum0 = dot4(q0, a.at(0, i), sum0);
      sum1 = dot4(q1, a.at(1, i), sum1);
    }
    return k_dot(sc, sum0, sum1, a, acc);
  }
};

}  // namespace cellm::cuda::dp4a
