// How the tensor-core quantized GEMV's lanes get their weights
// (qgemv_mma.cu): which bits a lane loads for a 256-weight group of a row
// and how they become the 8 floats of each of the group's eight mma steps.
// Internal to qgemv_mma.cu; written for the device and the host, so that
// qgemv_mma_src_test.cpp replays a warp's steps with the mma emulated on
// the CPU (no GPU needed). Pure functions.
//
// A warp walks a 16-row tile in groups of 256 weights, eight steps of 32
// (two m16n8k16 mmas a step). At step s, lane (g = lane / 4, t = lane % 4)
// plays the block decoder's lane L(s, t) (quant_blocks.h) for weight rows
// g and g + 8 of the tile: the decoder gives the 8 floats of that lane at
// its positions pos(L, run) + i, the same positions for every row, which
// is all the mma needs (the tile's k order is any permutation of memory
// order that depends on t and s only; the B operand is read in the same
// permutation: qgemv_mma.cu). Every source decodes with the decoders
// themselves, so the values are launch_dequantize's.
//
// A source: Dec (the decoder: runs, run length, kScaled), Raw (a lane's bits
// of one row for one group), load(raw, row, grp, t, blocks), live(grp, s,
// t, blocks) (false: the step's weights lie past k; its A words are zeroed),
// prepare(raw, t) (what the lane's steps of a group share: the K-quants'
// scales), decode(raw, prep, s, t, w) and pos(grp, s, t, run); kPrefetch: Raw is small
// enough to load the next group while this one is multiplied; kScaleSpan
// (FP8 sources): an aligned run of columns holding all of a lane's steps
// of a group.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector_types.h>

#include <cuda_bf16.h>

#include "backend/cuda/cuda_types.h"
#include "backend/cuda/kernels/quant_blocks.h"
#include "backend/cuda/kernels/quant_blocks_q6r8.h"

namespace cellm::cuda::qgemv_mma_detail {

using namespace qblocks;  // NOLINT(google-build-using-namespace): the block decoders

// Loops over a group's steps unroll on the device (their Raws stay in
// registers); the host compiler knows no such pragma.
#if defined(__CUDA_ARCH__)
#define CELLM_QMMA_UNROLL _Pragma("unroll")
#else
#define CELLM_QMMA_UNROLL
#endif

constexpr int kStepsPerGroup = 8;  // mma steps of 32 weights in a 256-weight group

CELLM_QB_FN uint4 ld_u4(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const uint4*>(p));
#else
  uint4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
#endif
}
CELLM_QB_FN uint2 ld_u2(const std::uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const uint2*>(p));
#else
  uint2 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
#endif
}
CELLM_QB_FN std::uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}
// The 16-bit field at bytes 2i, 2i + 1 of v (i < 8).
CELLM_QB_FN std::uint32_t half_of(const uint4& v, int i) {
  return (word_of(v, i / 2) >> (16 * (i % 2))) & 0xffffu;
}

// Any decoder, with its own loads (2- and 4-byte words): step s is decoder
// lane 4s + t, so the four lanes of a row at a step read neighbouring bytes.
// A whole group's Raw is 8 of the decoder's, too many registers to hold two.
template <class D>
struct GenericSrc {
  using Dec = D;
  static constexpr bool kPrefetch = false;
  static constexpr int kScaleSpan = 256;  // a lane's steps cover the whole group
  struct Raw {
    typename D::Raw r[kStepsPerGroup];
  };
  CELLM_QB_FN static int dlane(int s, int t) { return 4 * s + t; }
  CELLM_QB_FN static bool live(int grp, int s, int t, int blocks) {
    return D::valid(grp, dlane(s, t), blocks);
  }
  CELLM_QB_FN static void load(Raw& raw, const std::uint8_t* row, int grp, int t, int blocks) {
    CELLM_QMMA_UNROLL
    for (int s = 0; s < kStepsPerGroup; ++s) {
      if (live(grp, s, t, blocks)) D::load(raw.r[s], row, grp, dlane(s, t));
    }
  }
  struct Prep {};
  CELLM_QB_FN static Prep prepare(const Raw&, int) { return {}; }
  CELLM_QB_FN static void decode(const Raw& raw, const Prep&, int s, int t, float (&w)[8]) {
    D::decode(raw.r[s], dlane(s, t), w);
  }
  CELLM_QB_FN static int pos(int grp, int s, int t, int run) {
    return D::pos(grp, dlane(s, t), run);
  }
};

// Q4_K rows on 16-byte boundaries: step s is decoder lane 8t + s, so lane t's
// eight steps read quant bytes 32t..32t + 31 of the super-block (two 16-byte
// loads) and its 16-byte head (d, dmin, scales) once.
struct Q4kWideSrc {
  using Dec = Q4_K;
  static constexpr bool kPrefetch = true;
  struct Raw {
    uint4 head, q[2];
  };
  CELLM_QB_FN static int dlane(int s, int t) { return 8 * t + s; }
  CELLM_QB_FN static bool live(int, int, int, int) { return true; }
  CELLM_QB_FN static void load(Raw& raw, const std::uint8_t* row, int grp, int t, int /*blocks*/) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(grp) * Q4_K::kBlockBytes;
    raw.head = ld_u4(b);
    raw.q[0] = ld_u4(b + 16 + 32 * t);
    raw.q[1] = ld_u4(b + 32 + 32 * t);
  }
  // Every step's decoder lane 8t + s takes sub-blocks 2t, 2t + 1: their
  // scales once a group.
  using Prep = Q4_K::Scales;
  CELLM_QB_FN static Prep prepare(const Raw& raw, int t) {
    return Q4_K::scales(KHead{raw.head.x, raw.head.y, raw.head.z, raw.head.w}, dlane(0, t));
  }
  CELLM_QB_FN static void decode(const Raw& raw, const Prep& prep, int s, int /*t*/,
                                 float (&w)[8]) {
    // Decoder lane L reads quant word L of the block (bytes 16 + 4L..).
    Q4_K::decode_quants(word_of(raw.q[s / 4], s % 4), prep, w);
  }
  CELLM_QB_FN static int pos(int grp, int s, int t, int run) {
    return Q4_K::pos(grp, dlane(s, t), run);
  }
};

// FP8 rows on 16-byte boundaries: step s is decoder lane 8t + s, codes
// 64t + 8s.. of the group, so lane t reads 64 bytes in four 16-byte loads
// (a 32-weight block of the codes is half of them: rows of k % 256 != 0 end
// inside a group, and the loads past k are skipped).
struct Fp8WideSrc {
  using Dec = F8_E4M3;
  static constexpr bool kPrefetch = true;
  static constexpr int kScaleSpan = 64;  // lane t's steps: columns 64t..64t + 63
  struct Raw {
    uint4 q[4];
  };
  CELLM_QB_FN static int dlane(int s, int t) { return 8 * t + s; }
  CELLM_QB_FN static bool live(int grp, int s, int t, int blocks) {
    return F8_E4M3::valid(grp, dlane(s, t), blocks);
  }
  CELLM_QB_FN static void load(Raw& raw, const std::uint8_t* row, int grp, int t, int blocks) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(grp) * 256 + 64 * t;
    CELLM_QMMA_UNROLL
    for (int j = 0; j < 4; ++j) {
      raw.q[j] = live(grp, 2 * j, t, blocks) ? ld_u4(b + 16 * j) : make_uint4(0, 0, 0, 0);
    }
  }
  struct Prep {};
  CELLM_QB_FN static Prep prepare(const Raw&, int) { return {}; }
  CELLM_QB_FN static void decode(const Raw& raw, const Prep&, int s, int t, float (&w)[8]) {
    const F8_E4M3::Raw r{
        {word_of(raw.q[s / 2], 2 * (s % 2)), word_of(raw.q[s / 2], 2 * (s % 2) + 1)}};
    F8_E4M3::decode(r, dlane(s, t), w);
  }
  CELLM_QB_FN static int pos(int grp, int s, int t, int run) {
    return F8_E4M3::pos(grp, dlane(s, t), run);
  }
};

// Q6_K_R8 rows on 16-byte boundaries (quant_blocks_q6r8.h): step s is Q6_K's
// decoder lane 8t + s, i.e. half h = t / 2 and positions l = 16 (t % 2) + 2s
// of it, so lane t's eight steps read 16 bytes of each of the block's two ql
// runs and of its qh, the half's 8 scales and d.
struct Q6r8WideSrc {
  using Dec = Q6_K_R8;
  static constexpr bool kPrefetch = true;
  struct Raw {
    uint4 qla, qlb, qh;
    uint2 sc;
    std::uint32_t d;
  };
  CELLM_QB_FN static int dlane(int s, int t) { return 8 * t + s; }
  CELLM_QB_FN static bool live(int, int, int, int) { return true; }
  CELLM_QB_FN static void load(Raw& raw, const std::uint8_t* row, int grp, int t, int /*blocks*/) {
    const std::uint8_t* group = row + static_cast<std::int64_t>(grp / Q6R8::kBlocks) * Q6R8::kBytes;
    const int j = grp % Q6R8::kBlocks, h = t / 2, l0 = 16 * (t % 2);
    raw.qla = ld_u4(group + Q6R8::ql(j) + 64 * h + l0);
    raw.qlb = ld_u4(group + Q6R8::ql(j) + 64 * h + 32 + l0);
    raw.qh = ld_u4(group + Q6R8::qh(j) + 32 * h + l0);
    raw.sc = ld_u2(group + Q6R8::scales(j) + 8 * h);
    raw.d = ld16(group + Q6R8::d(j));
  }
  // Every step's decoder lane 8t + s reads scale bytes t % 2 of the half's
  // four pairs: their d * scale once a group.
  using Prep = Q6_K::Scales;
  CELLM_QB_FN static Prep prepare(const Raw& raw, int t) {
    Q6_K::Raw r{};
    r.sc01 = raw.sc.x;
    r.sc23 = raw.sc.y;
    r.d = raw.d;
    return Q6_K::scales(r, dlane(0, t));
  }
  CELLM_QB_FN static void decode(const Raw& raw, const Prep& prep, int s, int /*t*/,
                                 float (&w)[8]) {
    // Q6_K's lane reads 2 bytes of each field at l: bytes 2s, 2s + 1 of the loads.
    Q6_K::Raw r{};
    r.qla = half_of(raw.qla, s);
    r.qlb = half_of(raw.qlb, s);
    r.qh = half_of(raw.qh, s);
    Q6_K::decode_quants(r, prep, w);
  }
  CELLM_QB_FN static int pos(int grp, int s, int t, int run) {
    return Q6_K::pos(grp, dlane(s, t), run);
  }
};

// One step's A words for lane (g, t) from the decoded floats of weight rows
// g (wa) and g + 8 (wb), rounded to bf16 (zeros for a dead step): a1 for
// the first mma (w[0..3]: a0 = row g, tile k 2t, 2t + 1 <- w[0], w[1]; a1 =
// row g + 8, the same k; a2, a3 = tile k 2t + 8, 2t + 9 <- w[2], w[3]), a2
// for the second (w[4..7]).
CELLM_QB_FN unsigned bf16_pair(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  unsigned bits;
  std::memcpy(&bits, &pair, sizeof(bits));
  return bits;
}
CELLM_QB_FN void a_words(const float (&wa)[8], const float (&wb)[8], bool live, unsigned (&a1)[4],
                         unsigned (&a2)[4]) {
  a1[0] = live ? bf16_pair(wa[0], wa[1]) : 0u;
  a1[1] = live ? bf16_pair(wb[0], wb[1]) : 0u;
  a1[2] = live ? bf16_pair(wa[2], wa[3]) : 0u;
  a1[3] = live ? bf16_pair(wb[2], wb[3]) : 0u;
  a2[0] = live ? bf16_pair(wa[4], wa[5]) : 0u;
  a2[1] = live ? bf16_pair(wb[4], wb[5]) : 0u;
  a2[2] = live ? bf16_pair(wa[6], wa[7]) : 0u;
  a2[3] = live ? bf16_pair(wb[6], wb[7]) : 0u;
}

// One step's B words for lane quad t: word i holds the inputs at the
// positions of w[2i], w[2i + 1] (b0, b1 of the first mma: words 0, 1; of the
// second: 2, 3), so that the tile's k order is the A words'. They come in
// the decoder's runs: f(word, at) for each run, whose kRunLen / 2 words from
// `word` hold the inputs at at, at + 1, ... The kernel stages every step's
// words in this order (one 16-byte load a step for a lane).
template <class Src, class F>
CELLM_QB_FN void for_each_b_run(int grp, int s, int t, F&& f) {
  constexpr int kLen = Src::Dec::kRunLen;
  static_assert(kLen == 2 || kLen == 4 || kLen == 8, "runs of 2, 4 or 8 weights");
  for (int run = 0; run < 8 / kLen; ++run) f(run * (kLen / 2), Src::pos(grp, s, t, run));
}

// The words for_each_b_run names, read on the host from an input row of k
// columns (zeros past k, as the kernel stages them): the replay test's B.
template <class Src>
inline void host_b_words(const bf16* row, int k, int grp, int s, int t, unsigned (&b)[4]) {
  constexpr int kLen = Src::Dec::kRunLen;
  for_each_b_run<Src>(grp, s, t, [&](int word, int at) {
    if (at < k) {
      std::memcpy(b + word, row + at, 2 * kLen);
    } else {
      std::memset(b + word, 0, 2 * kLen);
    }
  });
}

}  // namespace cellm::cuda::qgemv_mma_detail
