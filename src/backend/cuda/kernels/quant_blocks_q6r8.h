// Q6_K rows rearranged for 16-byte loads (QuantType::kQ6_K_R8, issue 38):
// the layout, the host-side repacking the upload does, the generic
// decoder's view of it (Q6_K_R8, for the GEMV at two to eight rows and the
// bf16 dequantization of wide steps) and the lane map of the wide-load
// kernel (qgemv.cu, qgemv_q6k_r8_kernel), written once for the device and
// the host so that the host tests check all three against the CPU's
// reference dequantizer without a GPU.
//
// Why a layout change: a Q6_K block is 210 bytes, so its fields sit at every
// even offset and a kernel reading GGUF's blocks can only use 2-byte loads.
// Eight consecutive blocks of a row (2048 weights) are 1680 bytes = 105 x 16;
// the repacking stores each such group as structure-of-arrays:
//
//   [0, 1024)     ql of blocks 0..7, 128 bytes each
//   [1024, 1536)  qh of blocks 0..7, 64 bytes each
//   [1536, 1664)  scales of blocks 0..7, 16 bytes each
//   [1664, 1680)  d of blocks 0..7, 2 bytes each
//
// The same bytes as the file's, moved within their group: the weights keep
// Q6_K's size in memory. Every field starts on a 16-byte boundary of its
// group, so rows whose groups start on 16-byte boundaries (ldw_bytes and the
// first row 16-byte aligned) can be read with 16-byte loads. Only rows of
// whole groups (k a multiple of 2048) are repacked; others stay Q6_K.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

#include "backend/cuda/kernels/quant_blocks.h"

namespace cellm::cuda::qblocks {

struct Q6R8 {
  static constexpr int kBlocks = 8;                                     // Q6_K blocks a group
  static constexpr int kElems = 8 * 256;                                // weights a group
  static constexpr int kBytes = 8 * 210;                                // bytes a group (105 x 16)
  static constexpr int kQl = 0, kQh = 1024, kScales = 1536, kD = 1664;  // field offsets
  // Where block j's fields lie in its group.
  CELLM_QB_FN static int ql(int j) { return kQl + 128 * j; }
  CELLM_QB_FN static int qh(int j) { return kQh + 64 * j; }
  CELLM_QB_FN static int scales(int j) { return kScales + 16 * j; }
  CELLM_QB_FN static int d(int j) { return kD + 2 * j; }
};

// Whether rows of `cols` weights are whole groups (the upload repacks them).
constexpr bool q6r8_repackable(std::int64_t cols) {
  return cols > 0 && cols % Q6R8::kElems == 0;
}

// Rewrites one row of `blocks` Q6_K blocks (a multiple of 8) from GGUF's
// layout at `src` into the grouped one at `dst` (the same number of bytes;
// the two must not overlap). Host only: the upload runs it once.
inline void repack_q6k_r8_row(const std::uint8_t* src, std::uint8_t* dst, std::int64_t blocks) {
  for (std::int64_t g = 0; g < blocks / Q6R8::kBlocks; ++g) {
    std::uint8_t* group = dst + g * Q6R8::kBytes;
    for (int j = 0; j < Q6R8::kBlocks; ++j) {
      const std::uint8_t* b = src + (g * Q6R8::kBlocks + j) * 210;
      std::memcpy(group + Q6R8::ql(j), b, 128);
      std::memcpy(group + Q6R8::qh(j), b + 128, 64);
      std::memcpy(group + Q6R8::scales(j), b + 192, 16);
      std::memcpy(group + Q6R8::d(j), b + 208, 2);
    }
  }
}

// `rows` rows of `cols` weights (q6r8_repackable), `row_bytes` apart at
// both ends (a stride past the blocks is left as it is at `dst`).
inline void repack_q6k_r8_rows(const std::uint8_t* src, std::uint8_t* dst, std::int64_t rows,
                               std::int64_t row_bytes, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r) {
    repack_q6k_r8_row(src + r * row_bytes, dst + r * row_bytes, cols / 256);
  }
}

// The generic decoder over the grouped rows: Q6_K's lanes, runs and
// arithmetic; only the addresses of a block's fields differ. Its "block" is
// a whole group (2048 weights, 1680 bytes), so that validation asks for k a
// multiple of 2048 and a row of k / 2048 groups; the walk (g) still goes by
// 256-weight super-blocks, as for Q6_K.
struct Q6_K_R8 : Q6_K {
  static constexpr int kBlockElems = Q6R8::kElems, kBlockBytes = Q6R8::kBytes;
  CELLM_QB_FN static void load(Raw& r, const std::uint8_t* row, int g, int lane) {
    const std::uint8_t* group = row + static_cast<std::int64_t>(g / Q6R8::kBlocks) * Q6R8::kBytes;
    const int j = g % Q6R8::kBlocks;
    load_fields(r, group + Q6R8::ql(j), group + Q6R8::qh(j), group + Q6R8::scales(j),
                group + Q6R8::d(j), lane);
  }
};

// The wide-load kernel's lanes: in each group a lane takes block j = lane / 4
// and a quarter of it, half h = (lane % 4) / 2 and positions l0 = 16 (lane %
// 2) .. l0 + 15 of that half (Q6_K's halves: quant_blocks.h). It loads 16
// bytes of ql at ql_at() (ql[64h + l0..]), 16 more at ql_at() + 32
// (ql[64h + 32 + l0..]), 16 of qh at qh_at() (qh[32h + l0..]), the half's
// 8 scales at scales_at() and d at d_at(): 64 weights in four runs of 16,
// run s at pos(group, lane, s), with scale byte scale_index(lane, s) of the
// eight. Four lanes cover a block; the warp a group.
struct Q6R8Wide {
  CELLM_QB_FN static int block(int lane) { return lane / 4; }
  CELLM_QB_FN static int half(int lane) { return (lane % 4) / 2; }
  CELLM_QB_FN static int l0(int lane) { return 16 * (lane % 2); }
  CELLM_QB_FN static int ql_at(int lane) {
    return Q6R8::ql(block(lane)) + 64 * half(lane) + l0(lane);
  }
  CELLM_QB_FN static int qh_at(int lane) {
    return Q6R8::qh(block(lane)) + 32 * half(lane) + l0(lane);
  }
  CELLM_QB_FN static int scales_at(int lane) { return Q6R8::scales(block(lane)) + 8 * half(lane); }
  CELLM_QB_FN static int d_at(int lane) { return Q6R8::d(block(lane)); }
  CELLM_QB_FN static int pos(int group, int lane, int run) {
    return group * Q6R8::kElems + 256 * block(lane) + 128 * half(lane) + l0(lane) + 32 * run;
  }
  CELLM_QB_FN static int scale_index(int lane, int run) { return lane % 2 + 2 * run; }
  // Run `run`'s unsigned six-bit quants (q + 32 of Q6_K's q - 32) at four
  // consecutive positions, one a byte, from the same 4-byte words of the
  // first ql load (a), the second (b) and the qh load (h): runs 0 and 1 take
  // the low nibbles of a and b, runs 2 and 3 their high ones, and run s the
  // bits 2s, 2s + 1 of h as bits 4 and 5.
  CELLM_QB_FN static std::uint32_t quants(std::uint32_t a, std::uint32_t b, std::uint32_t h,
                                          int run) {
    const std::uint32_t lo = run % 2 == 0 ? a : b;
    const std::uint32_t nibbles = (run < 2 ? lo : lo >> 4) & 0x0f0f0f0fu;
    return nibbles | (((h >> (2 * run)) & 0x03030303u) << 4);
  }
};

}  // namespace cellm::cuda::qblocks
