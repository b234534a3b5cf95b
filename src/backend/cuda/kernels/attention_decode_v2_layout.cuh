// Decode attention v2's block (attention_decode_v2.cu): its shape, its
// shared-memory layout per head-dim bucket, and the timeline marks of its
// phases (kernel_trace.cuh). Included by that file and its helpers only.
//
// Thread-safety: constants and types only.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernel_trace.h"
#include "backend/cuda/kernels/attention.cuh"

namespace cellm::cuda {
// Internal linkage, as when this lived in the .cu file: in a named namespace
// nvcc gave the kernel more registers (82 -> 86 at 64-wide heads).
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kAttentionV2MaxGroup;  // q heads per block = mma rows
// 16 keys a warp. 32 (two 16-key groups, 128-key tiles, two stages) where
// every block has an SM, so a 128-key split runs one pass of the key loop
// instead of two, was slower on the H200 (session 18): that pass took 2.4 us
// against 1.5 us for two 64-key tiles; 1B batch 1 0.863-0.865 against
// 0.854-0.861 ms/step, 8B 4.20-4.22 against 4.11-4.13, Qwen3-0.6B 0.963
// against 0.890.
constexpr int kTileKeys = 64;
constexpr int kWindowKeys = 512;  // table entries staged at once
constexpr int kWindowTiles = kWindowKeys / kTileKeys;
constexpr int kWindowPerThread = kWindowKeys / kThreads;
static_assert(kWindowKeys % kThreads == 0 && kWindowKeys % kTileKeys == 0);
constexpr float kLog2e = 1.4426950408889634f;
// No cell of the row's own key in the step's inputs (AttentionParams::cells).
constexpr int kUnknownCell = -(1 << 30);

// The kernel's phases in its timeline (kernel_trace.cuh), between the wait and
// exit marks.
enum Phase : int {
  kEarlyReadsIssued = trace::kFirstPhaseMark,
  kFirstTile,
  kKeysDone,
  kBlockMerged,
  kMergedStored,
};
static_assert(kMergedStored < trace::kExitMark);

// kPacked (AttentionParams::pack_wide, 128-wide heads only): the K/V tiles
// are stored unpadded, each row's 16-byte pieces XOR-swizzled by the row's
// low three bits so that the 8 rows of an ldmatrix tile still hit distinct
// banks, in two stages: 73 KB a block, three blocks an SM instead of two.
// kFp8 (FP8 pools, KvDtype::kFp8): the cp.async stages hold E4M3 codes,
// unpadded (kMaxHd bytes a row), and one bf16 tile of K and one of V, the
// layout's usual padded rows, takes what each warp widens of its 16 keys of
// the current stage (kv_fp8.cuh); the mma reads that tile as it reads a bf16
// stage. Q, the merges and the cluster areas sit where they do in the bf16
// layout (merge.cuh and push.cuh read them through V2Layout<kMaxHd>).
template <int kMaxHd, bool kPacked = false, bool kFp8 = false>
struct V2Layout {
  static_assert(!kPacked || kMaxHd == 128, "the packed layout is laid out for 128-wide heads");
  static_assert(!(kPacked && kFp8), "FP8 pools take the padded layout");
  // Tiles in flight per block. 64-wide heads take two stages: 43 KB per block
  // lets five blocks share a multiprocessor, and their 20 warps hide the
  // softmax's latency better than four stages at two blocks did (the key loop
  // was latency-bound, not bandwidth-bound, at 1B batch 64). Wider heads keep
  // three (two blocks per SM) and two stages; packed 128-wide heads two.
  static constexpr int kStages = kMaxHd <= 64 || kPacked ? 2 : (kMaxHd <= 128 ? 3 : 2);
  // Q rows padded by 16 bytes: the 8 rows of an ldmatrix tile hit distinct
  // banks. K/V rows likewise, unless packed.
  static constexpr int kLd = kMaxHd + 8;
  static constexpr int kLdKv = kPacked ? kMaxHd : kLd;
  static constexpr int kChunks = kMaxHd / 8;                      // 16-byte pieces of a bf16 row
  static constexpr int kQPerThread = kRows * kChunks / kThreads;  // Q pieces per thread
  // The K/V copies: 16-byte pieces of a pool row (8 bf16 or 16 E4M3 codes).
  static constexpr int kKvElems = kFp8 ? 16 : 8;
  static constexpr int kKvChunks = kMaxHd / kKvElems;
  static constexpr int kKeyStep = kThreads / kKvChunks;
  static constexpr int kCopies = kTileKeys / kKeyStep;  // per thread, per K (and V) tile
  static constexpr int kLdo = kMaxHd + 8;               // float rows of the warp merge
  // The merges write four output columns per thread: kQuads per head row, a
  // power of two, so a quad's head is a shift away.
  static constexpr int kQuads = kMaxHd / 4;
  static constexpr int kMaxSplits = kAttentionMaxSplits;

  // bf16 tiles the mma reads: every stage, or with FP8 pools the one tile
  // the stages are widened into.
  static constexpr int kBf16Tiles = kFp8 ? 1 : kStages;
  static constexpr std::size_t kQ = 0;
  static constexpr std::size_t kK = kQ + sizeof(bf16) * kRows * kLd;
  static constexpr std::size_t kV = kK + sizeof(bf16) * kBf16Tiles * kTileKeys * kLdKv;
  // FP8 pools: the stages of codes, [kStages, kTileKeys, kMaxHd] bytes each
  // for K and V (empty otherwise).
  static constexpr std::size_t kStageBytes = kFp8 ? std::size_t{kTileKeys} * kMaxHd : 0;
  static constexpr std::size_t kK8 = kV + sizeof(bf16) * kBf16Tiles * kTileKeys * kLdKv;
  static constexpr std::size_t kV8 = kK8 + kStages * kStageBytes;
  static constexpr std::size_t kFlags = kV8 + kStages * kStageBytes;
  static constexpr std::size_t kTable = kFlags + sizeof(int) * kStages * kTileKeys;
  static constexpr std::size_t kPipeEnd = kTable + sizeof(int) * 2 * kWindowKeys;
  // After the key loop the tiles are dead: the merges reuse them from kK.
  static constexpr std::size_t kMergeAcc = kK;
  static constexpr std::size_t kMergeM = kMergeAcc + sizeof(float) * kWarps * kRows * kLdo;
  static constexpr std::size_t kMergeL = kMergeM + sizeof(float) * kWarps * kRows;
  static constexpr std::size_t kSplitM = kMergeL + sizeof(float) * kWarps * kRows;
  static constexpr std::size_t kSplitL = kSplitM + sizeof(float) * kRows * kMaxSplits;
  static constexpr std::size_t kRowDen = kSplitL + sizeof(float) * kRows * kMaxSplits;
  static constexpr std::size_t kIsLast = kRowDen + sizeof(float) * kRows;
  static constexpr std::size_t kMergeEnd = kIsLast + sizeof(int);
  // A block's merged partial (its maximum and denominator per head serve
  // every path), read by the other blocks of its cluster; apart from the warp
  // merge's area, which is still being read when it is written.
  static constexpr std::size_t kClusterAcc = (kMergeEnd + 15) / 16 * 16;
  static constexpr std::size_t kClusterM = kClusterAcc + sizeof(float) * kRows * kMaxHd;
  static constexpr std::size_t kClusterL = kClusterM + sizeof(float) * kRows;
  static constexpr std::size_t kClusterEnd = kClusterL + sizeof(float) * kRows;
  static constexpr std::size_t kBytes = kPipeEnd > kClusterEnd ? kPipeEnd : kClusterEnd;
  // The push merge (attention_decode_v2_push.cuh) adds block 0's barrier and
  // the cluster's slots past everything else: the other blocks push while
  // block 0 may still be in its key loop.
  static constexpr std::size_t kPushBar = (kBytes + 15) / 16 * 16;
  static constexpr std::size_t kPushSlots = kPushBar + 16;

  // Element offset of column `dim` (a multiple of 8) of K/V tile row `key`.
  // Swizzling by key & 7 keeps a warp's 16-row slice (rows 16w..16w+15) at
  // 16w * kLdKv plus the offsets of rows 0..15.
  __host__ __device__ static constexpr int kv_index(int key, int dim) {
    if constexpr (kPacked) {
      return key * kLdKv + (((dim >> 3) ^ (key & 7)) << 3);
    } else {
      return key * kLdKv + dim;
    }
  }

  static_assert(kThreads % kKvChunks == 0 && kTileKeys % kKeyStep == 0);
  static_assert(kK8 % 16 == 0 && kV8 % 16 == 0, "cp.async writes 16-byte pieces");
  // The packed layout's point: three blocks share an SM's 228 KB of shared
  // memory (each with the 1 KB the runtime reserves per block).
  static_assert(!kPacked || 3 * (kBytes + 1024) <= 228 * 1024);
  static_assert(kRows * kChunks % kThreads == 0);
  static_assert(kTileKeys == 16 * kWarps);
};

}  // namespace
}  // namespace cellm::cuda
