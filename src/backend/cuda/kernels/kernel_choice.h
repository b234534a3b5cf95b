// Which kernel variant the CUDA forward launches where several exist, so a
// new kernel can ship next to the one it may replace and one GPU run can A/B
// them. The defaults are the variants the H200 measured fastest (v2 decode
// attention and fused rope: 8B batch 64 from 11.5 to 6.5 ms/step; v2 prefill
// attention: 8B prompt of 512 from 15.4 to 13.7 ms; the fused GEMV for
// one-row steps: 1B batch 1 from 1.16 to 1.00 ms, 8B from 4.83 to 4.45); the
// environment can override them when a program's knobs are made:
//   CELLM_DECODE_ATTN=v1|v2        split-KV decode attention (v2, default: staged, tensor cores)
//   CELLM_DECODE_SPLIT_KEYS=N      v2: fewest keys per used split (default 128)
//   CELLM_DECODE_SPLIT_TARGET=N    v2: split-KV blocks per SM the split count aims for
//                                  (default 2: 1B batch 64 runs one split; 4 and 8 were slower,
//                                  1.89 and 1.94 against 1.72 ms/step)
//   CELLM_DECODE_CLUSTER=1|2|4|8   v2: splits per thread block cluster; a token whose used splits
//                                  fit in one merges them in distributed shared memory (default 8:
//                                  8B batch 1 ctx 512 4.38-4.39 against 4.48-4.51 ms/step with 1;
//                                  other points within run-to-run spread)
//   CELLM_DECODE_SPLIT_SPAN=step|table  v2: the split count follows the keys of the step's longest
//                                  session (ForwardShape::key_span, a graph per count) or the
//                                  cell table's length (one graph a width; the rule before
//                                  session 21, which at short sessions in a long table launched
//                                  more blocks than SMs and lost the one-block-an-SM paths
//                                  below); default step: 1B batch 1 in a table of 8200 keys, at
//                                  128 and 512 keys 0.804-0.805 against 0.852-0.859 ms/step
//   CELLM_DECODE_SM_FIT=0|1        v2: where up to twice CELLM_DECODE_SPLIT_KEYS keys a split let
//                                  a step's splits fit the SMs one block each, a split takes that
//                                  many (default 1: batch 1 at ~2100 keys, 1B 0.863 against 0.903
//                                  ms/step, 8B 4.125 against 4.163; batch 2 and 512 or ~8200
//                                  keys untouched by the rule)
//   CELLM_DECODE_CLUSTER_FIT=0|1   v2: a step that wants fewer splits than CELLM_DECODE_CLUSTER
//                                  launches clusters of the next power of two at or above its
//                                  count (2 or 4) instead of padding its splits to a whole
//                                  cluster (default 1: 1B at 128 / 512 keys, batch 16 1.203-
//                                  1.206 / 1.271-1.275 against 1.311 / 1.338-1.339 ms/step,
//                                  batch 32 1.248-1.258 / 1.403-1.412 against 1.546-1.560 /
//                                  1.590-1.604; batch 1 and 64 unchanged)
//   CELLM_DECODE_EARLY_KEYS=0|1    v2: a row's keys older than the step are read before the wait
//                                  on the q/k/v projection (AttentionParams::fresh_from; default 1:
//                                  8B batch 1 4.25-4.30 against 4.32-4.34 ms/step, 1B equal)
//   CELLM_DECODE_SPREAD=0|1        v2: a launch whose blocks fit the SMs one each takes enough
//                                  shared memory that no two share an SM (AttentionParams::spread;
//                                  default 1: batch 1 ctx 512, 1B 0.944-0.955 -> 0.910-0.918
//                                  ms/step, Qwen3-0.6B 0.933 -> 0.880, 8B equal)
//   CELLM_DECODE_EARLY_NEXT=0|1    v2: a launch whose blocks fit the SMs one each lets the next
//                                  kernel launch when its wait returns
//                                  (AttentionParams::early_next; default 1: batch 1 ctx 512, 1B
//                                  0.915-0.932 -> 0.909-0.919 ms/step, 8B 4.276-4.308
//                                  -> 4.233-4.298, Qwen3-0.6B equal to 0.5% slower)
//   CELLM_DECODE_PUSH_MERGE=0|1    v2: in a launch whose blocks fit the SMs one each, the splits
//                                  of a cluster push their partials into its first block, which
//                                  merges them alone (AttentionParams::push_merge; default 1:
//                                  batch 1 ctx 512, 1B 0.854-0.857 -> 0.847-0.851 ms/step, the
//                                  attention 6.7 -> 5.8-6.1 us a layer; 8B's 128-wide heads keep
//                                  the pull, their slots would not fit beside their stages)
//   CELLM_DECODE_PACK_WIDE=0|1     v2, 128-wide heads: launches that run in fewer waves at three
//                                  blocks an SM than at two keep their K/V tiles unpadded
//                                  (swizzled) in two stages (AttentionParams::pack_wide; default 1:
//                                  8B at 640 keys, batch 240 13.45-14.25 -> 12.77-13.46 ms/step,
//                                  batch 128 9.22-9.23 -> 8.87-8.93, batch 64 unchanged; serve
//                                  8,967 -> 9,245-9,278 tok/s on one machine)
//   CELLM_DECODE_FUSED_O=0|1       v2, one-token steps of a fused (GEMV) step: the attention kernel
//                                  also multiplies its output by the o projection and adds it to
//                                  the residual stream (AttentionParams::o_weight), so no o GEMV
//                                  runs (default 0: correct, but slower so far: 1B batch 1 0.972
//                                  against 0.949-0.953 ms/step; attention_decode_v2_out.cuh)
//   CELLM_PREFILL_ATTN=v1|v2       prefill attention (v2, default: scores in registers, cp.async)
//   CELLM_FUSED_ROPE=0|1           rope + KV scatter as one kernel (default 1)
//   CELLM_GEMV=0|1                 steps of at most CELLM_GEMV_MAX_ROWS rows run their projections
//                                  on the GEMV, with the norms, residual adds and the MLP
//                                  activation fused into it, instead of cuBLASLt (default 1)
//   CELLM_GEMV_MAX_ROWS=1..8       (default 1: at 2 rows and more cuBLASLt is faster, 1B batch 2
//                                  1.16 against 1.30 ms/step)
//   CELLM_GEMV_SINGLE_ROWS=0|1     one-row steps give each warp of a small, long projection (row
//                                  pairs filling at most half of one wave, more than two batches
//                                  of weights per pair: 1B's down) one weight row instead of two
//                                  (gemv.cuh; default 1)
//   CELLM_GEMV_STAGE_INPUTS=0|1    the GEMV copies its input rows (and the norm weight, before its
//                                  wait) into shared memory once per block, and reads the residual
//                                  it adds to right after its wait, instead of fetching each
//                                  batch's pieces when it multiplies them
//                                  (GemvParams::stage_inputs; default 1: batch 1 ctx 512, 1B
//                                  0.910-0.919 -> 0.864-0.875 ms/step, 8B 4.264 -> 4.134-4.149,
//                                  Qwen3-0.6B 0.885 -> 0.876; q/k/v staged too, which later
//                                  measured ~1% slower at 1B, so it no longer is)
//   CELLM_GEMV_MMA=0|1|LIST        which one-row GEMVs run on tensor cores (GemvParams::
//                                  tensor_cores, gemv_mma.cuh): 0 none, 1 all, or a comma list of
//                                  qkv, o, gate_up, down, lm_head, each where its blocks walk at
//                                  most kGemvMmaMaxRounds groups (gemv_mma.cuh; default
//                                  qkv,o,gate_up,down: batch 1 ctx 512, one step at a time, 1B
//                                  0.859-0.864 -> 0.811-0.813 ms/step with qkv,o,down (session
//                                  19), 8B 4.133 -> 4.029-4.056, Qwen3-0.6B 0.894 -> 0.840;
//                                  gate/up added in session 20 where its walk is short: chained,
//                                  1B 0.806-0.809 -> 0.802-0.803, Qwen3-0.6B 0.823-0.827 ->
//                                  0.801-0.804; 8B's walks 7 groups and stays on CUDA cores)
//   CELLM_GEMV_MMA_WARPS=0|8|16    warps of a tensor-core GEMV block (GemvParams::mma_warps):
//                                  0 chooses (16 where the groups leave SMs empty and k is long,
//                                  1B's down; else 8, a block an SM, so the next kernel's blocks
//                                  fit beside it and request their weights before their wait)
//   CELLM_DECODE_STREAM=0|1        one-token steps run every layer in one persistent kernel that
//                                  streams the weights through shared memory (decode_stream.cuh)
//                                  instead of the GEMV chain (default 0: correct, but slower so
//                                  far: 1B batch 1 1.13 against 0.97 ms/step, 8B 4.57 against 4.31)
//   CELLM_PDL=0|1                  programmatic dependent launch between the forward's own
//                                  kernels (default 1: 8B batch 1 4.849 -> 4.780 ms/step)
//   CELLM_GEMM_AUTOTUNE=0|1        time cuBLASLt's candidates per decode GEMM shape (default 1)
//   CELLM_GEMM_CANDIDATES=1..64    how many of cuBLASLt's heuristic results that timing tries
//                                  (default 8: 32 measured equal, 8B batch 240 at 640 keys 13.36
//                                  against 13.40 ms/step, serve 9,385 against 9,378-9,406 tok/s)
//   CELLM_SPLIT_ARGMAX=0|1         the device argmax spreads a row over up to 64 blocks instead of
//                                  one when a step has few rows (sample.cuh; default 1)
//   CELLM_HEAD_ARGMAX=0|1          one-row captured steps whose lm_head runs on the GEMV also
//                                  take the row's argmax in that GEMV (its blocks' partials, merged
//                                  by the last block), so a greedy step launches no argmax kernel
//                                  (gemv.cuh, GemvArgmax; default 1)
//   CELLM_SAMPLE_CLUSTER=0|1       the device draw (temperature, top-k, top-p) runs each row on a
//                                  cluster of 8 blocks instead of one while all rows' clusters
//                                  fit on the SMs (sample_draw.cu; default 1)
//   CELLM_SAMPLE_CANDIDATES=0|1    the device draw's top-k and top-p passes run over the tokens
//                                  whose p can reach the kept set, compacted into shared memory,
//                                  instead of over the row (sample_draw.cu; default 1, the same
//                                  tokens either way: H200, 128K ids, one row, top-p 0.95 0.87 ms
//                                  -> 145 us on one block, 227 -> 67 us on a cluster)
//
// Thread-safety: plain values; parsing is a pure function of the lookup.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cellm/status.h"

namespace cellm::cuda {

enum class DecodeAttention { kV1, kV2 };

// KernelChoice::gemv_mma: the projections of a one-row step that run on
// tensor cores.
enum GemvMma : std::uint32_t {
  kMmaQkv = 1u << 0,
  kMmaO = 1u << 1,
  kMmaGateUp = 1u << 2,
  kMmaDown = 1u << 3,
  kMmaHead = 1u << 4,
  kMmaAll = (1u << 5) - 1,
};
enum class PrefillAttention { kV1, kV2 };

struct KernelChoice {
  DecodeAttention decode_attention = DecodeAttention::kV2;
  PrefillAttention prefill_attention = PrefillAttention::kV2;
  std::int32_t decode_split_keys = 128;  // H200: b1 2-3% faster than 256, b64 equal
  std::int32_t decode_split_target = 2;
  std::int32_t decode_cluster = 8;
  bool decode_split_by_step = true;  // CELLM_DECODE_SPLIT_SPAN=step
  bool decode_sm_fit = true;
  bool decode_cluster_fit = true;
  bool decode_early_keys = true;
  bool decode_spread = true;
  bool decode_early_next = true;
  bool decode_push_merge = true;
  bool decode_pack_wide = true;
  bool decode_fused_o = false;
  bool fused_rope = true;
  bool gemv = true;
  std::int32_t gemv_max_rows = 1;
  bool gemv_single_rows = true;
  bool gemv_stage_inputs = true;
  std::uint32_t gemv_mma = kMmaQkv | kMmaO | kMmaGateUp | kMmaDown;  // GemvMma bits
  std::int32_t gemv_mma_warps = 0;                                   // 0: the kernel chooses
  bool decode_stream = false;
  bool pdl = true;
  bool gemm_autotune = true;
  // gemm.h's kDefaultAutotuneCandidates (checked in kernel_choice.cpp).
  std::int32_t gemm_candidates = 8;
  bool split_argmax = true;
  bool head_argmax = true;
  bool cluster_sampler = true;
  bool sample_candidates = true;

  friend bool operator==(const KernelChoice&, const KernelChoice&) = default;
};

// Variables as `lookup` reports them (nullopt = unset). A value that does not
// parse is an error naming the variable and what it accepts.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
Result<KernelChoice> parse_kernel_choice(const EnvLookup& lookup);

// parse_kernel_choice over the process environment; on a bad value it logs
// the error and returns the defaults.
KernelChoice kernel_choice_from_env();

// "decode=v2 prefill=v2 split_keys=128 split_target=2 cluster=1 split_span=step sm_fit=1
// cluster_fit=1 early_keys=1 spread=1 early_next=1 push_merge=1 pack_wide=1
// fused_o=0 fused_rope=1 gemv=1 gemv_max_rows=1 single_rows=1 stage_inputs=1
// mma=qkv,o,gate_up,down stream=1 pdl=1 (mma=qkv,o,gate_up,down/8 with CELLM_GEMV_MMA_WARPS=8)
// autotune=1 candidates=8 split_argmax=1 head_argmax=1 cluster_sampler=1 sample_candidates=1",
// for logs and benchmark labels.
std::string describe(const KernelChoice& choice);

}  // namespace cellm::cuda
