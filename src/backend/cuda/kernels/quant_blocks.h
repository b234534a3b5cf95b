// How the quantized GEMV's lanes decode GGUF blocks (kernels/qgemv.cuh),
// written once for the device and the host: plain C++ that nvcc compiles for
// both and a host compiler for the tests, which check every decoder against
// the CPU's reference dequantizer (format/ggml_types.h) without a GPU.
//
// A warp walks a weight row in groups of 256 weights (a K-quant super-block,
// or eight 32-weight blocks); for group g, lane `lane` holds 8 of them: kRuns
// runs of kRunLen consecutive positions (pos()). load() reads the raw bits a
// lane needs, decode() turns them into floats in run order. Layouts follow
// ggml's block structs (the reference dequantizers' comments say where each
// bit lives); every multi-byte read is of 2 or 4 aligned bytes (Q4_K and
// Q5_K read 4-byte words, so their rows must be 4-byte aligned).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define CELLM_QB_FN __host__ __device__ __forceinline__
#else
#define CELLM_QB_FN inline
#endif

namespace cellm::cuda::qblocks {

CELLM_QB_FN std::uint32_t ld16(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned short*>(p));
#else
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
#endif
}

CELLM_QB_FN std::uint32_t ld32(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned int*>(p));
#else
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

CELLM_QB_FN float float_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
#endif
}

// The f16 in the low 16 bits of `bits`.
CELLM_QB_FN float half_bits(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(bits & 0xffffu)));
  return f;
#else
  // (core/dtype.h has this too, but .cu files must not include fmt.)
  const std::uint32_t sign = (bits & 0x8000u) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  std::uint32_t man = bits & 0x3ffu;
  std::uint32_t out;
  if (exp == 0x1fu) {
    out = sign | 0x7f800000u | (man << 13);  // inf / NaN
  } else if (exp != 0) {
    out = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    out = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    out = sign | ((112u - static_cast<std::uint32_t>(e)) << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
#endif
}

// Small integers as floats. The device builds the float from its bits
// (2^23 + u, or 1.5 * 2^23 + i, then subtracts that base: two full-rate
// instructions) instead of the quarter-rate integer conversion, which bound
// the K-quant GEMVs; both ways are exact for these ranges.
CELLM_QB_FN float small_uf(std::uint32_t u) {  // 0 <= u < 2^23
#if defined(__CUDA_ARCH__)
  return __uint_as_float(0x4B000000u | u) - 8388608.0f;
#else
  return static_cast<float>(u);
#endif
}
CELLM_QB_FN float small_if(int i) {  // |i| < 2^22
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x4B400000 + i) - 12582912.0f;
#else
  return static_cast<float>(i);
#endif
}

CELLM_QB_FN std::uint32_t byte_of(std::uint32_t word, int i) {
  return (word >> (8 * i)) & 0xffu;
}

// The 32-weight blocks: a lane takes block 8g + lane / 4, and within it the
// four bytes 4j..4j + 3 of its quants (j = lane % 4): weights 4j..4j + 3 from
// the low nibbles and 16 + 4j.. from the high ones (Q4_0, Q4_1, Q5_0), or
// weights 8j..8j + 7 (Q8_0).
CELLM_QB_FN int small_block(int g, int lane) {
  return g * 8 + lane / 4;
}
CELLM_QB_FN int nibble_pos(int g, int lane, int run) {
  return small_block(g, lane) * 32 + 4 * (lane % 4) + 16 * run;
}

// What the four 32-weight nibble types (Q4_0, Q4_1, Q5_0, Q5_1) share: a
// lane's block, its positions, and its four quant bytes at `at` (where the
// nibbles start in a block of kBytes).
template <int kBytes>
struct NibbleBlock {
  static constexpr int kBlockElems = 32, kBlockBytes = kBytes, kRuns = 2, kRunLen = 4;
  CELLM_QB_FN static bool valid(int g, int lane, int blocks) {
    return small_block(g, lane) < blocks;
  }
  CELLM_QB_FN static int pos(int g, int lane, int run) { return nibble_pos(g, lane, run); }
  CELLM_QB_FN static const std::uint8_t* block(const std::uint8_t* row, int g, int lane) {
    return row + static_cast<std::int64_t>(small_block(g, lane)) * kBytes;
  }
  CELLM_QB_FN static std::uint32_t quants(const std::uint8_t* b, int at, int lane) {
    return ld16(b + at + 4 * (lane % 4)) | (ld16(b + at + 2 + 4 * (lane % 4)) << 16);
  }
};

// Q4_0 {f16 d; 16 bytes}: weight = d * (nibble - 8).
struct Q4_0 : NibbleBlock<18> {
  struct Raw {
    std::uint32_t d, q;
  };
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = block(row, g, lane);
    r.d = ld16(b);
    r.q = quants(b, 2, lane);
  }
  CELLM_QB_FN static void decode(const Raw& r, int /*lane*/, float (&w)[8]) {
    const float d = half_bits(r.d);
    for (int t = 0; t < 4; ++t) {
      const std::uint32_t q = byte_of(r.q, t);
      w[t] = d * small_if(static_cast<int>(q & 0xfu) - 8);
      w[4 + t] = d * small_if(static_cast<int>(q >> 4) - 8);
    }
  }
};

// Q4_1 {f16 d, m; 16 bytes}: weight = d * nibble + m.
struct Q4_1 : NibbleBlock<20> {
  struct Raw {
    std::uint32_t dm, q;
  };
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = block(row, g, lane);
    r.dm = ld16(b) | (ld16(b + 2) << 16);
    r.q = quants(b, 4, lane);
  }
  CELLM_QB_FN static void decode(const Raw& r, int /*lane*/, float (&w)[8]) {
    const float d = half_bits(r.dm), m = half_bits(r.dm >> 16);
    for (int t = 0; t < 4; ++t) {
      const std::uint32_t q = byte_of(r.q, t);
      w[t] = d * small_uf(q & 0xfu) + m;
      w[4 + t] = d * small_uf(q >> 4) + m;
    }
  }
};

// The fifth bits of Q5_0/Q5_1: weight i takes bit i of qh; a lane's four
// low-nibble weights are 4j..4j + 3 and its high ones 16 + 4j.. (j = lane % 4).
CELLM_QB_FN void five_bit(std::uint32_t q, std::uint32_t qh, int lane, int t, std::uint32_t& lo,
                          std::uint32_t& hi) {
  const int j0 = 4 * (lane % 4);
  const std::uint32_t byte = byte_of(q, t);
  lo = (byte & 0xfu) | (((qh >> (j0 + t)) & 1u) << 4);
  hi = (byte >> 4) | (((qh >> (j0 + t + 16)) & 1u) << 4);
}

// Q5_0 {f16 d; 32 high bits qh; 16 bytes}: weight = d * (5-bit q - 16).
struct Q5_0 : NibbleBlock<22> {
  struct Raw {
    std::uint32_t d, qh, q;
  };
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = block(row, g, lane);
    r.d = ld16(b);
    r.qh = ld16(b + 2) | (ld16(b + 4) << 16);
    r.q = quants(b, 6, lane);
  }
  CELLM_QB_FN static void decode(const Raw& r, int lane, float (&w)[8]) {
    const float d = half_bits(r.d);
    for (int t = 0; t < 4; ++t) {
      std::uint32_t lo, hi;
      five_bit(r.q, r.qh, lane, t, lo, hi);
      w[t] = d * small_if(static_cast<int>(lo) - 16);
      w[4 + t] = d * small_if(static_cast<int>(hi) - 16);
    }
  }
};

// Q5_1 {f16 d, m; 32 high bits qh; 16 bytes}: weight = d * 5-bit q + m.
struct Q5_1 : NibbleBlock<24> {
  struct Raw {
    std::uint32_t dm, qh, q;
  };
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = block(row, g, lane);
    r.dm = ld16(b) | (ld16(b + 2) << 16);
    r.qh = ld16(b + 4) | (ld16(b + 6) << 16);
    r.q = quants(b, 8, lane);
  }
  CELLM_QB_FN static void decode(const Raw& r, int lane, float (&w)[8]) {
    const float d = half_bits(r.dm), m = half_bits(r.dm >> 16);
    for (int t = 0; t < 4; ++t) {
      std::uint32_t lo, hi;
      five_bit(r.q, r.qh, lane, t, lo, hi);
      w[t] = d * small_uf(lo) + m;
      w[4 + t] = d * small_uf(hi) + m;
    }
  }
};

// Q8_0 {f16 d; 32 int8}: weight = d * q.
struct Q8_0 {
  static constexpr int kBlockElems = 32, kBlockBytes = 34, kRuns = 1, kRunLen = 8;
  struct Raw {
    std::uint32_t d, q[4];
  };
  CELLM_QB_FN static bool valid(int g, int lane, int blocks) {
    return small_block(g, lane) < blocks;
  }
  CELLM_QB_FN static int pos(int g, int lane, int /*run*/) {
    return small_block(g, lane) * 32 + 8 * (lane % 4);
  }
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(small_block(g, lane)) * kBlockBytes;
    r.d = ld16(b);
    for (int t = 0; t < 4; ++t) r.q[t] = ld16(b + 2 + 8 * (lane % 4) + 2 * t);
  }
  CELLM_QB_FN static void decode(const Raw& r, int /*lane*/, float (&w)[8]) {
    const float d = half_bits(r.d);
    for (int t = 0; t < 4; ++t) {
      w[2 * t] = d * small_if(static_cast<std::int8_t>(byte_of(r.q[t], 0)));
      w[2 * t + 1] = d * small_if(static_cast<std::int8_t>(byte_of(r.q[t], 1)));
    }
  }
};

// Q4_K and Q5_K share their head {f16 d, dmin; 12 bytes packing eight 6-bit
// scales and mins} and their nibbles (bytes 32c..32c + 31 hold sub-block 2c
// in the low nibbles, 2c + 1 in the high ones): a lane takes nibble bytes
// 4 lane..4 lane + 3, i.e. weights 64c + l.. and 64c + 32 + l.. (c = lane / 8,
// l = 4 (lane % 8)); weight = d * scale * q - dmin * min.
struct KHead {
  std::uint32_t dm, s0, s1, s2;
};
CELLM_QB_FN void load_head(KHead& h, const std::uint8_t* b) {
  h.dm = ld32(b);
  h.s0 = ld32(b + 4);
  h.s1 = ld32(b + 8);
  h.s2 = ld32(b + 12);
}
CELLM_QB_FN std::uint32_t scale_byte(const KHead& h, int t) {
  return byte_of(t < 4 ? h.s0 : (t < 8 ? h.s1 : h.s2), t & 3);
}
// Sub-block j's d * scale and dmin * min.
CELLM_QB_FN void scale_min(const KHead& h, int j, float& ds, float& dm) {
  std::uint32_t sc, mn;
  if (j < 4) {
    sc = scale_byte(h, j) & 63u;
    mn = scale_byte(h, j + 4) & 63u;
  } else {
    sc = (scale_byte(h, j + 4) & 0xfu) | ((scale_byte(h, j - 4) >> 6) << 4);
    mn = (scale_byte(h, j + 4) >> 4) | ((scale_byte(h, j) >> 6) << 4);
  }
  ds = half_bits(h.dm) * small_uf(sc);
  dm = half_bits(h.dm >> 16) * small_uf(mn);
}
CELLM_QB_FN int k_nibble_pos(int g, int lane, int run) {
  return g * 256 + 64 * (lane / 8) + 4 * (lane % 8) + 32 * run;
}

struct Q4_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 144, kRuns = 2, kRunLen = 4;
  struct Raw {
    KHead h;
    std::uint32_t q;
  };
  CELLM_QB_FN static bool valid(int, int, int) { return true; }
  CELLM_QB_FN static int pos(int g, int lane, int run) { return k_nibble_pos(g, lane, run); }
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g) * kBlockBytes;
    load_head(r.h, b);
    r.q = ld32(b + 16 + 4 * lane);
  }
  // What a lane's 8 weights share: d * scale and dmin * min of sub-blocks
  // 2c and 2c + 1 (c = lane / 8). Split from decode() so that a kernel whose
  // lane decodes several words of one super-block works them out once.
  struct Scales {
    float d0, m0, d1, m1;
  };
  CELLM_QB_FN static Scales scales(const KHead& h, int lane) {
    Scales s;
    scale_min(h, 2 * (lane / 8), s.d0, s.m0);
    scale_min(h, 2 * (lane / 8) + 1, s.d1, s.m1);
    return s;
  }
  // The 8 weights of quant word q (low nibbles: sub-block 2c, high: 2c + 1).
  CELLM_QB_FN static void decode_quants(std::uint32_t q4, const Scales& s, float (&w)[8]) {
    for (int t = 0; t < 4; ++t) {
      const std::uint32_t q = byte_of(q4, t);
      w[t] = s.d0 * small_uf(q & 0xfu) - s.m0;
      w[4 + t] = s.d1 * small_uf(q >> 4) - s.m1;
    }
  }
  CELLM_QB_FN static void decode(const Raw& r, int lane, float (&w)[8]) {
    decode_quants(r.q, scales(r.h, lane), w);
  }
};

// Q5_K: Q4_K's layout plus qh[32] after the scales: bit k of qh[l] is the
// fifth bit of weight l of sub-block k.
struct Q5_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 176, kRuns = 2, kRunLen = 4;
  struct Raw {
    KHead h;
    std::uint32_t qh, q;
  };
  CELLM_QB_FN static bool valid(int, int, int) { return true; }
  CELLM_QB_FN static int pos(int g, int lane, int run) { return k_nibble_pos(g, lane, run); }
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g) * kBlockBytes;
    load_head(r.h, b);
    r.qh = ld32(b + 16 + 4 * (lane % 8));
    r.q = ld32(b + 48 + 4 * lane);
  }
  CELLM_QB_FN static void decode(const Raw& r, int lane, float (&w)[8]) {
    const int c = lane / 8;
    float d0, m0, d1, m1;
    scale_min(r.h, 2 * c, d0, m0);
    scale_min(r.h, 2 * c + 1, d1, m1);
    for (int t = 0; t < 4; ++t) {
      const std::uint32_t q = byte_of(r.q, t);
      const std::uint32_t h = byte_of(r.qh, t);
      const std::uint32_t lo = (q & 0xfu) | (((h >> (2 * c)) & 1u) << 4);
      const std::uint32_t hi = (q >> 4) | (((h >> (2 * c + 1)) & 1u) << 4);
      w[t] = d0 * small_uf(lo) - m0;
      w[4 + t] = d1 * small_uf(hi) - m1;
    }
  }
};

// Q6_K {128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8
// scales, f16 d}, in two halves of 128 weights: in half h, for l in 0..31,
// ql[64h + l], ql[64h + l + 32] and qh[32h + l] give the weights
// 128h + l + {0, 32, 64, 96} with the scales sc[8h + l / 16 + {0, 2, 4, 6}];
// weight = d * scale * (q - 32). A lane takes h = lane / 16 and l = 2 (lane
// % 16), l + 1: four runs of two.
struct Q6_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 210, kRuns = 4, kRunLen = 2;
  struct Raw {
    std::uint32_t qla, qlb, qh, sc01, sc23, d;
  };
  CELLM_QB_FN static bool valid(int, int, int) { return true; }
  CELLM_QB_FN static int pos(int g, int lane, int run) {
    return g * 256 + 128 * (lane / 16) + 2 * (lane % 16) + 32 * run;
  }
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g) * kBlockBytes;
    load_fields(r, b, b + 128, b + 192, b + 208, lane);
  }
  // A block's four fields wherever they lie (Q6_K_R8 moves them apart:
  // quant_blocks_q6r8.h).
  CELLM_QB_FN static void load_fields(Raw& r, const std::uint8_t* ql, const std::uint8_t* qh,
                                      const std::uint8_t* sc, const std::uint8_t* d, int lane) {
    const int h = lane / 16, l = 2 * (lane % 16);
    r.qla = ld16(ql + 64 * h + l);
    r.qlb = ld16(ql + 64 * h + l + 32);
    r.qh = ld16(qh + 32 * h + l);
    // sc[8h + is + 2t] (is = l / 16) is byte `is` of the t-th 16-bit word.
    const std::uint8_t* s = sc + 8 * h;
    r.sc01 = ld16(s) | (ld16(s + 2) << 16);
    r.sc23 = ld16(s + 4) | (ld16(s + 6) << 16);
    r.d = ld16(d);
  }
  // d * scale of the lane's four runs (from r.sc01, r.sc23 and r.d only).
  // Split from decode() so that a kernel whose lane decodes several pairs
  // of one half-block works them out once.
  struct Scales {
    float ds[4];
  };
  CELLM_QB_FN static Scales scales(const Raw& r, int lane) {
    const float d = half_bits(r.d);
    const int is = (2 * (lane % 16)) / 16;
    Scales out;
    for (int t = 0; t < 4; ++t) {
      const std::uint32_t word = t < 2 ? r.sc01 : r.sc23;
      const std::uint32_t s = (word >> (16 * (t & 1) + 8 * is)) & 0xffu;
      out.ds[t] = d * small_if(static_cast<std::int8_t>(s));
    }
    return out;
  }
  CELLM_QB_FN static void decode(const Raw& r, int lane, float (&w)[8]) {
    decode_quants(r, scales(r, lane), w);
  }
  // The 8 weights of the lane's two positions (r.qla, r.qlb, r.qh).
  CELLM_QB_FN static void decode_quants(const Raw& r, const Scales& sc, float (&w)[8]) {
    const float(&ds)[4] = sc.ds;
    for (int e = 0; e < 2; ++e) {
      const std::uint32_t a = byte_of(r.qla, e), b = byte_of(r.qlb, e), h = byte_of(r.qh, e);
      const int q0 = static_cast<int>((a & 0xfu) | ((h & 3u) << 4)) - 32;
      const int q1 = static_cast<int>((b & 0xfu) | (((h >> 2) & 3u) << 4)) - 32;
      const int q2 = static_cast<int>((a >> 4) | (((h >> 4) & 3u) << 4)) - 32;
      const int q3 = static_cast<int>((b >> 4) | (((h >> 6) & 3u) << 4)) - 32;
      // Run r is at +32r; element e of it.
      w[0 + e] = ds[0] * small_if(q0);
      w[2 + e] = ds[1] * small_if(q1);
      w[4 + e] = ds[2] * small_if(q2);
      w[6 + e] = ds[3] * small_if(q3);
    }
  }
};

// Q2_K and Q3_K keep 2-bit quants the way Q6_K keeps its low bits: weight
// 128h + 32s + l (h half, s < 4, l < 32) is bits 2s..2s + 1 of qs[32h + l]
// and has scale (e / 16) = 8h + 2s + l / 16. A lane takes h = lane / 16 and
// l = 2 (lane % 16), l + 1: four runs of two, as Q6_K.
CELLM_QB_FN int two_bit_pos(int g, int lane, int run) {
  return g * 256 + 128 * (lane / 16) + 2 * (lane % 16) + 32 * run;
}

// Q2_K {16 scale bytes (low nibble scale, high nibble min); 64 bytes of
// quants; f16 d, dmin}: weight = d * scale * q - dmin * min.
struct Q2_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 84, kRuns = 4, kRunLen = 2;
  struct Raw {
    std::uint32_t q, sc01, sc23, dm;
  };
  CELLM_QB_FN static bool valid(int, int, int) { return true; }
  CELLM_QB_FN static int pos(int g, int lane, int run) { return two_bit_pos(g, lane, run); }
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g) * kBlockBytes;
    const int h = lane / 16, l = 2 * (lane % 16);
    r.q = ld16(b + 16 + 32 * h + l);
    // Scales 8h + is + 2s (is = l / 16): byte `is` of the s-th 16-bit word.
    r.sc01 = ld16(b + 8 * h) | (ld16(b + 8 * h + 2) << 16);
    r.sc23 = ld16(b + 8 * h + 4) | (ld16(b + 8 * h + 6) << 16);
    r.dm = ld16(b + 80) | (ld16(b + 82) << 16);
  }
  CELLM_QB_FN static void decode(const Raw& r, int lane, float (&w)[8]) {
    const float d = half_bits(r.dm), dmin = half_bits(r.dm >> 16);
    const int is = (2 * (lane % 16)) / 16;
    for (int s = 0; s < 4; ++s) {
      const std::uint32_t sc = ((s < 2 ? r.sc01 : r.sc23) >> (16 * (s & 1) + 8 * is)) & 0xffu;
      const float dl = d * small_uf(sc & 0xfu);
      const float ml = dmin * small_uf(sc >> 4);
      for (int e = 0; e < 2; ++e) {
        const std::uint32_t q = (byte_of(r.q, e) >> (2 * s)) & 3u;
        w[2 * s + e] = dl * small_uf(q) - ml;
      }
    }
  }
};

// Q3_K {32 bytes hmask; 64 bytes of quants; 12 bytes packing sixteen 6-bit
// scales; f16 d}: weight = d * (scale - 32) * (q - (bit 4h + s of hmask[l]
// ? 0 : 4)); scale j has its low four bits in byte j % 8 (low nibble for
// j < 8, high for j >= 8) and its top two in byte 8 + j % 4 at 2 (j / 4).
struct Q3_K {
  static constexpr int kBlockElems = 256, kBlockBytes = 110, kRuns = 4, kRunLen = 2;
  struct Raw {
    std::uint32_t q, hm, s0, s1, s2, d;
  };
  CELLM_QB_FN static bool valid(int, int, int) { return true; }
  CELLM_QB_FN static int pos(int g, int lane, int run) { return two_bit_pos(g, lane, run); }
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g) * kBlockBytes;
    const int h = lane / 16, l = 2 * (lane % 16);
    r.q = ld16(b + 32 + 32 * h + l);
    r.hm = ld16(b + l);
    r.s0 = ld16(b + 96) | (ld16(b + 98) << 16);
    r.s1 = ld16(b + 100) | (ld16(b + 102) << 16);
    r.s2 = ld16(b + 104) | (ld16(b + 106) << 16);
    r.d = ld16(b + 108);
  }
  CELLM_QB_FN static std::uint32_t scale_byte(const Raw& r, int t) {
    return byte_of(t < 4 ? r.s0 : (t < 8 ? r.s1 : r.s2), t & 3);
  }
  CELLM_QB_FN static void decode(const Raw& r, int lane, float (&w)[8]) {
    const float d = half_bits(r.d);
    const int h = lane / 16, is = (2 * (lane % 16)) / 16;
    for (int s = 0; s < 4; ++s) {
      const int j = 8 * h + 2 * s + is;
      const std::uint32_t low = (j < 8 ? scale_byte(r, j) : scale_byte(r, j - 8) >> 4) & 0xfu;
      const std::uint32_t high = (scale_byte(r, 8 + j % 4) >> (2 * (j / 4))) & 3u;
      const float dl = d * small_if(static_cast<int>(low | (high << 4)) - 32);
      for (int e = 0; e < 2; ++e) {
        const int q = static_cast<int>((byte_of(r.q, e) >> (2 * s)) & 3u) -
                      (((byte_of(r.hm, e) >> (4 * h + s)) & 1u) != 0 ? 0 : 4);
        w[2 * s + e] = dl * small_if(q);
      }
    }
  }
};

// IQ4_XS {f16 d; u16 scales_h; 4 bytes scales_l; 128 bytes of 4-bit indices
// into a fixed non-uniform grid}: sub-block ib of 32 weights has scale
// (nibble ib % 2 of scales_l[ib / 2] | bits 2ib..2ib + 1 of scales_h << 4)
// - 32 and its indices in qs[16 ib..16 ib + 15] (low nibbles first). A lane
// takes ib = lane / 4 and bytes 4j..4j + 3 of it (j = lane % 4).
CELLM_QB_FN int iq4_grid(std::uint32_t i) {
  // -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113
  // as four words of int8 (a register select, no table in memory).
  const std::uint32_t word = i < 4    ? 0xbfad9881u
                             : i < 8  ? 0xf6eaddcfu
                             : i < 12 ? 0x26190d01u
                                      : 0x71594535u;
  return static_cast<std::int8_t>((word >> (8 * (i & 3u))) & 0xffu);
}
struct IQ4_XS {
  static constexpr int kBlockElems = 256, kBlockBytes = 136, kRuns = 2, kRunLen = 4;
  struct Raw {
    std::uint32_t dh, sl, q;
  };
  CELLM_QB_FN static bool valid(int, int, int) { return true; }
  CELLM_QB_FN static int pos(int g, int lane, int run) {
    return g * 256 + 32 * (lane / 4) + 4 * (lane % 4) + 16 * run;
  }
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(g) * kBlockBytes;
    r.dh = ld16(b) | (ld16(b + 2) << 16);
    r.sl = ld16(b + 4) | (ld16(b + 6) << 16);
    const std::uint8_t* q = b + 8 + 16 * (lane / 4) + 4 * (lane % 4);
    r.q = ld16(q) | (ld16(q + 2) << 16);
  }
  CELLM_QB_FN static void decode(const Raw& r, int lane, float (&w)[8]) {
    const int ib = lane / 4;
    const std::uint32_t ls =
        ((byte_of(r.sl, ib / 2) >> (4 * (ib % 2))) & 0xfu) | (((r.dh >> (16 + 2 * ib)) & 3u) << 4);
    const float dl = half_bits(r.dh) * small_if(static_cast<int>(ls) - 32);
    for (int t = 0; t < 4; ++t) {
      const std::uint32_t q = byte_of(r.q, t);
      w[t] = dl * small_if(iq4_grid(q & 0xfu));
      w[4 + t] = dl * small_if(iq4_grid(q >> 4));
    }
  }
};

// FP8 E4M3 (Hugging Face FP8 checkpoints, `--quantize fp8`): a row is its
// bare codes, one byte a weight, and the scales live beside the rows (one
// per row and run of scale_cols columns; the kernels multiply them in, so
// this decoder's kScaled). A lane takes 8 consecutive codes of a 32-weight
// block, as Q8_0 does. The code becomes an f16 with the same sign, exponent
// and mantissa bits (E4M3's bias 7 against f16's 15: a factor 2^-8, exact
// for normals and subnormals alike), times 256; S.1111.111 is NaN.
CELLM_QB_FN float e4m3_value(std::uint32_t code) {
  const std::uint32_t h = ((code & 0x80u) << 8) | ((code & 0x7fu) << 7);
  const float v = half_bits(h) * 256.0f;
  return (code & 0x7fu) == 0x7fu ? float_bits(0x7fc00000u | ((code & 0x80u) << 24)) : v;
}
struct F8_E4M3 {
  static constexpr int kBlockElems = 32, kBlockBytes = 32, kRuns = 1, kRunLen = 8;
  static constexpr bool kScaled = true;
  struct Raw {
    std::uint32_t q[2];
  };
  CELLM_QB_FN static bool valid(int g, int lane, int blocks) {
    return small_block(g, lane) < blocks;
  }
  CELLM_QB_FN static int pos(int g, int lane, int /*run*/) {
    return small_block(g, lane) * 32 + 8 * (lane % 4);
  }
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* b = row + pos(g, lane, 0);
    r.q[0] = ld32(b);
    r.q[1] = ld32(b + 4);
  }
  CELLM_QB_FN static void decode(const Raw& r, int /*lane*/, float (&w)[8]) {
    for (int t = 0; t < 8; ++t) w[t] = e4m3_value(byte_of(r.q[t / 4], t % 4));
  }
};

// Whether decoder D's values still take the per-row scales beside the rows.
template <class D>
constexpr bool scaled_v = requires {
  D::kScaled;
};

}  // namespace cellm::cuda::qblocks
