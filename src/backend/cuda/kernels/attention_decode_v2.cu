// Decode attention v2 (see attention.cuh). One block per (token, kv head,
// group of up to 16 q heads, split); four warps. K/V tiles of 64 keys are
// copied into shared memory by cp.async, kStages deep, so a block keeps tens
// of KB in flight instead of the first decode kernel's few hundred bytes per
// warp. The cells of the keys come from the sequence's table in windows of
// 512 staged in shared memory, each read from global memory half a window
// before its first tile.
// Keys older than the step (AttentionParams::fresh_from) are staged before
// the programmatic-launch wait, while the q/k/v projection still runs; after
// it only Q and the step's own keys are fetched.
// Each warp owns 16 keys of a tile and runs its own online softmax over them
// with tensor cores: S = Q K^T (16 heads x 16 keys), P = exp2(S - m) kept in
// registers as the A operand of O += P V. The warps' states are merged in
// shared memory at the end. With several splits the splits of a (token,
// head group) are merged in split order (deterministic): through distributed
// shared memory when the launch clusters them and the token's used splits fit
// in one cluster (pulled by every block, or, where each block has an SM,
// pushed into the first block, which merges alone), otherwise by the last
// block to finish, through a float workspace and a counter. The block's
// layout, the key staging and the merges are in
// attention_decode_v2_{layout,stage,merge,push}.cuh.
#include <algorithm>
#include <cooperative_groups.h>
#include <string>
#include <type_traits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/attention_decode_v2_layout.cuh"
#include "backend/cuda/kernels/attention_decode_v2_merge.cuh"
#include "backend/cuda/kernels/attention_decode_v2_push.cuh"
#include "backend/cuda/kernels/attention_decode_v2_stage.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/kv_fp8.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

// Timeline marks of the kernel (kernel_trace.cuh); its phases are
// attention_decode_v2_layout.cuh's Phase.
CELLM_TRACE_TABLE(attention_trace);

// Register bounds: five blocks per SM at 64-wide heads, which is what their
// shared memory allows (at most 96 registers), and four up to 128-wide heads
// (122 registers in session 22's sm_90 build, no spills), so a block fits beside the three blocks
// an SM holds of the q/k/v GEMV instead of waiting for them to leave. kPacked: the packed K/V
// layout (V2Layout), three blocks an SM at 128-wide heads, and the key loop requests its next
// tile before it waits. kFp8: FP8 pools (V2Layout's kFp8), each warp widening its keys of a stage
// into the bf16 tile its mma reads.
template <int kMaxHd, bool kPacked = false, bool kFp8 = false>
__global__ void __launch_bounds__(kThreads, (kMaxHd <= 64 ? 5 : (kMaxHd <= 128 ? 4 : 1)))
    attention_decode_v2_kernel(const __grid_constant__ AttentionParams p) {
  // Every return below is taken by the whole block (the exit mark's barrier).
  const trace::BlockScope traced(attention_trace, trace::slot_of(p));
  using L = V2Layout<kMaxHd, kPacked, kFp8>;
  using KvT = std::conditional_t<kFp8, fp8_e4m3, bf16>;
  // The merges (merge.cuh, push.cuh) find their areas through the bf16 layout.
  static_assert(L::kClusterAcc == V2Layout<kMaxHd>::kClusterAcc &&
                L::kMergeAcc == V2Layout<kMaxHd>::kMergeAcc &&
                L::kQuads == V2Layout<kMaxHd>::kQuads);
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
  // The push merge's barrier in block 0 counts the bytes the other used
  // splits will store (attention_decode_v2_push.cuh); every block arrives on
  // the cluster barrier that publishes it, and blocks with no keys leave.
  const bool push = clustered && p.push_merge;
  auto* push_bar = reinterpret_cast<std::uint64_t*>(smem + L::kPushBar);
  if (push) {
    if (split == 0 && tid == 0) {
      mbar_init(push_bar, 1);
      mbar_expect_bytes(push_bar,
                        static_cast<unsigned>(sizeof(float) * (used - 1) * heads * (hd + 2)));
      mbar_init_fence();
    }
    cluster_arrive_relaxed();
    if (split >= used) {
      cluster_wait();
      return;
    }
  }
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
  // window's cells, copies them for the first kStages tiles and pulls the
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
  const int chunk = tid % L::kKvChunks;
  const int key0 = tid / L::kKvChunks;
  // The cp.async stages: bf16 tiles, or with FP8 pools their codes.
  const KvStages<L, kFp8, kTileKeys, L::kLdKv> stages{smem};
  auto issue = [&]<TileKeys kKeys>(int tile) {
    const int stage = tile % L::kStages;
    issue_tile<kMaxHd, kKeys, kPacked, KvT>(p, kv_head, stages.k(stage), stages.v(stage),
                                            flags_s + stage * kTileKeys, key0, chunk, windows_s,
                                            tile, begin + tile * kTileKeys, settled, end);
  };
  // Every stage is filled before the wait, so a block of up to kStages tiles
  // (1B batch 1 at 512 keys: two tiles a block) has all its copies in flight
  // while the projection runs (H200, 1B batch 1: 0.966 -> 0.956 ms/step);
  // the key loop refills a stage only from its second iteration on, once the
  // stage's first tile is consumed.
  const int early_tiles = min(tiles, L::kStages);
#pragma unroll
  for (int s = 0; s < L::kStages; ++s) {
    if (s < tiles) issue.template operator()<TileKeys::kSettled>(s);
    cp_async_commit();
  }
  for (int tile = early_tiles; tile < min(tiles, min(kWindowTiles, early_tiles + 2)); ++tile) {
    prefetch_tile<kMaxHd, KvT>(p, kv_head, key0, chunk, windows_s, tile, begin + tile * kTileKeys,
                               settled);
  }
  __syncthreads();  // window 0 is read: resolve_window may overwrite its fresh entries
  trace::mark(attention_trace, trace::slot_of(p), kEarlyReadsIssued);

  // The next kernel may launch once the wait returns where every block of
  // this launch has an SM of its own (AttentionParams::early_next), else only
  // once the outputs are stored (in cluster_merge; other paths at exit). The
  // kernel does not fetch the next projection's weights. Measured slower on
  // the H200 (bench/results/README.md, sessions 5, 6 and 9):
  // - launching the o GEMV before the wait or after the key loop in every
  //   launch, packed blocks included: 8B batch 1 4.45 -> 5.31 and 4.35 ->
  //   5.17 ms/step; measured again per kernel, 4.31 -> 5.11, the attention
  //   and every GEMV after it (and the lm_head) slower;
  // - bulk L2 prefetches of the o (and gate/up) weights after the key loop:
  //   1B 0.95 -> 1.00-1.27, 8B 4.35 -> 4.40-4.54 ms/step, the attention
  //   itself 7.6 -> 19.8 us a layer at 1B.
  griddep_wait();
  trace::mark(attention_trace, trace::slot_of(p), trace::kWaitMark);
  if (p.early_next) griddep_launch_dependents();

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
    // The stage consumed by the previous iteration (none at the first) takes
    // tile `ahead`, once every warp is past that iteration's barrier.
    const int ahead = tile + L::kStages - 1;
    const auto refill = [&] {
      if (tile > 0 && ahead < tiles) {
        // Window w + 1 was requested when copies reached window w; it is
        // stored half a window later, behind a barrier, into the buffer
        // window w - 1 left (its last copy was issued before that barrier),
        // and first read half a window and at least one barrier after that.
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
    };
    // Groups so far: one per stage filled early, the fresh keys', then one
    // per iteration (empty at the first). Tile t >= kStages is in group
    // t + 2, the group of iteration t - kStages + 1; an earlier tile sits in
    // a group at least as old. Where the early tiles hold fresh keys the
    // first iteration waits for every group, theirs among them.
    if constexpr (kPacked) {
      // This iteration's group is committed before the wait, which then
      // leaves the newest kStages - 1 groups in flight: kStages tiles are
      // requested while the block waits, not kStages - 1 (with two stages,
      // none). Measured with the packed layout only, where it was 0.2-1.2%
      // faster (8B batch 240); three padded stages gained nothing with it.
      if (tile > 0) __syncthreads();  // every warp is done with the stage refilled
      refill();
      if (tile == 0 && early_fresh) {
        cp_async_wait<0>();
      } else {
        cp_async_wait<L::kStages - 1>();
      }
      __syncthreads();  // the tile is visible to all
      if (tile == 0) trace::mark(attention_trace, trace::slot_of(p), kFirstTile);
    } else {
      // The wait first, leaving the newest kStages - 2 groups in flight.
      if (tile == 0 && early_fresh) {
        cp_async_wait<0>();
      } else {
        cp_async_wait<L::kStages - 2>();
      }
      __syncthreads();  // the tile is visible to all; the stage refilled below is consumed
      if (tile == 0) trace::mark(attention_trace, trace::slot_of(p), kFirstTile);
      refill();
    }

    const int stage = tile % L::kStages;
    const bf16* ks;
    const bf16* vs;
    if constexpr (kFp8) {
      // This warp's 16 keys of the stage, widened into its own rows of the
      // bf16 tile: no other warp reads them, so the warp's barrier suffices
      // (its reads of the previous tile's rows were before the block's).
      ks = k_s + warp * 16 * L::kLdKv;
      vs = v_s + warp * 16 * L::kLdKv;
      decode_e4m3_rows<kMaxHd, 16, 32>(stages.k(stage) + warp * 16 * kMaxHd,
                                       k_s + warp * 16 * L::kLdKv, L::kLdKv, lane);
      decode_e4m3_rows<kMaxHd, 16, 32>(stages.v(stage) + warp * 16 * kMaxHd,
                                       v_s + warp * 16 * L::kLdKv, L::kLdKv, lane);
      __syncwarp();
    } else {
      ks = stages.k(stage) + warp * 16 * L::kLdKv;
      vs = stages.v(stage) + warp * 16 * L::kLdKv;
    }
    const int* flags = flags_s + stage * kTileKeys + warp * 16;

    // S = Q K^T for this warp's 16 keys: s[n] holds keys 8n..8n+7.
    float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kMaxHd / 16; ++kk) {
      unsigned a[4];
      unsigned b[4];
      ldmatrix_x4(a, q_s + (lane & 15) * L::kLd + kk * 16 + (lane >> 4) * 8);
      ldmatrix_x4(b,
                  ks + L::kv_index((lane & 7) + (lane >> 4) * 8, kk * 16 + ((lane >> 3) & 1) * 8));
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
          b, vs + L::kv_index((lane & 7) + ((lane >> 3) & 1) * 8, dn * 16 + (lane >> 4) * 8));
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
  PushTarget target;
  if (push) {
    cluster_wait();  // block 0's barrier is initialised (everyone arrived long ago)
    target.local_slots = reinterpret_cast<float*>(smem + L::kPushSlots);
    target.remote_slots = cluster_address(target.local_slots, 0);
    target.remote_bar = cluster_address(push_bar, 0);
    target.stride = push_slot_floats(push_heads_cap(p.num_heads, p.num_kv_heads), hd);
    target.split = split;
  }
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
    if (push) {
      target.put(tid, m_max);
      target.put(kRows + tid, den);
    }
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
    } else if (push) {
      target.put(2 * kRows + h * hd + d, num);
    } else if (clustered) {
      *reinterpret_cast<float4*>(reinterpret_cast<float*>(smem + L::kClusterAcc) + h * kMaxHd + d) =
          num;
    } else {
      *reinterpret_cast<float4*>(partial_acc(p, row, first_head + h, split) + d) = num;
    }
  }
  trace::mark(attention_trace, trace::slot_of(p), kBlockMerged);
  if (push) {
    // The other blocks are done once their stores are issued; block 0 waits
    // for their bytes and merges its slots.
    if (split != 0) return;
    __syncthreads();               // its own slot is visible to all its threads
    mbar_wait<true>(push_bar, 0);  // acquires the others' stores
    const float* slots = target.local_slots;
    for (int e = tid; e < heads * L::kQuads; e += kThreads) {
      const auto [h, d] = head_quad<kMaxHd>(e);
      if (d >= hd) continue;
      const MergedQuad merged = merge_parts(used, [&](int j, float& m, float& l, float4& a) {
        const float* slot = slots + j * target.stride;
        m = slot[h];
        l = slot[kRows + h];
        a = *reinterpret_cast<const float4*>(slot + 2 * kRows + h * hd + d);
      });
      store_out4(p, token, first_head + h, d, merged.num, merged.den);
    }
    trace::mark(attention_trace, trace::slot_of(p), kMergedStored);
    griddep_launch_dependents();  // the outputs are stored (cluster_merge's rule)
    return;
  }
  if (clustered) {
    cluster_merge<kMaxHd>(attention_trace, p, token, first_head, heads, used, split);
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

dim3 decode_v2_grid(const AttentionParams& p) {
  const int group = p.num_heads / p.num_kv_heads;
  const int head_groups = (group + kRows - 1) / kRows;
  return dim3(p.num_tokens, p.num_kv_heads * head_groups, p.num_splits);
}

bool fits_one_block_per_sm(dim3 grid) {
  return static_cast<long long>(grid.x) * grid.y * grid.z <= multiprocessor_count();
}

}  // namespace

bool attention_decode_v2_push_merges(const AttentionParams& p) {
  if (!p.push_merge || p.num_splits <= 1 || p.cluster <= 1 || p.num_kv_heads <= 0 ||
      !cluster_launch_supported() || !fits_one_block_per_sm(decode_v2_grid(p))) {
    return false;
  }
  // Only within the shared memory the launch takes anyway (the spread's):
  // more would take L1 from the GEMV blocks beside it. 64-wide heads fit;
  // 128-wide ones (8B) fill the spread's share with their own stages.
  std::size_t bytes = 0;
  std::size_t room = 0;
  dispatch_head_dim(p.head_dim, [&]<int kMaxHd>() {
    const int cap = push_heads_cap(p.num_heads, p.num_kv_heads);
    if (p.kv_dtype == KvDtype::kFp8) {
      bytes = push_merge_smem_bytes<kMaxHd, true>(cap, p.head_dim, p.cluster);
      room = V2Layout<kMaxHd, false, true>::kBytes;
    } else {
      bytes = push_merge_smem_bytes<kMaxHd>(cap, p.head_dim, p.cluster);
      room = V2Layout<kMaxHd>::kBytes;
    }
  });
  if (p.spread) room = std::max(room, one_block_per_sm_smem());
  return bytes > 0 && bytes <= room;
}

bool attention_decode_v2_packs(const AttentionParams& p) {
  // FP8 pools' stages are half the bytes already; they take the padded layout.
  if (p.pack_wide == PackWide::kNever || p.num_kv_heads <= 0 ||
      head_dim_bucket(p.head_dim) != 128 || p.kv_dtype == KvDtype::kFp8) {
    return false;
  }
  if (p.pack_wide == PackWide::kAlways) return true;
  // Packing pays only where it saves a wave: each packed block runs slower
  // (two stages, three blocks sharing the SM's bandwidth), so at equal waves
  // it lost (H200, 8B batch 64 at 640 keys, 512 blocks in two waves either
  // way: 6.82 against 6.60 ms a step; batch 240, eight waves against five:
  // 12.93 against 13.45-13.59).
  const dim3 grid = decode_v2_grid(p);
  const long long blocks = static_cast<long long>(grid.x) * grid.y * grid.z;
  const auto waves = [&](std::size_t smem) {
    const long long resident =
        static_cast<long long>(blocks_per_sm_by_smem(smem)) * multiprocessor_count();
    return (blocks + resident - 1) / resident;
  };
  return waves(V2Layout<128, true>::kBytes) < waves(V2Layout<128>::kBytes);
}

std::size_t attention_decode_v2_smem_bytes(std::int32_t head_dim, KvDtype kv_dtype) {
  const bool fp8 = kv_dtype == KvDtype::kFp8;
  switch (head_dim_bucket(head_dim)) {
    case 64: return fp8 ? V2Layout<64, false, true>::kBytes : V2Layout<64>::kBytes;
    case 128: return fp8 ? V2Layout<128, false, true>::kBytes : V2Layout<128>::kBytes;
    case 256: return fp8 ? V2Layout<256, false, true>::kBytes : V2Layout<256>::kBytes;
    default: return 0;
  }
}

void launch_attention_decode_v2(const AttentionParams& requested, cudaStream_t stream) {
  // Where the device has no clusters (before sm_90) the splits merge through
  // the counter.
  AttentionParams params = requested;
  if (params.cluster > 1 && !cluster_launch_supported()) params.cluster = 1;
  trace::assign_slot(params, attention_trace, [&] {
    return std::string("attention/decode_v2") + " rows=" + std::to_string(params.num_tokens) +
           " hd=" + std::to_string(params.head_dim) +
           " splits=" + std::to_string(params.num_splits) +
           " cluster=" + std::to_string(params.cluster) +
           (params.kv_dtype == KvDtype::kFp8 ? " kv=fp8" : "");
  });
  const dim3 grid = decode_v2_grid(params);
  const bool fits = fits_one_block_per_sm(grid);
  params.early_next = params.early_next && fits;
  params.push_merge = attention_decode_v2_push_merges(params);
  const bool packs = attention_decode_v2_packs(params);
  const bool dispatched = dispatch_head_dim(params.head_dim, [&]<int kMaxHd>() {
    const unsigned cluster = params.num_splits > 1 ? static_cast<unsigned>(params.cluster) : 1u;
    if constexpr (kMaxHd == 128) {
      if (packs) {
        launch(attention_decode_v2_kernel<kMaxHd, true>,
               LaunchConfig{grid, dim3(kThreads), V2Layout<kMaxHd, true>::kBytes, stream,
                            params.pdl, cluster},
               params);
        return;
      }
    }
    if (params.kv_dtype == KvDtype::kFp8) {
      std::size_t smem = V2Layout<kMaxHd, false, true>::kBytes;
      // The push merge's slots fit in this (attention_decode_v2_push_merges).
      if (params.spread && fits) smem = std::max(smem, one_block_per_sm_smem());
      launch(attention_decode_v2_kernel<kMaxHd, false, true>,
             LaunchConfig{grid, dim3(kThreads), smem, stream, params.pdl, cluster}, params);
      return;
    }
    std::size_t smem = V2Layout<kMaxHd>::kBytes;
    // The push merge's slots fit in this (attention_decode_v2_push_merges).
    if (params.spread && fits) smem = std::max(smem, one_block_per_sm_smem());
    launch(attention_decode_v2_kernel<kMaxHd>,
           LaunchConfig{grid, dim3(kThreads), smem, stream, params.pdl, cluster}, params);
  });
  if (!dispatched) {
    cuda_failed(cudaErrorInvalidValue, "launch_attention_decode_v2: unvalidated head_dim");
  }
}

}  // namespace cellm::cuda
