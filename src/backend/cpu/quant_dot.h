// Integer dot products between GGUF block-quantized weight rows and
// activations quantized per block to int8, the kernels under the fast CPU
// program (fast_forward.h).
//
// Weight rows stay in the file's blocks (Q4_0, Q4_1, Q5_0, Q8_0 with 32
// elements a block; Q4_K, Q5_K, Q6_K with 256). Activations are quantized to
// the partner format the weight type needs: ActQ8 (32 int8 + one float scale
// + the int sum of the quants) for the 32-element types, ActQ8K (256 int8 +
// scale + sums of each 16) for the K types.
//
// Every kernel computes each block's integer products exactly and then
// combines the per-block integers with the same float operations in the same
// order in every implementation, so the AVX2 kernels and the portable scalar
// ones return bit-identical results (the unit tests check it). The AVX2
// versions are chosen at run time when the processor has AVX2 and FMA.
//
// Thread-safety: pure functions over caller-owned memory; the kernel choice
// is made once (thread-safe static) and can be forced for tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "format/ggml_types.h"

namespace cellm::cpu {

// One activation block for the 32-element weight types.
struct ActQ8 {
  float d;              // scale: value = d * qs[i]
  std::int32_t sum;     // sum of qs (the offset terms of Q4_0/Q4_1/Q5_0)
  std::int8_t qs[32];
};
static_assert(sizeof(ActQ8) == 40);

// One activation block for the K weight types.
struct ActQ8K {
  float d;
  std::int16_t bsums[16];  // sums of qs over each 16 elements
  std::int8_t qs[256];
};
static_assert(sizeof(ActQ8K) == 292);

// Which activation blocks a weight type multiplies with.
enum class ActKind : std::uint8_t { kQ8, kQ8K };

// The kernels' instruction set.
enum class Isa : std::uint8_t { kScalar, kAvx2 };
std::string_view isa_name(Isa isa);
// What this processor runs (AVX2 when it has AVX2 and FMA), unless forced.
Isa active_isa();
// The best this processor supports (for tests that compare both).
Isa best_isa();

// A weight row of `cols` elements in `type`'s blocks, times one activation
// row quantized for that type (act_kind(type)); returns the float dot.
using DotFn = float (*)(const void* weight_row, const void* act_row, std::int64_t cols);

// Whether the fast program multiplies `type` in its blocks.
bool has_quant_kernel(format::GgmlType type);
ActKind act_kind(format::GgmlType type);
// Bytes of one quantized activation row of `cols` elements (cols a multiple
// of the block size).
std::size_t act_row_bytes(ActKind kind, std::int64_t cols);
// Elements per block of the activation kind (32 or 256).
std::int64_t act_block_elems(ActKind kind);

// The kernel for `type` in `isa` (nullptr for types without one).
DotFn dot_kernel(format::GgmlType type, Isa isa);

// Prefill form: `rows` weight rows (row_bytes apart) against kTile
// activation rows at once, out[r * kTile + i] = dot(w row r, acts[i]), so
// each weight block is unpacked once for kTile tokens and each activation
// block loaded once for `rows` weight rows. It keeps float vector
// accumulators, so it agrees with DotFn within float rounding (not bit for
// bit). Every block type has an AVX2 tile of one weight row; the 32-element
// types also have four-row tiles on AVX-512 VNNI processors (the integer
// products then take one instruction, and the 32 vector registers hold the
// 4 x 4 accumulators).
inline constexpr int kTile = 4;
inline constexpr int kMaxTileRows = 4;  // the most weight rows a tile takes
using DotTileFn = void (*)(const void* weight_rows, std::size_t row_bytes,
                           const std::uint8_t* const* act_rows, std::int64_t cols, float* out);
struct TileKernel {
  DotTileFn fn = nullptr;  // null: no tile for this type and ISA
  int rows = 0;            // weight rows per call
};
// The fastest tile this processor runs for `type` on `isa`; `allow_vnni`
// false gives the AVX2 one (for tests that compare both).
TileKernel dot_tile_kernel(format::GgmlType type, Isa isa, bool allow_vnni = true);
// Whether the processor has AVX-512 VNNI with 256-bit vectors (AVX512VL).
bool has_avx512_vnni();
// The one-row form of the tile kernel where there is one (the same float
// accumulation as the tiles, faster than the bit-exact DotFn), else the
// DotFn: what the fast program's decode uses.
DotFn dot_row_kernel(format::GgmlType type, Isa isa);

// Quantizes `cols` floats into activation blocks of `kind` (round to
// nearest, ties to even; scale = max|x| / 127). `cols` must be a multiple of
// the block size. Every ISA writes the same bytes (the AVX2 form does the
// portable loop's operations lane by lane; tested).
void quantize_act(ActKind kind, const float* x, std::int64_t cols, void* out, Isa isa);
inline void quantize_act(ActKind kind, const float* x, std::int64_t cols, void* out) {
  quantize_act(kind, x, cols, out, active_isa());
}

// Scalar kernels, also the reference the AVX2 ones must equal exactly.
namespace scalar {
float dot_q4_0(const void* w, const void* a, std::int64_t cols);
float dot_q4_1(const void* w, const void* a, std::int64_t cols);
float dot_q5_0(const void* w, const void* a, std::int64_t cols);
float dot_q8_0(const void* w, const void* a, std::int64_t cols);
float dot_q4_k(const void* w, const void* a, std::int64_t cols);
float dot_q5_k(const void* w, const void* a, std::int64_t cols);
float dot_q6_k(const void* w, const void* a, std::int64_t cols);
}  // namespace scalar

namespace avx2 {
// nullptr-free only when built for x86-64; callers go through dot_kernel.
bool compiled();
void quantize_act(ActKind kind, const float* x, std::int64_t cols, void* out);
// Tiles of one weight row (AVX2) and of four (AVX-512 VNNI, `vnni_*`).
void tile_q4_0(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void tile_q4_1(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void tile_q5_0(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void tile_q8_0(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void tile_q4_k(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void tile_q5_k(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void tile_q6_k(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
inline constexpr int kVnniTileRows = kMaxTileRows;
void vnni_q4_0(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void vnni_q4_1(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void vnni_q5_0(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
void vnni_q8_0(const void* w, std::size_t rb, const std::uint8_t* const* a, std::int64_t cols,
               float* out);
// One-row forms of the tiles (float vector accumulation, like the tiles).
float row_q4_0(const void* w, const void* a, std::int64_t cols);
float row_q4_1(const void* w, const void* a, std::int64_t cols);
float row_q5_0(const void* w, const void* a, std::int64_t cols);
float row_q8_0(const void* w, const void* a, std::int64_t cols);
float dot_q4_0(const void* w, const void* a, std::int64_t cols);
float dot_q4_1(const void* w, const void* a, std::int64_t cols);
float dot_q5_0(const void* w, const void* a, std::int64_t cols);
float dot_q8_0(const void* w, const void* a, std::int64_t cols);
float dot_q4_k(const void* w, const void* a, std::int64_t cols);
float dot_q5_k(const void* w, const void* a, std::int64_t cols);
float dot_q6_k(const void* w, const void* a, std::int64_t cols);
}  // namespace avx2

// The per-block float combination shared by both implementations (so their
// results agree bit for bit). Kept inline here on purpose.
namespace combine {
// Accumulates one 32-block: acc += (dw * da) * isum.
inline float scaled(float acc, float dw, float da, std::int32_t isum) {
  return acc + (dw * da) * static_cast<float>(isum);
}
// Q4_1: acc += (dw * da) * isum + (mw * da) * asum.
inline float scaled_min(float acc, float dw, float mw, float da, std::int32_t isum,
                        std::int32_t asum) {
  acc += (dw * da) * static_cast<float>(isum);
  return acc + (mw * da) * static_cast<float>(asum);
}
// K blocks: acc += (d * da) * isum - (dmin * da) * msum.
inline float k_block(float acc, float d, float dmin, float da, std::int32_t isum,
                     std::int32_t msum) {
  acc += (d * da) * static_cast<float>(isum);
  return acc - (dmin * da) * static_cast<float>(msum);
}
}  // namespace combine

// Raw block layouts (GGUF / ggml): f16 scales as raw bits.
struct BlockQ4_0 {
  std::uint16_t d;
  std::uint8_t qs[16];
};
struct BlockQ4_1 {
  std::uint16_t d, m;
  std::uint8_t qs[16];
};
struct BlockQ5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[16];
};
struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[32];
};
struct BlockQ4_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
struct BlockQ5_K {
  std::uint16_t d, dmin;
  std::uint8_t scales[12];
  std::uint8_t qh[32];
  std::uint8_t qs[128];
};
struct BlockQ6_K {
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  std::uint16_t d;
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 &&
              sizeof(BlockQ6_K) == 210);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block.
inline void k_scale_min(int j, const std::uint8_t* q, std::int32_t* sc, std::int32_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace cellm::cpu
