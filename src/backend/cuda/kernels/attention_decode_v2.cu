// Decode attention v2 (see attention.cuh). One block per (token, kv head,
// group of up to 16 q heads, split); four warps. K/V tiles of 64 keys are
// copied into shared memory by cp.async, kStages deep, so a block keeps tens
// of KB in flight instead of v1's few hundred bytes per warp. The cells of
// the keys come from the sequence's table in windows of 512 staged in shared
// memory, each read from global memory half a window before its first tile.
// Keys older than the step (AttentionParams::fresh_from) are staged before
// the programmatic-launch wait, while the q/k/v projection still runs; after
// it only Q and the step's own keys are fetched.
// Each warp owns 16 keys of a tile and runs its own online softmax over them
// with tensor cores: S = Q K^T (16 heads x 16 keys), P = exp2(S - m) kept in
// registers as the A operand of O += P V. The warps' states are merged in
// shared memory at the end. With several splits the splits of a (token,
// head group) are merged in split order (deterministic): through distributed
// shared memory when the launch clusters them and the token's used splits fit
// in one cluster, otherwise by the last block to finish, through a float
// workspace and a counter.
#include <cooperative_groups.h>
#include <string>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = kAttentionV2MaxGroup;  // q heads per block = mma rows
constexpr int kTileKeys = 64;                // 16 per warp
constexpr int kWindowKeys = 512;             // table entries staged at once
constexpr int kWindowTiles = kWindowKeys / kTileKeys;
constexpr int kWindowPerThread = kWindowKeys / kThreads;
static_assert(kWindowKeys % kThreads == 0 && kWindowKeys % kTileKeys == 0);
constexpr float kLog2e = 1.4426950408889634f;
// No cell of the row's own key in the step's inputs (AttentionParams::cells).
constexpr int kUnknownCell = -(1 << 30);

// Timeline marks (kernel_trace.cuh) past entry and the wait.
CELLM_TRACE_TABLE(attention_trace);
enum Phase : int { kEarlyReadsIssued = 2, kFirstTile, kKeysDone, kBlockMerged, kMergedStored };

template <int kMaxHd>
struct V2Layout {
  // Tiles in flight per block. 64-wide heads take two stages: 43 KB per block
  // lets five blocks share a multiprocessor, and their 20 warps hide the
  // softmax's latency better than four stages at two blocks did (the key loop
  // was latency-bound, not bandwidth-bound, at 1B batch 64). Wider heads keep
  // three (two blocks per SM) and two stages.
  static constexpr int kStages = kMaxHd <= 64 ? 2 : (kMaxHd <= 128 ? 3 : 2);
  // Rows padded by 16 bytes: the 8 rows of an ldmatrix tile hit distinct banks.
  static constexpr int kLd = kMaxHd + 8;
  static constexpr int kChunks = kMaxHd / 8;  // 16-byte pieces of a row
  static constexpr int kKeyStep = kThreads / kChunks;
  static constexpr int kQPerThread = kRows * kChunks / kThreads;  // Q pieces per thread
  static constexpr int kCopies = kTileKeys / kKeyStep;            // per thread, per K (and V) tile
  static constexpr int kLdo = kMaxHd + 8;                         // float rows of the warp merge
  // The merges write four output columns per thread: kQuads per head row, a
  // power of two, so a quad's head is a shift away.
  static constexpr int kQuads = kMaxHd / 4;
  static constexpr int kMaxSplits = kAttentionMaxSplits;

  static constexpr std::size_t kQ = 0;
  static constexpr std::size_t kK = kQ + sizeof(bf16) * kRows * kLd;
  static constexpr std::size_t kV = kK + sizeof(bf16) * kStages * kTileKeys * kLd;
  static constexpr std::size_t kFlags = kV + sizeof(bf16) * kStages * kTileKeys * kLd;
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

  static_assert(kThreads % kChunks == 0 && kTileKeys % kKeyStep == 0);
  static_assert(kRows * kChunks % kThreads == 0);
  static_assert(kTileKeys == 16 * kWarps);
};

__device__ __forceinline__ std::int64_t partial_index(const AttentionParams& p, int token, int head,
                                                      int split) {
  return (static_cast<std::int64_t>(token) * p.num_heads + head) * p.num_splits + split;
}

__device__ __forceinline__ float* partial_acc(const AttentionParams& p, int token, int head,
                                              int split) {
  return p.workspace + partial_index(p, token, head, split) * p.head_dim;
}

__device__ __forceinline__ float* partial_stats(const AttentionParams& p, int token, int head,
                                                int split) {
  const std::int64_t acc_floats =
      static_cast<std::int64_t>(p.num_tokens) * p.num_heads * p.num_splits * p.head_dim;
  return p.workspace + acc_floats + partial_index(p, token, head, split) * 2;
}

// Release/acquire at device scope around the split counter: a lighter fence
// than __threadfence()'s sequentially consistent one, and all the
// message passing through the workspace needs.
__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}

// This thread's entries of table window `w` (keys begin + w * kWindowKeys
// onwards): -1 past `end` or outside the pool, and -1 for now at and past
// `readable` (keys this step may still be writing: resolve_window fills them
// in after the wait). The loads stay in flight until store_window() needs
// their values. Table reads go through L2 only (__ldcg): a line read before
// the wait may hold entries the step writes, and must not be found in L1
// after it.
__device__ __forceinline__ void load_window(const AttentionParams& p, const std::int32_t* table,
                                            int begin, int end, int readable, int w,
                                            int (&entries)[kWindowPerThread]) {
#pragma unroll
  for (int j = 0; j < kWindowPerThread; ++j) {
    const int kpos = begin + w * kWindowKeys + j * kThreads + static_cast<int>(threadIdx.x);
    int cell = kpos < end && kpos < readable ? __ldcg(table + kpos) : -1;
    if (cell >= p.max_cells) cell = -1;
    entries[j] = cell;
  }
}

// After the wait: this thread's entries of window 0 in [settled, end), the
// keys the step's own rows wrote, go into shared memory. The row's own key
// comes from the step's cells, which need no table read.
__device__ __forceinline__ void resolve_window(const AttentionParams& p, const std::int32_t* table,
                                               int begin, int settled, int end, int pos,
                                               int own_cell, int* windows_s) {
#pragma unroll
  for (int j = 0; j < kWindowPerThread; ++j) {
    const int index = j * kThreads + static_cast<int>(threadIdx.x);
    const int kpos = begin + index;
    if (kpos < settled || kpos >= end) continue;
    int cell = kpos == pos && own_cell != kUnknownCell ? own_cell : __ldcg(table + kpos);
    if (cell < 0 || cell >= p.max_cells) cell = -1;
    windows_s[index] = cell;
  }
}

// Window w goes to buffer w % 2 of `windows_s`.
__device__ __forceinline__ void store_window(int* windows_s, int w,
                                             const int (&entries)[kWindowPerThread]) {
  int* buffer = windows_s + (w & 1) * kWindowKeys;
#pragma unroll
  for (int j = 0; j < kWindowPerThread; ++j) {
    buffer[j * kThreads + static_cast<int>(threadIdx.x)] = entries[j];
  }
}

// The cells of the keys this thread copies for tile `tile`, from its window.
template <int kMaxHd>
__device__ __forceinline__ void tile_cells(const int* windows_s, int tile, int key0,
                                           int (&cells)[V2Layout<kMaxHd>::kCopies]) {
  using L = V2Layout<kMaxHd>;
  const int* entries =
      windows_s + ((tile / kWindowTiles) & 1) * kWindowKeys + (tile % kWindowTiles) * kTileKeys;
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) cells[i] = entries[key0 + i * L::kKeyStep];
}

// Which keys of a tile issue_tile copies: all, or (around the wait) those
// written before this step or those written by it; see `settled` below.
enum class TileKeys { kAll, kSettled, kFresh };

template <int kMaxHd, TileKeys kKeys = TileKeys::kAll>
__device__ __forceinline__ void issue_tile(const AttentionParams& p, int kv_head, bf16* k_stage,
                                           bf16* v_stage, int* flags, int key0, int chunk,
                                           const int* windows_s, int tile, int first_key,
                                           int settled, int end) {
  using L = V2Layout<kMaxHd>;
  int cells[L::kCopies];
  tile_cells<kMaxHd>(windows_s, tile, key0, cells);
  const int dim = chunk * 8;
  const bool dim_ok = dim < p.head_dim;
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int key = key0 + i * L::kKeyStep;
    if constexpr (kKeys != TileKeys::kAll) {
      const int kpos = first_key + key;
      const bool fresh = kpos >= settled && kpos < end;
      if (fresh != (kKeys == TileKeys::kFresh)) continue;
    }
    const bool ok = cells[i] >= 0;
    const bool fill = ok && dim_ok;
    // A zero-filling copy reads nothing but still gets an in-bounds address.
    const std::int64_t offset =
        fill ? (static_cast<std::int64_t>(cells[i]) * p.num_kv_heads + kv_head) * p.head_dim + dim
             : 0;
    cp_async16(k_stage + key * L::kLd + dim, p.k_pool + offset, fill);
    cp_async16(v_stage + key * L::kLd + dim, p.v_pool + offset, fill);
    if (chunk == 0) flags[key] = ok ? 1 : 0;
  }
}

// Pulls the settled keys of a tile into L2 (one request per 128-byte line of
// each K and V row) so that its copies after the wait are L2 hits.
template <int kMaxHd>
__device__ __forceinline__ void prefetch_tile(const AttentionParams& p, int kv_head, int key0,
                                              int chunk, const int* windows_s, int tile,
                                              int first_key, int settled) {
  using L = V2Layout<kMaxHd>;
  const int dim = chunk * 8;
  if (dim % 64 != 0 || dim >= p.head_dim) return;
  int cells[L::kCopies];
  tile_cells<kMaxHd>(windows_s, tile, key0, cells);
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int kpos = first_key + key0 + i * L::kKeyStep;
    if (kpos >= settled || cells[i] < 0) continue;
    const std::int64_t offset =
        (static_cast<std::int64_t>(cells[i]) * p.num_kv_heads + kv_head) * p.head_dim + dim;
    prefetch_l2(p.k_pool + offset);
    prefetch_l2(p.v_pool + offset);
  }
}

// Stores four consecutive outputs of a head row (no alignment asked of
// out_stride, so one scalar at a time).
__device__ __forceinline__ void store_out4(const AttentionParams& p, int token, int head, int d,
                                           float4 num, float den) {
  bf16* out = p.out + static_cast<std::int64_t>(token) * p.out_stride +
              static_cast<std::int64_t>(head) * p.head_dim + d;
  const bool any = den > 0.0f;
  out[0] = __float2bfloat16_rn(any ? num.x / den : 0.0f);
  out[1] = __float2bfloat16_rn(any ? num.y / den : 0.0f);
  out[2] = __float2bfloat16_rn(any ? num.z / den : 0.0f);
  out[3] = __float2bfloat16_rn(any ? num.w / den : 0.0f);
}

__device__ __forceinline__ float4 fma4(float w, float4 a, float4 acc) {
  return make_float4(fmaf(w, a.x, acc.x), fmaf(w, a.y, acc.y), fmaf(w, a.z, acc.z),
                     fmaf(w, a.w, acc.w));
}

// Quad `e` of a block's head rows: head `h` of the block, first column `d`.
struct HeadQuad {
  int h;
  int d;
};
template <int kMaxHd>
__device__ __forceinline__ HeadQuad head_quad(int e) {
  constexpr int kQuads = V2Layout<kMaxHd>::kQuads;
  return {e / kQuads, (e % kQuads) * 4};
}

// Block `rank` of the cluster writes its share of the token's outputs from
// the `used` partials in the cluster's shared memory, in split order, four
// columns per thread: every remote load of a thread is issued before any is
// used, so the merge costs one distributed-shared-memory round trip. The
// first barrier publishes every block's partial (release/acquire at cluster
// scope); the second keeps each block's shared memory alive until the others
// have read it.
template <int kMaxHd>
__device__ __forceinline__ void cluster_merge(const AttentionParams& p, int token, int first_head,
                                              int heads, int used, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // Clusters need sm_90; the launch never asks for them below it.
  __trap();
#else
  using L = V2Layout<kMaxHd>;
  extern __shared__ __align__(128) unsigned char smem[];
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  float* acc = reinterpret_cast<float*>(smem + L::kClusterAcc);
  float* ms = reinterpret_cast<float*>(smem + L::kClusterM);
  float* ls = reinterpret_cast<float*>(smem + L::kClusterL);
  cluster.sync();
  for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < heads * L::kQuads;
       e += p.cluster * kThreads) {
    const auto [h, d] = head_quad<kMaxHd>(e);
    if (d >= p.head_dim) continue;
    float m[kAttentionMaxCluster];
    float l[kAttentionMaxCluster];
    float4 a[kAttentionMaxCluster];
#pragma unroll
    for (int j = 0; j < kAttentionMaxCluster; ++j) {
      if (j < used) {
        m[j] = *cluster.map_shared_rank(ms + h, j);
        l[j] = *cluster.map_shared_rank(ls + h, j);
        a[j] = *cluster.map_shared_rank(reinterpret_cast<float4*>(acc + h * kMaxHd + d), j);
      }
    }
    float m_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kAttentionMaxCluster; ++j) {
      if (j < used && l[j] > 0.0f) m_max = fmaxf(m_max, m[j]);
    }
    float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float den = 0.0f;
#pragma unroll
    for (int j = 0; j < kAttentionMaxCluster; ++j) {
      if (j < used) {
        const float weight = l[j] > 0.0f ? exp2f(m[j] - m_max) : 0.0f;
        den += weight * l[j];
        num = fma4(weight, a[j], num);
      }
    }
    store_out4(p, token, first_head + h, d, num, den);
  }
  trace::mark(attention_trace, trace::slot_of(p), kMergedStored);
  cluster.sync();
#endif
}

// Register bounds: five blocks per SM at 64-wide heads, which is what their
// shared memory allows (at most 96 registers), and four up to 128-wide heads
// (116 registers, no spills), so a block fits beside the three blocks an SM
// holds of the q/k/v GEMV instead of waiting for them to leave.
template <int kMaxHd>
__global__ void __launch_bounds__(kThreads, kMaxHd <= 64 ? 5 : (kMaxHd <= 128 ? 4 : 1))
    attention_decode_v2_kernel(const __grid_constant__ AttentionParams p) {
  // Every return below is taken by the whole block (the exit mark's barrier).
  const trace::BlockScope traced(attention_trace, trace::slot_of(p));
  using L = V2Layout<kMaxHd>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* k_s = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* v_s = reinterpret_cast<bf16*>(smem + L::kV);
  int* flags_s = reinterpret_cast<int*>(smem + L::kFlags);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  // Partials and counters are indexed by the kernel row, reads and the
  // output by the token row it serves.
  const int row = blockIdx.x;
  const int token = p.rows != nullptr ? p.rows[row] : row;
  const int group = p.num_heads / p.num_kv_heads;
  const int head_groups = (group + kRows - 1) / kRows;
  const int kv_head = blockIdx.y / head_groups;
  const int first_head = kv_head * group + (blockIdx.y % head_groups) * kRows;
  const int heads = min(kRows, kv_head * group + group - first_head);
  const int hd = p.head_dim;

  const int slot = p.seq_slots[token];
  const int pos = p.positions[token];
  const bool active = slot >= 0 && slot < p.max_seqs && pos >= 0 && pos < p.table_stride;
  const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  const int length = active ? pos - lo + 1 : 0;
  const DecodeSplitPlan plan = decode_split_plan(length, p.num_splits, p.split_min_keys);
  // An inactive row still needs one block to write its zeros.
  const int used = max(plan.used, 1);
  const int split = blockIdx.z;
  // A token whose used splits fit in one cluster merges them there: every
  // block of its first cluster takes part, those past `used` with no keys.
  const bool clustered = p.cluster > 1 && used > 1 && used <= p.cluster;
  if (split >= (clustered ? p.cluster : used)) return;
  const int begin = lo + split * plan.chunk;
  const int end = min(lo + length, begin + plan.chunk);
  const int tiles = end > begin ? (end - begin + kTileKeys - 1) / kTileKeys : 0;
  const std::int32_t* table =
      p.cell_table + static_cast<std::int64_t>(active ? slot : 0) * p.table_stride;
  // Keys before `settled` were written by earlier steps, so their cells and
  // their K/V can be read before the wait; the kernel before this one may
  // still be writing the others (fresh_from).
  const int settled = p.fresh_from != nullptr && active
                          ? min(max(p.fresh_from[token], begin), max(end, begin))
                          : begin;
  int own_cell = kUnknownCell;
  if (p.cells != nullptr && active) own_cell = p.cells[token];
  // Everything above reads only the step's inputs, which were uploaded before
  // the step's first kernel: blocks with nothing to do leave, and the others
  // have their ranges, before the wait.
  //
  // Before the wait the block also stages the settled keys of its first
  // window's cells, copies them for the first kStages - 1 tiles and pulls the
  // next two tiles into L2: a block launched beside the q/k/v projection
  // then finds its history in place when the projection ends. After the
  // wait only Q and the step's own keys are read. On the H200 this took the
  // 8B attention from 7.7 to 6.3 us a layer; at 1B the blocks reach the SMs
  // only about a microsecond before the projection ends, so there is little
  // to hide (session 10 in bench/results/README.md, with the carveouts tried).
  int* windows_s = reinterpret_cast<int*>(smem + L::kTable);
  const int windows = (tiles + kWindowTiles - 1) / kWindowTiles;
  int entries[kWindowPerThread];
  load_window(p, table, begin, end, settled, 0, entries);
  store_window(windows_s, 0, entries);
  __syncthreads();  // window 0's settled entries are visible to every copying thread

  // Copy assignment: thread copies chunk `chunk` of keys key0 + i * kKeyStep.
  const int chunk = tid % L::kChunks;
  const int key0 = tid / L::kChunks;
  auto k_stage = [&](int stage) { return k_s + stage * kTileKeys * L::kLd; };
  auto v_stage = [&](int stage) { return v_s + stage * kTileKeys * L::kLd; };
  auto issue = [&]<TileKeys kKeys>(int tile) {
    const int stage = tile % L::kStages;
    issue_tile<kMaxHd, kKeys>(p, kv_head, k_stage(stage), v_stage(stage),
                              flags_s + stage * kTileKeys, key0, chunk, windows_s, tile,
                              begin + tile * kTileKeys, settled, end);
  };
  const int early_tiles = min(tiles, L::kStages - 1);
#pragma unroll
  for (int s = 0; s < L::kStages - 1; ++s) {
    if (s < tiles) issue.template operator()<TileKeys::kSettled>(s);
    cp_async_commit();
  }
  for (int tile = early_tiles; tile < min(tiles, min(kWindowTiles, early_tiles + 2)); ++tile) {
    prefetch_tile<kMaxHd>(p, kv_head, key0, chunk, windows_s, tile, begin + tile * kTileKeys,
                          settled);
  }
  __syncthreads();  // window 0 is read: resolve_window may overwrite its fresh entries
  trace::mark(attention_trace, trace::slot_of(p), kEarlyReadsIssued);

  // The wait never lets the next kernel start early, and the kernel does not
  // fetch the next projection's weights either; each was measured slower on
  // the H200 (bench/results/README.md, sessions 5, 6 and 9):
  // - launching the o GEMV here or after the key loop: 8B batch 1 4.45 ->
  //   5.31 and 4.35 -> 5.17 ms/step; measured again per kernel, 4.31 -> 5.11,
  //   the attention and every GEMV after it (and the lm_head) slower;
  // - bulk L2 prefetches of the o (and gate/up) weights after the key loop:
  //   1B 0.95 -> 1.00-1.27, 8B 4.35 -> 4.40-4.54 ms/step, the attention
  //   itself 7.6 -> 19.8 us a layer at 1B.
  griddep_wait();
  trace::mark(attention_trace, trace::slot_of(p), 1);

  // Q rows of this block's heads; missing heads and dims are zero.
  uint4 q_parts[L::kQPerThread];
#pragma unroll
  for (int j = 0; j < L::kQPerThread; ++j) {
    const int idx = tid + j * kThreads;
    const int r = idx / L::kChunks;
    const int c = (idx % L::kChunks) * 8;
    q_parts[j] = make_uint4(0, 0, 0, 0);
    if (r < heads && c < hd) {
      q_parts[j] =
          *reinterpret_cast<const uint4*>(p.q + static_cast<std::int64_t>(token) * p.q_stride +
                                          static_cast<std::int64_t>(first_head + r) * hd + c);
    }
  }
  // The fresh keys' cells, then their copies in the early tiles. The second
  // window stays in flight in `entries` until half of the first is used.
  resolve_window(p, table, begin, settled, end, pos, own_cell, windows_s);
  if (windows > 1) load_window(p, table, begin, end, end, 1, entries);
  const bool early_fresh = settled < min(end, begin + early_tiles * kTileKeys);
  if (early_fresh) {
    __syncthreads();  // the resolved entries are visible to every copying thread
    for (int s = 0; s < early_tiles; ++s) issue.template operator()<TileKeys::kFresh>(s);
  }
  // Its own group, committed after the early tiles': the first wait of the
  // key loop takes every group when it holds copies.
  cp_async_commit();
  // Visible to the MMAs after the first barrier of the key loop.
#pragma unroll
  for (int j = 0; j < L::kQPerThread; ++j) {
    const int idx = tid + j * kThreads;
    *reinterpret_cast<uint4*>(q_s + (idx / L::kChunks) * L::kLd + (idx % L::kChunks) * 8) =
        q_parts[j];
  }

  const int g = lane >> 2;  // fragment row (and row + 8)
  const int t4 = lane & 3;  // fragment column pair
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};  // this lane's share; summed over the quad at the end
  float acc[kMaxHd / 8][4];
#pragma unroll
  for (int n = 0; n < kMaxHd / 8; ++n) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[n][c] = 0.0f;
  }
  const float scale = p.scale;
  const float softcap = p.softcap;

  for (int tile = 0; tile < tiles; ++tile) {
    // Groups so far: the early tiles', the fresh keys', then one per tile
    // issued in this loop; all but the newest kStages - 2 must be complete.
    if (tile == 0 && early_fresh) {
      cp_async_wait<0>();
    } else {
      cp_async_wait<L::kStages - 2>();
    }
    __syncthreads();  // the tile is visible to all; the stage refilled below is consumed
    if (tile == 0) trace::mark(attention_trace, trace::slot_of(p), kFirstTile);
    const int ahead = tile + L::kStages - 1;
    if (ahead < tiles) {
      // Window w + 1 was requested when copies reached window w; it is stored
      // half a window later, behind this barrier, into the buffer window w - 1
      // left (its last copy was issued before the barrier), and first read
      // half a window and at least one barrier after that.
      const int w = ahead / kWindowTiles;
      if (ahead % kWindowTiles == kWindowTiles / 2 && w + 1 < windows) {
        store_window(windows_s, w + 1, entries);
      }
      issue.template operator()<TileKeys::kAll>(ahead);
      if (ahead % kWindowTiles == 0 && w + 1 < windows) {
        load_window(p, table, begin, end, end, w + 1, entries);
      }
    }
    cp_async_commit();

    const int stage = tile % L::kStages;
    const bf16* ks = k_stage(stage) + warp * 16 * L::kLd;
    const bf16* vs = v_stage(stage) + warp * 16 * L::kLd;
    const int* flags = flags_s + stage * kTileKeys + warp * 16;

    // S = Q K^T for this warp's 16 keys: s[n] holds keys 8n..8n+7.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kMaxHd / 16; ++kk) {
      unsigned a[4];
      unsigned b[4];
      ldmatrix_x4(a, q_s + (lane & 15) * L::kLd + kk * 16 + (lane >> 4) * 8);
      ldmatrix_x4(b,
                  ks + ((lane & 7) + (lane >> 4) * 8) * L::kLd + kk * 16 + ((lane >> 3) & 1) * 8);
      mma_bf16_16816(s[0], a, b[0], b[1]);
      mma_bf16_16816(s[1], a, b[2], b[3]);
    }

    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int key = n * 8 + t4 * 2 + (c & 1);
        float x = s[n][c] * scale;
        if (softcap > 0.0f) x = softcap * tanhf(x / softcap);
        x = flags[key] != 0 ? x * kLog2e : -INFINITY;
        s[n][c] = x;
        tile_max[c >> 1] = fmaxf(tile_max[c >> 1], x);
      }
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float m_new = fmaxf(m[r], tile_max[r]);
      // exp2(-inf) = 0 rescales an empty history; an all-masked row stays at 1.
      alpha[r] = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
      m[r] = m_new;
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float mr = m[c >> 1];
        const float prob = mr == -INFINITY ? 0.0f : exp2f(s[n][c] - mr);
        s[n][c] = prob;
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] = l[r] * alpha[r] + s[0][2 * r] + s[0][2 * r + 1] + s[1][2 * r] + s[1][2 * r + 1];
    }
#pragma unroll
    for (int n = 0; n < kMaxHd / 8; ++n) {
      acc[n][0] *= alpha[0];
      acc[n][1] *= alpha[0];
      acc[n][2] *= alpha[1];
      acc[n][3] *= alpha[1];
    }

    // O += P V: P's accumulator layout is already the A operand's.
    unsigned pa[4];
    pa[0] = pack_bf16x2(s[0][0], s[0][1]);
    pa[1] = pack_bf16x2(s[0][2], s[0][3]);
    pa[2] = pack_bf16x2(s[1][0], s[1][1]);
    pa[3] = pack_bf16x2(s[1][2], s[1][3]);
#pragma unroll
    for (int dn = 0; dn < kMaxHd / 16; ++dn) {
      unsigned b[4];
      ldmatrix_x4_trans(
          b, vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * L::kLd + dn * 16 + (lane >> 4) * 8);
      mma_bf16_16816(acc[2 * dn], pa, b[0], b[1]);
      mma_bf16_16816(acc[2 * dn + 1], pa, b[2], b[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the tiles: reuse them for the merge
  trace::mark(attention_trace, trace::slot_of(p), kKeysDone);

  float* merge_acc = reinterpret_cast<float*>(smem + L::kMergeAcc);
  float* merge_m = reinterpret_cast<float*>(smem + L::kMergeM);  // then the warps' weights
  float* merge_l = reinterpret_cast<float*>(smem + L::kMergeL);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int n = 0; n < kMaxHd / 8; ++n) {
    const int col = n * 8 + t4 * 2;
    float* row0 = merge_acc + (warp * kRows + g) * L::kLdo + col;
    float* row1 = row0 + 8 * L::kLdo;
    *reinterpret_cast<float2*>(row0) = make_float2(acc[n][0], acc[n][1]);
    *reinterpret_cast<float2*>(row1) = make_float2(acc[n][2], acc[n][3]);
  }
  if (t4 == 0) {
    merge_m[warp * kRows + g] = m[0];
    merge_m[warp * kRows + g + 8] = m[1];
    merge_l[warp * kRows + g] = l[0];
    merge_l[warp * kRows + g + 8] = l[1];
  }
  __syncthreads();

  // The block's maximum and denominator per head, and each warp's weight, are
  // worked out once per head, not once per output column.
  float* block_m = reinterpret_cast<float*>(smem + L::kClusterM);
  float* block_l = reinterpret_cast<float*>(smem + L::kClusterL);
  if (tid < heads) {
    float m_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_max = fmaxf(m_max, merge_m[w * kRows + tid]);
    float den = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = merge_m[w * kRows + tid];
      const float weight = mw == -INFINITY ? 0.0f : exp2f(mw - m_max);
      den += weight * merge_l[w * kRows + tid];
      merge_m[w * kRows + tid] = weight;
    }
    block_m[tid] = m_max;
    block_l[tid] = den;
    if (!clustered && used > 1) {
      float* stats = partial_stats(p, row, first_head + tid, split);
      stats[0] = m_max;
      stats[1] = den;
    }
  }
  __syncthreads();

  for (int e = tid; e < heads * L::kQuads; e += kThreads) {
    const auto [h, d] = head_quad<kMaxHd>(e);
    if (d >= hd) continue;
    float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      num = fma4(merge_m[w * kRows + h],
                 *reinterpret_cast<const float4*>(merge_acc + (w * kRows + h) * L::kLdo + d), num);
    }
    if (used == 1) {
      store_out4(p, token, first_head + h, d, num, block_l[h]);
    } else if (clustered) {
      *reinterpret_cast<float4*>(reinterpret_cast<float*>(smem + L::kClusterAcc) + h * kMaxHd + d) =
          num;
    } else {
      *reinterpret_cast<float4*>(partial_acc(p, row, first_head + h, split) + d) = num;
    }
  }
  trace::mark(attention_trace, trace::slot_of(p), kBlockMerged);
  if (clustered) {
    cluster_merge<kMaxHd>(p, token, first_head, heads, used, split);
    return;
  }
  if (used == 1) return;

  // The last split block of this (token, head group) to arrive merges them.
  int* is_last = reinterpret_cast<int*>(smem + L::kIsLast);
  fence_acq_rel_gpu();  // this block's partials are visible device-wide before the count
  __syncthreads();
  if (tid == 0) {
    int* counter = p.counters + static_cast<std::int64_t>(row) * gridDim.y + blockIdx.y;
    const int arrived = atomicAdd(counter, 1);
    const bool last = arrived == used - 1;
    if (last) atomicExch(counter, 0);  // ready for the next launch
    *is_last = last ? 1 : 0;
  }
  __syncthreads();
  if (*is_last == 0) return;
  fence_acq_rel_gpu();  // the other blocks' partials, released before their counts

  float* split_m = reinterpret_cast<float*>(smem + L::kSplitM);  // then the weights
  float* split_l = reinterpret_cast<float*>(smem + L::kSplitL);
  float* row_den = reinterpret_cast<float*>(smem + L::kRowDen);
  // Partials are read through L2 (__ldcg): other blocks wrote them.
  for (int idx = tid; idx < heads * used; idx += kThreads) {
    const int h = idx / used;
    const int sp = idx % used;
    const float* stats = partial_stats(p, row, first_head + h, sp);
    split_m[h * L::kMaxSplits + sp] = __ldcg(stats);
    split_l[h * L::kMaxSplits + sp] = __ldcg(stats + 1);
  }
  __syncthreads();
  if (tid < heads) {
    float* ms = split_m + tid * L::kMaxSplits;
    const float* ls = split_l + tid * L::kMaxSplits;
    float m_max = -INFINITY;
    for (int sp = 0; sp < used; ++sp) {
      if (ls[sp] > 0.0f) m_max = fmaxf(m_max, ms[sp]);
    }
    float den = 0.0f;
    for (int sp = 0; sp < used; ++sp) {
      const float weight = ls[sp] > 0.0f ? exp2f(ms[sp] - m_max) : 0.0f;
      den += weight * ls[sp];
      ms[sp] = weight;
    }
    row_den[tid] = den;
  }
  __syncthreads();
  for (int e = tid; e < heads * L::kQuads; e += kThreads) {
    const auto [h, d] = head_quad<kMaxHd>(e);
    if (d >= hd) continue;
    const float* weights = split_m + h * L::kMaxSplits;
    const float* src = partial_acc(p, row, first_head + h, 0) + d;
    float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int sp = 0; sp < used; ++sp) {
      num = fma4(weights[sp],
                 __ldcg(reinterpret_cast<const float4*>(src + static_cast<std::int64_t>(sp) * hd)),
                 num);
    }
    store_out4(p, token, first_head + h, d, num, row_den[h]);
  }
  trace::mark(attention_trace, trace::slot_of(p), kMergedStored);
}

}  // namespace

std::size_t attention_decode_v2_smem_bytes(std::int32_t head_dim) {
  switch (head_dim_bucket(head_dim)) {
    case 64: return V2Layout<64>::kBytes;
    case 128: return V2Layout<128>::kBytes;
    case 256: return V2Layout<256>::kBytes;
    default: return 0;
  }
}

void launch_attention_decode_v2(const AttentionParams& requested, cudaStream_t stream) {
  // Where the device has no clusters (before sm_90) the splits merge through
  // the counter.
  AttentionParams params = requested;
  if (params.cluster > 1 && !cluster_launch_supported()) params.cluster = 1;
  trace::assign_slot(params, attention_trace, [&] {
    return "attention/decode_v2 rows=" + std::to_string(params.num_tokens) +
           " hd=" + std::to_string(params.head_dim) +
           " splits=" + std::to_string(params.num_splits) +
           " cluster=" + std::to_string(params.cluster);
  });
  const int group = params.num_heads / params.num_kv_heads;
  const int head_groups = (group + kRows - 1) / kRows;
  const dim3 grid(params.num_tokens, params.num_kv_heads * head_groups, params.num_splits);
  const bool dispatched = dispatch_head_dim(params.head_dim, [&]<int kMaxHd>() {
    const unsigned cluster = params.num_splits > 1 ? static_cast<unsigned>(params.cluster) : 1u;
    launch(
        attention_decode_v2_kernel<kMaxHd>,
        LaunchConfig{grid, dim3(kThreads), V2Layout<kMaxHd>::kBytes, stream, params.pdl, cluster},
        params);
  });
  if (!dispatched) {
    cuda_failed(cudaErrorInvalidValue, "launch_attention_decode_v2: unvalidated head_dim");
  }
}

}  // namespace cellm::cuda
