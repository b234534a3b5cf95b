// Attention over cell tables, for a packed token axis of mixed sessions.
// Token t of the step belongs to sequence slot seq_slots[t] at position
// positions[t]; it attends that sequence's positions [lo, positions[t]],
// lo = max(0, position - window + 1) (window 0 = all history), reading K/V
// through cell_table[slot][position] -> cell of the pools (bf16, or FP8
// E4M3 codes: KvDtype in cuda_types.h; both kernels copy the codes into
// shared memory, half the bytes, and widen them there to the bf16 tiles their
// mma reads, exactly, so an FP8 pool is attended as the bf16 pool of its
// decoded values would be). The step's
// own tokens must already be scattered (kv_scatter writes their cells and
// table entries), which makes attention causal within the step by position.
// Padding rows (slot < 0) and table entries outside the pool give zeros /
// are skipped. Everything step-dependent is read from device memory and the
// grids depend only on num_tokens, so a captured graph replays for any mix.
//
// Two kernels share these params (their first versions, replaced by these,
// are in git history):
// - prefill v2 (attention_prefill_v2.cu): flash-attention tiles (tensor
//   cores, online softmax). Best when a sequence's tokens are contiguous;
//   correct for any order (a tile holding several sequences runs them one by
//   one).
// - decode v2 (attention_decode_v2.cu): split-KV flash-decoding; each
//   token's KV range is cut into splits processed by separate blocks (all q
//   heads of a KV group share the K/V reads), K/V tiles of 64 keys staged
//   through shared memory by cp.async (several tiles in flight), scores and
//   P.V on tensor cores for up to 16 q heads of a KV group at once, a
//   per-token split plan that gives every used split at least
//   `split_min_keys` keys (splits past the length exit at once) and the merge
//   of the splits in split order by the last block of each (token, head
//   group) to finish, so there is no combine launch. Correct for any mix;
//   meant for few query tokens per sequence.
//
// Thread-safety: launch_* are reentrant; params are plain values.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"
// Status is only declared here: .cu files must not pull fmt through nvcc
// (validate() is defined in the family's .cpp).
namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

inline constexpr int kAttentionMaxSplits = 64;
// Decode v2's largest cluster of splits (the portable cluster size); cluster
// sizes are powers of two up to it, so they divide kAttentionMaxSplits.
inline constexpr int kAttentionMaxCluster = 8;
static_assert(kAttentionMaxSplits % kAttentionMaxCluster == 0);

// 1, 2, 4 or 8: what decode v2 launches as a cluster.
constexpr bool valid_attention_cluster(int cluster) {
  return cluster >= 1 && cluster <= kAttentionMaxCluster && (cluster & (cluster - 1)) == 0;
}

// When decode v2 packs 128-wide heads' K/V tiles (AttentionParams::pack_wide).
enum class PackWide : std::uint8_t { kNever, kWhereItSavesAWave, kAlways };

struct AttentionParams {
  const bf16* q = nullptr;                   // [num_tokens, q_stride], heads first
  bf16* out = nullptr;                       // [num_tokens, out_stride], heads first
  const void* k_pool = nullptr;              // [max_cells, num_kv_heads, head_dim] of kv_dtype
  const void* v_pool = nullptr;              // [max_cells, num_kv_heads, head_dim] of kv_dtype
  const std::int32_t* cell_table = nullptr;  // [max_seqs, table_stride]
  const std::int32_t* seq_slots = nullptr;   // [num_tokens]; < 0 = padding row
  const std::int32_t* positions = nullptr;   // [num_tokens]
  // Which token row each kernel row serves ([num_tokens] entries, each a row
  // of q/out/seq_slots/positions); null: kernel row i is token row i. Lets
  // one step's rows be split between the decode and the prefill kernel
  // (prefill and decode v2 both take one).
  const std::int32_t* rows = nullptr;
  std::int64_t q_stride = 0;
  std::int64_t out_stride = 0;
  std::int32_t num_tokens = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_dim = 0;  // multiple of 8 (of 16 with FP8 pools), at most 256
  std::int32_t max_cells = 0;
  std::int32_t max_seqs = 0;
  std::int32_t table_stride = 0;
  std::int32_t window = 0;  // 0 = full history
  float scale = 0.0f;       // softmax scale, e.g. 1/sqrt(head_dim)
  float softcap = 0.0f;     // tanh cap on scaled scores; 0 = none

  // Decode only: 1..kAttentionMaxSplits; with more than one split the
  // partials go to `workspace` (attention_decode_workspace_bytes).
  std::int32_t num_splits = 1;
  float* workspace = nullptr;
  // Decode v2 only: the fewest keys a used split gets, and with more than one
  // split one counter per (token, kv head, head group of 16)
  // (attention_decode_v2_counters); zero them once after allocation, every
  // launch that completes leaves them zero.
  std::int32_t split_min_keys = 256;
  std::int32_t* counters = nullptr;
  // Decode v2 only: splits per thread block cluster (a power of two up to
  // kAttentionMaxCluster; num_splits a multiple). When a token's used splits fit in one cluster
  // they merge through distributed shared memory, without the workspace round trip and the counter;
  // longer histories take the counter path as with 1.
  std::int32_t cluster = 1;

  // Decode v2 only, both optional, [num_tokens] indexed like `positions`.
  // fresh_from: the lowest position the step writes for the row's sequence
  // (its first row's position). Keys before it are older than the step, so
  // v2 reads their cells and K/V before its wait; null or 0: every key waits.
  // cells: the cell each row's own key went to, which spares the table read
  // of the newest key after the wait.
  const std::int32_t* fresh_from = nullptr;
  const std::int32_t* cells = nullptr;

  // Decode v2 only: when the launch's blocks fit the device's SMs one each,
  // ask for enough shared memory that no two blocks share an SM. With the
  // default packing an SM took several of a step's few blocks while others
  // had none; on the H200 one block an SM ran 1B batch 1's attention in 6.7
  // instead of 8.1 us and its blocks arrived 2 us earlier (the GEMV after it
  // lost about 1 us to the smaller L1 such an SM is left with). Launches too
  // wide for the SMs ignore it: padded, 1B at 8192 keys (320 blocks) ran 10%
  // slower, and cutting its splits from 40 to 16 to fit was as slow.
  bool spread = false;
  // Decode v2 only: a launch whose blocks fit the SMs one each lets the next
  // kernel launch as soon as its wait returns, instead of once its outputs
  // are stored, so the o GEMV's blocks take their places and request their
  // first weights while the attention runs (the GEMV's own wait still holds
  // it until this grid is complete). Wider launches ignore it: there the
  // GEMV's blocks could take the SMs from attention blocks not yet resident
  // (8B batch 1 once ran 4.45 -> 5.31 ms/step when every launch did this).
  // H200, batch 1 ctx 512: 1B 0.915-0.932 -> 0.909-0.919 ms/step, 8B
  // 4.276-4.308 -> 4.233-4.298, Qwen3-0.6B equal to 0.5% slower.
  bool early_next = false;
  // Decode v2 only: in a launch whose blocks fit the SMs one each, a token
  // whose used splits merge in their cluster does so by a push: each block
  // stores its partial into block 0's shared memory with remote stores that
  // a barrier there counts, block 0 merges and stores the output, and the
  // others leave at once (attention_decode_v2_push.cuh). The sums and their
  // order are the pull merge's, so the outputs are the same bits. Ignored
  // where the slots would add to the launch's shared memory
  // (attention_decode_v2_push_merges: 128- and 256-wide heads at clusters of 8).
  bool push_merge = false;
  // Decode v2 only, 128-wide heads: the launch stores its K/V tiles unpadded
  // (XOR-swizzled, V2Layout's kPacked) in two stages, 73 KB a block, so three
  // blocks share an SM instead of two (the 113 KB of three stages), and its
  // key loop requests the next tile before it waits for the current one. The
  // same sums in the same order: the same bits. kWhereItSavesAWave packs only a
  // grid that then runs in fewer waves (attention_decode_v2_packs); kAlways
  // is for tests and benchmarks of the layout itself.
  PackWide pack_wide = PackWide::kNever;

  // Programmatic dependent launch (launch.h); only the split-KV v2 kernel
  // honours it. v2 reads `rows`, `seq_slots`, `positions`, `fresh_from` and
  // `cells` before its wait, so they must be written before the kernel it
  // follows starts (the forward uploads them ahead of the step's first
  // kernel), and so must the cell table and K/V of every key before
  // fresh_from; everything else it reads after the wait.
  bool pdl = false;
  // The pools' element type (cuda_types.h). Last among the one-byte fields,
  // where it takes padding: the other fields keep the offsets bf16 launches
  // had before it.
  KvDtype kv_dtype = KvDtype::kBF16;
#if CELLM_KERNEL_TRACE
  std::int32_t trace_slot = -1;  // kernel_trace.cuh (decode v2)
#endif

  Status validate() const;
  Status validate_decode() const;     // validate() plus the split fields
  Status validate_decode_v2() const;  // validate_decode() plus the v2 fields
};

// Decode v2's q heads per block (one tensor-core row tile).
inline constexpr int kAttentionV2MaxGroup = 16;

// How decode v2 cuts one token's `length` keys: `used` splits of `chunk` keys
// (the last one shorter), chunk a multiple of 64 and at least min_keys, used
// at most max_splits. Splits at and past `used` have nothing to do.
struct DecodeSplitPlan {
  std::int32_t chunk = 0;
  std::int32_t used = 0;
};
__host__ __device__ inline DecodeSplitPlan decode_split_plan(std::int32_t length,
                                                             std::int32_t max_splits,
                                                             std::int32_t min_keys) {
  DecodeSplitPlan plan;
  if (length <= 0 || max_splits <= 0) return plan;
  std::int32_t chunk = (length + max_splits - 1) / max_splits;
  chunk = chunk > min_keys ? chunk : min_keys;
  chunk = (chunk + 63) / 64 * 64;
  plan.chunk = chunk;
  plan.used = (length + chunk - 1) / chunk;
  return plan;
}

// Float scratch for the decode partials: [num_tokens, num_heads, splits, head_dim + 2].
std::size_t attention_decode_workspace_bytes(std::int64_t num_tokens, std::int64_t num_heads,
                                             std::int64_t head_dim, std::int32_t num_splits);

// Decode v2's counter count: [num_tokens, num_kv_heads, head groups of 16].
std::size_t attention_decode_v2_counters(std::int64_t num_tokens, std::int64_t num_heads,
                                         std::int64_t num_kv_heads);

// Decode v2's split count: enough blocks for `blocks_per_sm` per
// multiprocessor, no more than max_kv_len / split_min_keys (the per-token plan
// trims it further).
// With `cluster` > 1 the count is rounded up to a multiple of it (at most
// kAttentionMaxSplits, itself a multiple of 8).
std::int32_t attention_decode_v2_splits(std::int32_t num_tokens, std::int32_t num_heads,
                                        std::int32_t num_kv_heads, std::int32_t max_kv_len,
                                        int sm_count, std::int32_t split_min_keys,
                                        std::int32_t blocks_per_sm = 2, std::int32_t cluster = 1);

// Whether a decode v2 launch with these params takes the packed layout
// (AttentionParams::pack_wide): asked for, 128-wide heads and, unless kAlways, fewer waves of
// blocks on this device's SMs at three blocks an SM than at two. The launch follows it.
bool attention_decode_v2_packs(const AttentionParams& p);

// Dynamic shared memory of decode v2 for this head dim and pool type, the
// packed layout aside (0: unsupported).
std::size_t attention_decode_v2_smem_bytes(std::int32_t head_dim,
                                           KvDtype kv_dtype = KvDtype::kBF16);

// Whether a decode v2 launch with these params merges its clusters by the
// push (AttentionParams::push_merge): asked for, clusters on this device,
// every block an SM of its own, and the slots within
// the shared memory the launch takes without them (with the spread, the
// SM's half). The launch follows it.
bool attention_decode_v2_push_merges(const AttentionParams& p);

// Dynamic shared memory of the prefill kernel for this head dim and pool
// type (for checks).
std::size_t attention_prefill_v2_smem_bytes(std::int32_t head_dim,
                                            KvDtype kv_dtype = KvDtype::kBF16);

// Prefill attention: flash tiles with the scores and the output kept in
// registers (mma.sync) and K/V tiles double-buffered by cp.async.
void launch_attention_prefill_v2(const AttentionParams& params, cudaStream_t stream);
// Split-KV decode attention on tensor cores (attention_decode_v2.cu).
void launch_attention_decode_v2(const AttentionParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
