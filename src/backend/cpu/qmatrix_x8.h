// The interleaved ("x8") layout of a block-quantized matrix: rows in groups
// of eight, each 32-element block of the eight rows stored together so that
// one 256-bit vector holds four consecutive quants of every row. A vpdpbusd
// against four broadcast activation bytes then adds four products to each
// row's lane, eight instructions finish the block for eight rows at once,
// and the scales of the eight rows are one vector: far fewer instructions
// per product than the row-at-a-time kernels (quant_dot.h), for decode and
// prefill alike. The bytes per weight stay those of the file's type.
//
// A group block holds the eight rows' f16 scales (and Q4_1's f16 mins),
// then the quants:
//   Q4_0, Q4_1  128 bytes of nibbles: byte 4r + k of vector g (0..3) holds
//               element 4g + k of row r in its low nibble and element
//               4(g + 4) + k in its high one;
//   Q5_0        the same nibbles, then 32 bytes of fifth bits: bit g of
//               byte 4r + k is the fifth bit of element 4g + k of row r;
//   Q8_0        256 bytes: byte 4r + k of vector g is element 4g + k of
//               row r plus 128 (unsigned, as vpdpbusd wants).
// The K types (Q4_K, Q6_K) group whole 256-element super-blocks: the rows'
// f16 scales, their sub-block scales (and Q4_K's mins) unpacked to one byte
// per row and sub-block, nibbles in 64-element chunks (vector g of chunk j:
// element 64j + 4g + k low, 64j + 32 + 4g + k high) and Q6_K's top two bits
// in four vectors a chunk (bits 2t..2t+1: element 64j + 4(4h + t) + k);
// layouts in qgemm_x8k_vnni.cpp. Q4_K grows by 4 bytes a row block, Q6_K
// not at all.
// Used where the processor has AVX-512 VNNI (quant_dot.h has_avx512_vnni)
// and the row count is a multiple of eight.
//
// Thread-safety: pure functions; qgemm_x8_slice writes only its part of y.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/quant_dot.h"
#include "format/ggml_types.h"

namespace cellm::cpu {

struct QMatrix;
struct QuantActs;

inline constexpr int kX8Rows = 8;
// Activation rows one kernel call takes: each group's weights are unpacked
// once for up to eight tokens (a speculative verification of seven drafts is
// one pass). A row's sums do not depend on how many rows share its call.
inline constexpr int kX8MaxActs = 8;

// Whether `type` has an x8 layout.
bool x8_type(format::GgmlType type);
// Bytes of one group block of `type`.
std::size_t x8_group_block_bytes(format::GgmlType type);

// Rewrites `rows` (a multiple of 8) rows of `row_bytes` bytes each, in the
// file's blocks, into the x8 layout.
std::vector<std::uint8_t> repack_x8(format::GgmlType type, const std::uint8_t* data,
                                    std::int64_t rows, std::int64_t cols, std::size_t row_bytes);

// y[i, r] = w row r . act row i for w in the x8 layout, over thread `part`
// of `parts`'s share of the row groups.
void qgemm_x8_slice(const QMatrix& w, const QuantActs& act, float* y, std::int64_t y_stride,
                    int part, int parts);

namespace avx2 {
// The kernels (AVX-512 VNNI): one group of eight rows against `n` (1..kX8MaxActs)
// activation rows; out[i * 8 + r].
void x8_q4_0(const std::uint8_t* group, std::int64_t blocks, const std::uint8_t* const* acts,
             int n, float* out);
void x8_q4_1(const std::uint8_t* group, std::int64_t blocks, const std::uint8_t* const* acts,
             int n, float* out);
void x8_q5_0(const std::uint8_t* group, std::int64_t blocks, const std::uint8_t* const* acts,
             int n, float* out);
void x8_q8_0(const std::uint8_t* group, std::int64_t blocks, const std::uint8_t* const* acts,
             int n, float* out);
// K types: blocks of 256, activations in ActQ8K blocks.
void x8_q4_k(const std::uint8_t* group, std::int64_t blocks, const std::uint8_t* const* acts,
             int n, float* out);
void x8_q6_k(const std::uint8_t* group, std::int64_t blocks, const std::uint8_t* const* acts,
             int n, float* out);
}  // namespace avx2

}  // namespace cellm::cpu
