// Prefill attention v2 (see attention.cuh). One block per (q head, 64 query
// rows); four warps of 16 rows each. The rows of a tile are served one
// sequence (segment) at a time, as the first prefill kernel did, but the
// scores, the probabilities and the output accumulator stay in registers
// (mma.sync m16n8k16: S = Q K^T per warp over 64 keys, P reused as the A
// operand of O += P V), and K/V tiles are double-buffered through shared
// memory with cp.async. A warp skips the math of a tile none of its rows can
// see (other sequence, past every row's position, before every row's window).
// FP8 pools (kFp8): the stages hold E4M3 codes and, once a stage has landed,
// the block widens it into one bf16 tile of K and one of V that the mma reads
// as it reads a bf16 stage (one more barrier a tile).
#include <type_traits>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/dispatch.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/kv_fp8.cuh"
#include "backend/cuda/kernels/ptx_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBq = kWarps * 16;  // query rows per block
constexpr int kBk = 64;           // keys per tile
constexpr int kStages = 2;
constexpr float kLog2e = 1.4426950408889634f;

enum RowState : int { kInactive = 0, kPending = 1, kCurrent = 2, kDone = 3 };

// kFp8: the stages hold [kBk, kMaxHd] E4M3 codes each (rows unpadded), and
// one bf16 tile of K and of V takes them widened.
template <int kMaxHd, bool kFp8 = false>
struct PrefillV2Layout {
  static constexpr int kLd = kMaxHd + 8;      // bf16 rows padded by 16 bytes (ldmatrix banks)
  static constexpr int kChunks = kMaxHd / 8;  // 16-byte pieces of a bf16 row (Q)
  // The K/V copies: 16-byte pieces of a pool row (8 bf16 or 16 E4M3 codes).
  static constexpr int kKvElems = kFp8 ? 16 : 8;
  static constexpr int kKvChunks = kMaxHd / kKvElems;
  static constexpr int kKeyStep = kThreads / kKvChunks;
  static constexpr int kCopies = kBk / kKeyStep;  // per thread, per K (and V) tile
  static constexpr int kBf16Tiles = kFp8 ? 1 : kStages;
  static constexpr std::size_t kStageBytes = kFp8 ? std::size_t{kBk} * kMaxHd : 0;
  static constexpr std::size_t kQ = 0;
  static constexpr std::size_t kK = kQ + sizeof(bf16) * kBq * kLd;
  static constexpr std::size_t kV = kK + sizeof(bf16) * kBf16Tiles * kBk * kLd;
  static constexpr std::size_t kK8 = kV + sizeof(bf16) * kBf16Tiles * kBk * kLd;
  static constexpr std::size_t kV8 = kK8 + kStages * kStageBytes;
  static constexpr std::size_t kFlags = kV8 + kStages * kStageBytes;
  static constexpr std::size_t kMeta = kFlags + sizeof(int) * kStages * kBk;
  static constexpr std::size_t kBytes = kMeta + sizeof(int) * (4 * kBq + 4);
  static_assert(kThreads % kKvChunks == 0 && kBk % kKeyStep == 0);
  static_assert(kK8 % 16 == 0 && kV8 % 16 == 0, "cp.async writes 16-byte pieces");
};

template <int kMaxHd, bool kFp8>
__device__ __forceinline__ void fetch_cells(const AttentionParams& p, const std::int32_t* table,
                                            int tile_begin, int end, int key0,
                                            int (&cells)[PrefillV2Layout<kMaxHd, kFp8>::kCopies]) {
  using L = PrefillV2Layout<kMaxHd, kFp8>;
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int kpos = tile_begin + key0 + i * L::kKeyStep;
    int cell = kpos < end ? table[kpos] : -1;
    if (cell >= p.max_cells) cell = -1;
    cells[i] = cell;
  }
}

// KvT: the pools' element (bf16, or fp8_e4m3 for FP8 pools).
template <int kMaxHd, typename KvT>
__device__ __forceinline__ void issue_tile(
    const AttentionParams& p, int kv_head, KvT* k_stage, KvT* v_stage, int* flags, int key0,
    int chunk, const int (&cells)[PrefillV2Layout<kMaxHd, sizeof(KvT) == 1>::kCopies]) {
  constexpr bool kFp8 = sizeof(KvT) == 1;
  using L = PrefillV2Layout<kMaxHd, kFp8>;
  // Stage rows: padded bf16 rows, or unpadded rows of codes.
  constexpr int kStageLd = kFp8 ? kMaxHd : L::kLd;
  const int dim = chunk * L::kKvElems;
  const bool dim_ok = dim < p.head_dim;
#pragma unroll
  for (int i = 0; i < L::kCopies; ++i) {
    const int key = key0 + i * L::kKeyStep;
    const bool ok = cells[i] >= 0;
    const bool fill = ok && dim_ok;
    // A zero-filling copy reads nothing but still gets an in-bounds address.
    const std::int64_t offset =
        fill ? (static_cast<std::int64_t>(cells[i]) * p.num_kv_heads + kv_head) * p.head_dim + dim
             : 0;
    // The pools are read from the params at each copy, as before FP8 pools came.
    cp_async16(k_stage + key * kStageLd + dim, static_cast<const KvT*>(p.k_pool) + offset, fill);
    cp_async16(v_stage + key * kStageLd + dim, static_cast<const KvT*>(p.v_pool) + offset, fill);
    if (chunk == 0) flags[key] = ok ? 1 : 0;
  }
}

// FP8 pools at 64-wide heads: held to four blocks an SM (128 registers), as
// many as their shared memory and the bf16 kernel's registers allow; unbounded
// the widening took 134 registers and three blocks. (0: no bound, the bf16
// kernels' attribute as before.)
template <int kMaxHd, bool kFp8 = false>
__global__ void __launch_bounds__(kThreads, kFp8&& kMaxHd <= 64 ? 4 : 0)
    attention_prefill_v2_kernel(const __grid_constant__ AttentionParams p) {
  using L = PrefillV2Layout<kMaxHd, kFp8>;
  using KvT = std::conditional_t<kFp8, fp8_e4m3, bf16>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* k_s = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* v_s = reinterpret_cast<bf16*>(smem + L::kV);
  int* flags_s = reinterpret_cast<int*>(smem + L::kFlags);
  int* row_pos = reinterpret_cast<int*>(smem + L::kMeta);
  int* row_lo = row_pos + kBq;
  int* row_slot = row_lo + kBq;
  int* row_state = row_slot + kBq;
  int* seg = row_state + kBq;  // slot, lo, hi

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  // Heads vary fastest and the last row tiles come first: a causal prompt's
  // later rows see the most keys, so the longest blocks start first instead
  // of trailing the launch, and the heads sharing a kv head read its tiles
  // at about the same time, from L2 after the first.
  const int head = blockIdx.x;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int t0 = (gridDim.y - 1 - blockIdx.y) * kBq;
  const int hd = p.head_dim;

  for (int r = tid; r < kBq; r += kThreads) {
    const int t = t0 + r;
    int state = kInactive;
    int slot = -1;
    int pos = 0;
    if (t < p.num_tokens) {
      const int token = p.rows != nullptr ? p.rows[t] : t;
      slot = p.seq_slots[token];
      pos = p.positions[token];
      if (slot >= 0 && slot < p.max_seqs && pos >= 0 && pos < p.table_stride) state = kPending;
    }
    row_state[r] = state;
    row_slot[r] = slot;
    row_pos[r] = pos;
    row_lo[r] = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  }
  for (int idx = tid; idx < kBq * L::kChunks; idx += kThreads) {
    const int r = idx / L::kChunks;
    const int c = (idx % L::kChunks) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (t0 + r < p.num_tokens && c < hd) {
      const int token = p.rows != nullptr ? p.rows[t0 + r] : t0 + r;
      value = *reinterpret_cast<const uint4*>(p.q + static_cast<std::int64_t>(token) * p.q_stride +
                                              static_cast<std::int64_t>(head) * hd + c);
    }
    *reinterpret_cast<uint4*>(q_s + r * L::kLd + c) = value;
  }

  const int g = lane >> 2;  // fragment row (and row + 8)
  const int t4 = lane & 3;  // fragment column pair
  const int my_rows[2] = {warp * 16 + g, warp * 16 + g + 8};
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};  // this lane's share; summed over the quad at the end
  float acc[kMaxHd / 8][4];
#pragma unroll
  for (int n = 0; n < kMaxHd / 8; ++n) {
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[n][c] = 0.0f;
  }
  const int chunk = tid % L::kKvChunks;
  const int key0 = tid / L::kKvChunks;
  // The cp.async stages: bf16 tiles, or with FP8 pools their codes.
  const KvStages<L, kFp8, kBk, L::kLd> stages{smem};

  // At 128-wide heads a warp's Q fragments stay in registers (32 of them)
  // instead of being read from shared memory again for every tile: 218
  // registers a thread instead of 165 (sm_90), still two blocks an SM, which
  // is what their shared memory allows. At 64-wide heads the extra registers
  // would cost a block an SM (four by shared memory, three at 134 registers).
  constexpr bool kQInRegisters = kMaxHd == 128;
  unsigned q_frag[kQInRegisters ? kMaxHd / 16 : 1][4];
  __syncthreads();  // Q is stored
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int kk = 0; kk < kMaxHd / 16; ++kk) {
      ldmatrix_x4(q_frag[kk], q_s + (warp * 16 + (lane & 15)) * L::kLd + kk * 16 + (lane >> 4) * 8);
    }
  }

  for (;;) {
    __syncthreads();  // row states settled; the previous segment's tiles are consumed
    if (tid == 0) {
      int slot = -1;
      for (int r = 0; r < kBq; ++r) {
        if (row_state[r] == kPending) {
          slot = row_slot[r];
          break;
        }
      }
      int lo = 0x7fffffff;
      int hi = -1;
      for (int r = 0; r < kBq; ++r) {
        if (slot >= 0 && row_state[r] == kPending && row_slot[r] == slot) {
          row_state[r] = kCurrent;
          lo = min(lo, row_lo[r]);
          hi = max(hi, row_pos[r]);
        }
      }
      seg[0] = slot;
      seg[1] = lo;
      seg[2] = hi;
    }
    __syncthreads();
    const int slot = seg[0];
    if (slot < 0) break;
    const int seg_lo = seg[1];
    const int end = seg[2] + 1;
    const std::int32_t* table = p.cell_table + static_cast<std::int64_t>(slot) * p.table_stride;

    // This lane's two rows, and the key range the warp's rows can see.
    bool in[2];
    int rpos[2];
    int rlo[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      in[r] = row_state[my_rows[r]] == kCurrent;
      rpos[r] = row_pos[my_rows[r]];
      rlo[r] = row_lo[my_rows[r]];
    }
    const int warp_hi =
        __reduce_max_sync(0xffffffffu, max(in[0] ? rpos[0] : -1, in[1] ? rpos[1] : -1));
    const int warp_lo = __reduce_min_sync(
        0xffffffffu, min(in[0] ? rlo[0] : 0x7fffffff, in[1] ? rlo[1] : 0x7fffffff));
    // Keys from warp_seen_lo to warp_seen_hi are seen by every row of the
    // warp (none where a row sits out this segment).
    const bool warp_all_in = __all_sync(0xffffffffu, in[0] && in[1]);
    const int warp_seen_hi = __reduce_min_sync(0xffffffffu, min(rpos[0], rpos[1]));
    const int warp_seen_lo = __reduce_max_sync(0xffffffffu, max(rlo[0], rlo[1]));

    const int tiles = (end - seg_lo + kBk - 1) / kBk;
    // The cells of a tile are read from the table one tile ahead of its
    // copies: issuing the copies then waits on no global load, and the read
    // of the next tile's cells overlaps this tile's math. Measured with the
    // launch order below on another machine than before (bench/results,
    // session 22): 8B, a 4096-token prompt, 133.4 against 134.2 ms. The
    // kernel's ~90 TFLOP/s there was issue-bound, two warps a scheduler
    // stalled on dependent math and shared-memory reads (Nsight Compute,
    // session 23): the unmasked tiles and Q in registers took it to ~139.
    //
    // Whether every key of the tile in `cells` has a cell (none past the
    // segment's end, none missing); issued_all_keys is that of the tile the
    // loop waits for next, and decides with the rows' bounds whether the
    // warp may skip the mask.
    const auto all_keys = [](const int(&c)[L::kCopies]) {
      bool all = true;
#pragma unroll
      for (int i = 0; i < L::kCopies; ++i) all = all && c[i] >= 0;
      return all;
    };
    int cells[L::kCopies];
    fetch_cells<kMaxHd, kFp8>(p, table, seg_lo, end, key0, cells);
    issue_tile<kMaxHd, KvT>(p, kv_head, stages.k(0), stages.v(0), flags_s, key0, chunk, cells);
    bool issued_all_keys = all_keys(cells);
    cp_async_commit();
    if (tiles > 1) fetch_cells<kMaxHd, kFp8>(p, table, seg_lo + kBk, end, key0, cells);
    for (int tile = 0; tile < tiles; ++tile) {
      bool next_all_keys = true;
      if (tile + 1 < tiles) {
        const int stage = (tile + 1) % kStages;
        issue_tile<kMaxHd, KvT>(p, kv_head, stages.k(stage), stages.v(stage), flags_s + stage * kBk,
                                key0, chunk, cells);
        next_all_keys = all_keys(cells);
      }
      cp_async_commit();
      if (tile + 2 < tiles) {
        fetch_cells<kMaxHd, kFp8>(p, table, seg_lo + (tile + 2) * kBk, end, key0, cells);
      }
      cp_async_wait<1>();
      // This tile is visible to every warp, and whether all its keys have cells.
      const bool tile_full = __syncthreads_and(issued_all_keys) != 0;
      issued_all_keys = next_all_keys;
      if constexpr (kFp8) {
        // The block widens the stage into the bf16 tiles; the last tile's
        // readers were done at the barrier that ended its iteration.
        const int stage = tile % kStages;
        decode_e4m3_rows<kMaxHd, kBk, kThreads>(stages.k(stage), k_s, L::kLd, tid);
        decode_e4m3_rows<kMaxHd, kBk, kThreads>(stages.v(stage), v_s, L::kLd, tid);
        __syncthreads();
      }

      const int tile_begin = seg_lo + tile * kBk;
      // Warp-uniform: skip a tile none of this warp's rows can see.
      if (warp_hi >= tile_begin && warp_lo < tile_begin + kBk) {
        const int stage = tile % kStages;
        const bf16* ks;
        const bf16* vs;
        if constexpr (kFp8) {
          ks = k_s;
          vs = v_s;
        } else {
          ks = stages.k(stage);
          vs = stages.v(stage);
        }
        const int* flags = flags_s + stage * kBk;

        // S = Q K^T: s[n] holds keys 8n..8n+7 of the tile.
        float s[kBk / 8][4];
#pragma unroll
        for (int n = 0; n < kBk / 8; ++n) {
#pragma unroll
          for (int c = 0; c < 4; ++c) s[n][c] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < kMaxHd / 16; ++kk) {
          unsigned a[4];
          if constexpr (kQInRegisters) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = q_frag[kk][i];
          } else {
            ldmatrix_x4(a, q_s + (warp * 16 + (lane & 15)) * L::kLd + kk * 16 + (lane >> 4) * 8);
          }
#pragma unroll
          for (int nn = 0; nn < kBk / 16; ++nn) {
            unsigned b[4];
            ldmatrix_x4(b, ks + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * L::kLd + kk * 16 +
                               ((lane >> 3) & 1) * 8);
            mma_bf16_16816(s[2 * nn], a, b[0], b[1]);
            mma_bf16_16816(s[2 * nn + 1], a, b[2], b[3]);
          }
        }

        const auto logit = [&](float score) {
          float x = score * p.scale;
          if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
          return x * kLog2e;
        };
        float tile_max[2] = {-INFINITY, -INFINITY};
        // Warp-uniform: a tile every row of the warp sees whole (most of a
        // long prompt's) takes no mask, nor the flags' shared-memory reads.
        if (tile_full && warp_all_in && tile_begin >= warp_seen_lo &&
            tile_begin + kBk - 1 <= warp_seen_hi) {
#pragma unroll
          for (int n = 0; n < kBk / 8; ++n) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              s[n][c] = logit(s[n][c]);
              tile_max[c >> 1] = fmaxf(tile_max[c >> 1], s[n][c]);
            }
          }
        } else {
#pragma unroll
          for (int n = 0; n < kBk / 8; ++n) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              const int r = c >> 1;
              const int key = n * 8 + t4 * 2 + (c & 1);
              const int kpos = tile_begin + key;
              const bool seen = in[r] && flags[key] != 0 && kpos <= rpos[r] && kpos >= rlo[r];
              s[n][c] = seen ? logit(s[n][c]) : -INFINITY;
              tile_max[r] = fmaxf(tile_max[r], s[n][c]);
            }
          }
        }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
          tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
          const float m_new = fmaxf(m[r], tile_max[r]);
          // exp2(-inf) = 0 rescales an empty history; an unseen row stays at 1.
          alpha[r] = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
          m[r] = m_new;
        }
#pragma unroll
        for (int n = 0; n < kBk / 8; ++n) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const float mr = m[c >> 1];
            s[n][c] = mr == -INFINITY ? 0.0f : exp2f(s[n][c] - mr);
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float sum = 0.0f;
#pragma unroll
          for (int n = 0; n < kBk / 8; ++n) sum += s[n][2 * r] + s[n][2 * r + 1];
          l[r] = l[r] * alpha[r] + sum;
        }
#pragma unroll
        for (int n = 0; n < kMaxHd / 8; ++n) {
          acc[n][0] *= alpha[0];
          acc[n][1] *= alpha[0];
          acc[n][2] *= alpha[1];
          acc[n][3] *= alpha[1];
        }

        // O += P V, 16 keys at a time: P's accumulator layout is the A operand's.
#pragma unroll
        for (int kb = 0; kb < kBk / 16; ++kb) {
          unsigned pa[4];
          pa[0] = pack_bf16x2(s[2 * kb][0], s[2 * kb][1]);
          pa[1] = pack_bf16x2(s[2 * kb][2], s[2 * kb][3]);
          pa[2] = pack_bf16x2(s[2 * kb + 1][0], s[2 * kb + 1][1]);
          pa[3] = pack_bf16x2(s[2 * kb + 1][2], s[2 * kb + 1][3]);
          const bf16* vk = vs + kb * 16 * L::kLd;
#pragma unroll
          for (int dn = 0; dn < kMaxHd / 16; ++dn) {
            unsigned b[4];
            ldmatrix_x4_trans(
                b, vk + ((lane & 7) + ((lane >> 3) & 1) * 8) * L::kLd + dn * 16 + (lane >> 4) * 8);
            mma_bf16_16816(acc[2 * dn], pa, b[0], b[1]);
            mma_bf16_16816(acc[2 * dn + 1], pa, b[2], b[3]);
          }
        }
      }
      __syncthreads();  // every warp is done with this stage before it is refilled
    }
    cp_async_wait<0>();
    if (tid < kBq && row_state[tid] == kCurrent) row_state[tid] = kDone;
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = t0 + my_rows[r];
    if (t >= p.num_tokens) continue;
    const int token = p.rows != nullptr ? p.rows[t] : t;
    const float inv_l = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    bf16* dst = p.out + static_cast<std::int64_t>(token) * p.out_stride +
                static_cast<std::int64_t>(head) * hd;
#pragma unroll
    for (int n = 0; n < kMaxHd / 8; ++n) {
      const int d = n * 8 + t4 * 2;
      if (d < hd) {
        // hd is a multiple of 8, so d + 1 < hd too.
        *reinterpret_cast<__nv_bfloat162*>(dst + d) =
            __floats2bfloat162_rn(acc[n][2 * r] * inv_l, acc[n][2 * r + 1] * inv_l);
      }
    }
  }
}

}  // namespace

std::size_t attention_prefill_v2_smem_bytes(std::int32_t head_dim, KvDtype kv_dtype) {
  const bool fp8 = kv_dtype == KvDtype::kFp8;
  switch (head_dim_bucket(head_dim)) {
    case 64: return fp8 ? PrefillV2Layout<64, true>::kBytes : PrefillV2Layout<64>::kBytes;
    case 128: return fp8 ? PrefillV2Layout<128, true>::kBytes : PrefillV2Layout<128>::kBytes;
    case 256: return fp8 ? PrefillV2Layout<256, true>::kBytes : PrefillV2Layout<256>::kBytes;
    default: return 0;
  }
}

void launch_attention_prefill_v2(const AttentionParams& params, cudaStream_t stream) {
  const bool dispatched = dispatch_head_dim(params.head_dim, [&]<int kMaxHd>() {
    const dim3 grid(params.num_heads, ceil_div(params.num_tokens, kBq));
    if (params.kv_dtype == KvDtype::kFp8) {
      launch(attention_prefill_v2_kernel<kMaxHd, true>,
             LaunchConfig{grid, dim3(kThreads), PrefillV2Layout<kMaxHd, true>::kBytes, stream},
             params);
      return;
    }
    launch(attention_prefill_v2_kernel<kMaxHd>,
           LaunchConfig{grid, dim3(kThreads), PrefillV2Layout<kMaxHd>::kBytes, stream}, params);
  });
  if (!dispatched) {
    cuda_failed(cudaErrorInvalidValue, "launch_attention_prefill_v2: unvalidated head_dim");
  }
}

}  // namespace cellm::cuda
