#include <climits>

#include <mma.h>

#include "backend/cuda/dispatch.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBq = 64;  // query rows per block
constexpr int kBk = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;

// Row pitches padded against bank conflicts; every 16-row tile start stays
// 32-byte aligned as wmma requires.
template <int kMaxHd>
struct PrefillLayout {
  static constexpr int kLdq = kMaxHd + 8;  // bf16 Q, K, V rows
  static constexpr int kLds = kBk + 4;     // float scores
  static constexpr int kLdp = kBk + 8;     // bf16 probabilities
  static constexpr int kLdo = kMaxHd + 4;  // float output accumulator
  static constexpr std::size_t kQ = 0;
  static constexpr std::size_t kK = kQ + sizeof(bf16) * kBq * kLdq;
  static constexpr std::size_t kV = kK + sizeof(bf16) * kBk * kLdq;
  static constexpr std::size_t kS = kV + sizeof(bf16) * kBk * kLdq;
  static constexpr std::size_t kP = kS + sizeof(float) * kBq * kLds;
  static constexpr std::size_t kO = kP + sizeof(bf16) * kBq * kLdp;
  static constexpr std::size_t kMeta = kO + sizeof(float) * kBq * kLdo;  // ints below
  static constexpr std::size_t kBytes = kMeta + sizeof(int) * (4 * kBq + kBk + 4);
};

enum RowState : int { kInactive = 0, kPending = 1, kCurrent = 2, kDone = 3 };

template <int kMaxHd>
__global__ void __launch_bounds__(kThreads)
    attention_prefill_kernel(const __grid_constant__ AttentionParams p) {
  using L = PrefillLayout<kMaxHd>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* q_s = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* k_s = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* v_s = reinterpret_cast<bf16*>(smem + L::kV);
  float* s_s = reinterpret_cast<float*>(smem + L::kS);
  bf16* p_s = reinterpret_cast<bf16*>(smem + L::kP);
  float* o_s = reinterpret_cast<float*>(smem + L::kO);
  int* row_pos = reinterpret_cast<int*>(smem + L::kMeta);
  int* row_lo = row_pos + kBq;
  int* row_slot = row_lo + kBq;
  int* row_state = row_slot + kBq;
  int* key_cell = row_state + kBq;
  int& seg_slot = key_cell[kBk];
  int& seg_lo = key_cell[kBk + 1];
  int& seg_hi = key_cell[kBk + 2];

  const int tid = threadIdx.x;
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const int head = blockIdx.y;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int t0 = blockIdx.x * kBq;
  const int hd = p.head_dim;
  const int hd_pad = (hd + 15) / 16 * 16;
  const int chunks = hd_pad / 8;

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
  for (int idx = tid; idx < kBq * chunks; idx += kThreads) {
    const int r = idx / chunks;
    const int c = (idx % chunks) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (t0 + r < p.num_tokens && c < hd) {
      const int token = p.rows != nullptr ? p.rows[t0 + r] : t0 + r;
      value = *reinterpret_cast<const uint4*>(p.q + static_cast<std::int64_t>(token) * p.q_stride +
                                              static_cast<std::int64_t>(head) * hd + c);
    }
    *reinterpret_cast<uint4*>(q_s + r * L::kLdq + c) = value;
  }
  for (int idx = tid; idx < kBq * L::kLdo; idx += kThreads) o_s[idx] = 0.0f;

  // Lanes 2i and 2i+1 of warp w own query row 16w + i, each half of its keys.
  const int my_row = warp * 16 + (lane >> 1);
  const int half = lane & 1;
  float m_run = -INFINITY;  // running max, log2 domain
  float l_run = 0.0f;       // running sum of probabilities

  for (;;) {
    __syncthreads();
    if (tid == 0) {
      int slot = -1;
      for (int r = 0; r < kBq; ++r) {
        if (row_state[r] == kPending) {
          slot = row_slot[r];
          break;
        }
      }
      int lo = INT_MAX;
      int hi = -1;
      for (int r = 0; r < kBq; ++r) {
        if (slot >= 0 && row_state[r] == kPending && row_slot[r] == slot) {
          row_state[r] = kCurrent;
          lo = min(lo, row_lo[r]);
          hi = max(hi, row_pos[r]);
        }
      }
      seg_slot = slot;
      seg_lo = lo;
      seg_hi = hi;
    }
    __syncthreads();
    const int slot = seg_slot;
    if (slot < 0) break;
    const std::int32_t* table = p.cell_table + static_cast<std::int64_t>(slot) * p.table_stride;

    for (int kv0 = seg_lo; kv0 <= seg_hi; kv0 += kBk) {
      __syncthreads();  // the previous tile's K, V and key_cell are consumed
      if (tid < kBk) {
        const int pos = kv0 + tid;
        int cell = -1;
        if (pos <= seg_hi) {
          const int c = table[pos];
          if (c >= 0 && c < p.max_cells) cell = c;
        }
        key_cell[tid] = cell;
      }
      __syncthreads();
      for (int idx = tid; idx < kBk * chunks; idx += kThreads) {
        const int j = idx / chunks;
        const int c = (idx % chunks) * 8;
        const int cell = key_cell[j];
        uint4 kv = make_uint4(0, 0, 0, 0);
        uint4 vv = make_uint4(0, 0, 0, 0);
        if (cell >= 0 && c < hd) {
          const std::int64_t offset =
              (static_cast<std::int64_t>(cell) * p.num_kv_heads + kv_head) * hd + c;
          kv = *reinterpret_cast<const uint4*>(p.k_pool + offset);
          vv = *reinterpret_cast<const uint4*>(p.v_pool + offset);
        }
        *reinterpret_cast<uint4*>(k_s + j * L::kLdq + c) = kv;
        *reinterpret_cast<uint4*>(v_s + j * L::kLdq + c) = vv;
      }
      __syncthreads();

      // Scores of this warp's 16 rows against the 64 keys.
#pragma unroll
      for (int n = 0; n < kBk / 16; ++n) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int kk = 0; kk < hd_pad / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
          wmma::load_matrix_sync(a, q_s + warp * 16 * L::kLdq + kk * 16, L::kLdq);
          wmma::load_matrix_sync(b, k_s + n * 16 * L::kLdq + kk * 16, L::kLdq);
          wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(s_s + warp * 16 * L::kLds + n * 16, acc, L::kLds,
                                wmma::mem_row_major);
      }
      __syncwarp();

      // Online softmax for my_row over keys [32*half, 32*half + 32).
      const bool in_segment = row_state[my_row] == kCurrent;
      const int rpos = row_pos[my_row];
      const int rlo = row_lo[my_row];
      float scores[32];
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int col = half * 32 + j;
        const int kpos = kv0 + col;
        float s = -INFINITY;
        if (in_segment && key_cell[col] >= 0 && kpos <= rpos && kpos >= rlo) {
          s = s_s[my_row * L::kLds + col] * p.scale;
          if (p.softcap > 0.0f) s = p.softcap * tanhf(s / p.softcap);
          s *= kLog2e;
        }
        scores[j] = s;
        tile_max = fmaxf(tile_max, s);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float m_new = fmaxf(m_run, tile_max);
      float alpha = 1.0f;
      float row_sum = 0.0f;
      if (m_new != -INFINITY) {
        alpha = exp2f(m_run - m_new);
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          scores[j] = exp2f(scores[j] - m_new);
          row_sum += scores[j];
        }
      } else {
#pragma unroll
        for (int j = 0; j < 32; ++j) scores[j] = 0.0f;
      }
      row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
      l_run = l_run * alpha + row_sum;
      m_run = m_new;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        p_s[my_row * L::kLdp + half * 32 + j] = __float2bfloat16_rn(scores[j]);
      }
      if (alpha != 1.0f) {
        const int span = hd_pad / 2;
        for (int c = half * span; c < (half + 1) * span; ++c) o_s[my_row * L::kLdo + c] *= alpha;
      }
      __syncwarp();

      // O += P V for this warp's rows.
      for (int n = 0; n < hd_pad / 16; ++n) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        float* o_tile = o_s + warp * 16 * L::kLdo + n * 16;
        wmma::load_matrix_sync(acc, o_tile, L::kLdo, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < kBk / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
          wmma::load_matrix_sync(a, p_s + warp * 16 * L::kLdp + kk * 16, L::kLdp);
          wmma::load_matrix_sync(b, v_s + kk * 16 * L::kLdq + n * 16, L::kLdq);
          wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(o_tile, acc, L::kLdo, wmma::mem_row_major);
      }
      __syncwarp();
    }
    __syncthreads();
    for (int r = tid; r < kBq; r += kThreads) {
      if (row_state[r] == kCurrent) row_state[r] = kDone;
    }
  }

  const int t = t0 + my_row;
  if (t < p.num_tokens) {
    const float inv_l = l_run > 0.0f ? 1.0f / l_run : 0.0f;
    const int token = p.rows != nullptr ? p.rows[t] : t;
    bf16* dst = p.out + static_cast<std::int64_t>(token) * p.out_stride +
                static_cast<std::int64_t>(head) * hd;
    const int span = (hd + 1) / 2;
    for (int c = half * span; c < min(hd, (half + 1) * span); ++c) {
      dst[c] = __float2bfloat16_rn(o_s[my_row * L::kLdo + c] * inv_l);
    }
  }
}

}  // namespace

std::size_t attention_prefill_smem_bytes(std::int32_t head_dim) {
  switch (head_dim_bucket(head_dim)) {
    case 64: return PrefillLayout<64>::kBytes;
    case 128: return PrefillLayout<128>::kBytes;
    case 256: return PrefillLayout<256>::kBytes;
    default: return 0;
  }
}

void launch_attention_prefill(const AttentionParams& params, cudaStream_t stream) {
  const bool dispatched = dispatch_head_dim(params.head_dim, [&]<int kMaxHd>() {
    launch(attention_prefill_kernel<kMaxHd>,
           LaunchConfig{dim3(ceil_div(params.num_tokens, kBq), params.num_heads), dim3(kThreads),
                        PrefillLayout<kMaxHd>::kBytes, stream},
           params);
  });
  if (!dispatched) {
    cuda_failed(cudaErrorInvalidValue, "launch_attention_prefill: unvalidated head_dim");
  }
}

}  // namespace cellm::cuda
