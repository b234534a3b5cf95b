// The int8 GEMV's view of Q6_K and Q6_K_R8 blocks (qgemv_dp4a_blocks.h has
// the other types, the conventions and the host stand-ins).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/qgemv_dp4a_blocks.h"
#include "backend/cuda/kernels/quant_blocks_q6r8.h"

namespace cellm::cuda::dp4a {

// ---- Q6_K and Q6_K_R8 ---------------------------------------------------------
// A unit is a quarter of a super-block sb (u = 4 sb + 2 h + e): half h,
// positions l0 = 16 e .. l0 + 15 of it, in four runs s of 16 weights at
// 128 h + 32 s + l0 (Q6R8Wide's lane map, quant_blocks_q6r8.h), run s with
// scale byte 2 s + e of the half's eight and the activations' 32-block
// 8 sb + 4 h + s (its half e). weight = d sc (q - 32): q - 32 is formed in
// each byte as (q + 0x60) ^ 0x80 (q < 64: no carry between bytes), and
// sum(w x) = d sc da sum((q - 32) c) per run.
struct Q6Raw {
  uint4 a, b, h;  // ql[64h + l0..], ql[64h + 32 + l0..], qh[32h + l0..]
  uint2 sc;       // the half's eight scales
  std::uint32_t d;
  int e;
};
struct Q6Act {
  uint4 c[4];  // run s's 16 codes
  float4 d;    // the four blocks' scales
};
struct Q6Base {
  static constexpr int kUnit = 64;
  using Raw = Q6Raw;
  struct Scales {
    float ds[4];
  };
  using Act = Q6Act;
  CELLM_QB_FN static Scales prep(const Raw& r, int /*u*/) {
    const float d = half_bits(r.d);
    Scales s;
    CELLM_DP4A_UNROLL
    for (int run = 0; run < 4; ++run) {
      const int i = 2 * run + r.e;
      const std::uint32_t w = i < 4 ? r.sc.x : r.sc.y;
      s.ds[run] = mul_rn(d, small_if(static_cast<std::int8_t>(qblocks::byte_of(w, i % 4))));
    }
    return s;
  }
  CELLM_QB_FN static void load_act(Act& a, const ActRow& x, int u) {
    const int sb = u >> 2, h = (u >> 1) & 1, l0 = 16 * (u & 1);
    CELLM_DP4A_UNROLL
    for (int run = 0; run < 4; ++run) a.c[run] = act16(x, 256 * sb + 128 * h + 32 * run + l0);
    a.d = ldg<float4>(x.d + 8 * sb + 4 * h);
  }
  CELLM_QB_FN static float dot(const Raw& r, const Scales& sc, const Act& a, float acc) {
    const float da[4] = {a.d.x, a.d.y, a.d.z, a.d.w};
    CELLM_DP4A_UNROLL
    for (int run = 0; run < 4; ++run) {
      int sum = 0;
      CELLM_DP4A_UNROLL
      for (int i = 0; i < 4; ++i) {
        const std::uint32_t q =
            qblocks::Q6R8Wide::quants(word(r.a, i), word(r.b, i), word(r.h, i), run);
        sum = dot4((q + 0x60606060u) ^ 0x80808080u, word(a.c[run], i), sum);
      }
      acc = fmaf(sc.ds[run], mul_rn(da[run], small_if(sum)), acc);
    }
    return acc;
  }
  // The unit's fields of a block whose ql, qh, scales and d start at the
  // given places (Q6_K's block, or a block of a Q6_K_R8 group).
  template <int A>
  CELLM_QB_FN static void load_fields(Raw& r, const std::uint8_t* ql, const std::uint8_t* qh,
                                      const std::uint8_t* sc, const std::uint8_t* d, int u) {
    const int h = (u >> 1) & 1, l0 = 16 * (u & 1);
    r.a = ld128<A>(ql + 64 * h + l0);
    r.b = ld128<A>(ql + 64 * h + 32 + l0);
    r.h = ld128<A>(qh + 32 * h + l0);
    if constexpr (A >= 8) {
      r.sc = ldg<uint2>(sc + 8 * h);
    } else {
      r.sc = make_uint2(ldw<A>(sc + 8 * h), ldw<A>(sc + 8 * h + 4));
    }
    r.d = ld16(d);
    r.e = u & 1;
  }
};

// Q6_K {ql[128], qh[64], sc[16], f16 d} in 210-byte blocks: 2-byte loads.
struct Q6_K : Q6Base {
  static constexpr int kMaxAlign = 2;
  template <int A>
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int u) {
    const std::uint8_t* b = row + static_cast<std::int64_t>(u >> 2) * 210;
    load_fields<A>(r, b, b + 128, b + 192, b + 208, u);
  }
};

// Q6_K_R8: groups of eight blocks, each field on a 16-byte boundary of the
// group (quant_blocks_q6r8.h).
struct Q6_K_R8 : Q6Base {
  static constexpr int kMaxAlign = 16;
  template <int A>
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int u) {
    using qblocks::Q6R8;
    const int sb = u >> 2, j = sb % Q6R8::kBlocks;
    const std::uint8_t* g = row + static_cast<std::int64_t>(sb / Q6R8::kBlocks) * Q6R8::kBytes;
    load_fields<A>(r, g + Q6R8::ql(j), g + Q6R8::qh(j), g + Q6R8::scales(j), g + Q6R8::d(j), u);
  }
};

}  // namespace cellm::cuda::dp4a
