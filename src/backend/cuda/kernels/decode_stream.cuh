// Decode stream: every layer of a one-token step in one persistent kernel.
//
// Why: at batch 1 a step is a chain of weight reads (q/k/v, o, gate/up and
// down per layer) with the attention in between. As separate kernels each
// projection pays a ramp-up and a tail, and the next kernel's weights are
// only requested once the previous kernel has drained: on the H200 the
// Llama-3.2-1B chain ran at 0.97 ms/step against a 0.55 ms weight-read floor.
// Weights do not depend on the activations, so here one producer warp per
// SM streams its share of every matrix of every layer, in order, into a ring
// of shared-memory stages (bulk async copies, never waiting on the
// computation), while the consumer warps move through the layer's phases,
// separated by grid-wide barriers. The weight stream keeps running across
// those barriers and through the attention, so memory never idles between
// projections.
//
// One block per SM, every block resident (the grid is the SM count and the
// barriers spin, so the launch must fit in one wave; the host checks the
// occupancy). Per layer, with x the bf16 residual stream:
//   qkv   = RMSNorm(x) @ Wqkv^T (+ bias), stored bf16 (rows split over blocks)
//   attn  = attention of the rotated q over the history and this token's
//           rotated k / v (which it also writes to the pools), split over
//           (kv head, key range) units, merged by the last unit of a head
//   x    += bf16(attn @ Wo^T)
//   gu    = act(bf16(gate)) * bf16(up) of RMSNorm(x) @ Wgate_up^T
//   x    += bf16(gu @ Wdown^T)
// with the roundings of the unfused kernels. Every sum has a fixed order: the
// same inputs give the same bits on every run.
//
// Status: correct (tests against the CPU program and the chain) but still
// slower than the GEMV chain on the H200, so CELLM_DECODE_STREAM is off by
// default. The weight stream alone runs a 1B step in 0.64 ms; each of a
// layer's five phase changes (barrier, inputs from L2, epilogue) and its
// attention hold the consumers for longer than the ring covers, and the
// stream stalls (see bench/results/README.md, session 8).
//
// Thread-safety: launch_decode_stream is reentrant; params are plain values.
// Concurrent launches must not share the sync counters. Nor may two
// persistent launches run at once on one device (two programs stepping on
// separate streams): if the SMs were split between them, each grid's barrier
// would wait for blocks that cannot start. The launch is a plain one, not a
// cooperative one, so nothing enforces this; one program per device does.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_types.h"

namespace cellm {
class Status;
}  // namespace cellm

namespace cellm::cuda {

// Weights of one layer as the stream reads them (DeviceWeights' layout).
struct DecodeStreamLayer {
  const bf16* attn_norm = nullptr;  // [hidden]
  const bf16* qkv = nullptr;        // [q_dim + 2 kv_dim, hidden]
  const bf16* qkv_bias = nullptr;   // [q_dim + 2 kv_dim] or null
  const bf16* o = nullptr;          // [hidden, q_dim]
  const bf16* mlp_norm = nullptr;   // [hidden]
  const bf16* gate_up = nullptr;    // [2 inter, hidden]
  const bf16* down = nullptr;       // [hidden, inter]
  const float* inv_freq = nullptr;  // [head_dim / 2], this layer's rope
};

struct DecodeStreamParams {
  const DecodeStreamLayer* layers = nullptr;  // [num_layers], device memory
  std::int32_t num_layers = 0;
  std::int32_t hidden = 0;  // multiple of 256 (as are q_dim and inter)
  std::int32_t inter = 0;
  std::int32_t num_heads = 0;
  std::int32_t num_kv_heads = 0;  // divides num_heads, at most 8 heads per kv head
  std::int32_t head_dim = 0;      // 64 or 128; full rotary
  float norm_eps = 1e-5f;
  float norm_weight_offset = 0.0f;
  float scale = 0.0f;  // attention logit scale
  bool gelu_tanh = false;  // else SiLU

  bf16* x = nullptr;     // [hidden] residual stream, in (after the embedding) and out
  bf16* qkv = nullptr;   // [q_dim + 2 kv_dim] scratch
  bf16* attn = nullptr;  // [q_dim] scratch
  bf16* gu = nullptr;    // [inter] scratch
  float* partials = nullptr;  // decode_stream_partials_floats()
  // decode_stream_sync_words() words, zero before the first launch; every
  // completed launch leaves them zero again.
  std::uint32_t* sync = nullptr;

  // The one token of the step.
  const std::int32_t* position = nullptr;
  const std::int32_t* slot = nullptr;
  const std::int32_t* cell = nullptr;
  bf16* kv = nullptr;  // [layers, 2, max_cells, kv_heads, head_dim]
  std::int32_t* cell_table = nullptr;  // [max_seqs, table_stride]
  std::int32_t max_cells = 0;
  std::int32_t max_seqs = 0;
  std::int32_t table_stride = 0;

  std::int32_t grid = 0;        // blocks: the SM count
  std::int32_t smem_bytes = 0;  // dynamic shared memory per block (decode_stream_layout)
  std::int32_t stages = 0;      // weight stages in it (decode_stream_layout)
  bool pdl = false;

  Status validate() const;
};

// Why a model's batch-1 step cannot run on the stream, or empty when it can:
// for the host to log once and fall back to the kernel chain.
const char* decode_stream_unsupported(std::int32_t hidden, std::int32_t q_dim,
                                      std::int32_t inter, std::int32_t num_heads,
                                      std::int32_t num_kv_heads, std::int32_t head_dim);

// Shared memory per block for this shape within `smem_limit` bytes (the
// device's opt-in limit) and the weight stages it holds; zeros when too few
// stages fit.
struct DecodeStreamLayout {
  std::int32_t smem_bytes = 0;
  std::int32_t stages = 0;
};
DecodeStreamLayout decode_stream_layout(std::int32_t hidden, std::int32_t q_dim,
                                        std::int32_t inter, std::int32_t num_heads,
                                        std::int32_t num_kv_heads, std::int32_t head_dim,
                                        std::int32_t grid, std::int32_t smem_limit);

std::size_t decode_stream_partials_floats(std::int32_t num_heads, std::int32_t head_dim);
std::size_t decode_stream_sync_words(std::int32_t num_kv_heads);

// How many blocks of `smem_bytes` one SM holds at once (the launch needs
// grid <= that times the SM count), or minus the CUDA error of the query.
int decode_stream_blocks_per_sm(std::int32_t smem_bytes);

void launch_decode_stream(const DecodeStreamParams& params, cudaStream_t stream);

}  // namespace cellm::cuda
