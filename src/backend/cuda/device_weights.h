// DeviceWeights: a model's weights in device memory as bf16, in the layout
// the CUDA forward wants: per layer one fused QKV matrix [q + 2 kv, hidden]
// (and its bias), o_proj, one fused gate_up matrix [2 I, hidden] and
// down_proj, plus the norms. Everything lives in one allocation. Built from
// host Weights (converted once at load) or filled with random values of the
// right scale on the device (benchmarks in real shapes, no files). Given the
// GGUF file the weights came from, the projections the quantized kernels
// decode stay in the file's blocks instead (device_quant.h): their bf16
// pointers are then null and their `*_q` parts say where the blocks are.
//
// Thread-safety: immutable after construction; read by the engine thread.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_types.h"
#include "backend/cuda/device_quant.h"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace cellm::cuda {

struct DeviceLayer {
  const bf16* attn_norm = nullptr;       // [hidden]
  const bf16* qkv = nullptr;             // [q_dim + 2 kv_dim, hidden]
  const bf16* qkv_bias = nullptr;        // [q_dim + 2 kv_dim] or null
  const bf16* q_norm = nullptr;          // [head_dim] or null
  const bf16* k_norm = nullptr;          // [head_dim] or null
  const bf16* o = nullptr;               // [hidden, q_dim]
  const bf16* post_attn_norm = nullptr;  // [hidden] or null (gemma3)
  const bf16* mlp_norm = nullptr;        // [hidden]
  const bf16* gate_up = nullptr;         // [2 intermediate, hidden]: gate rows, then up rows
  const bf16* down = nullptr;            // [hidden, intermediate]
  const bf16* post_mlp_norm = nullptr;   // [hidden] or null (gemma3)
  // In blocks where the file allows (then the bf16 pointer above is null).
  DeviceQuant qkv_q, o_q, gate_up_q, down_q;
};

struct DeviceWeights {
  DeviceBuffer<bf16> storage;
  const bf16* embed = nullptr;       // [vocab, hidden]
  const bf16* final_norm = nullptr;  // [hidden]
  const bf16* lm_head = nullptr;     // [vocab, hidden]; == embed when tied
  std::vector<DeviceLayer> layers;
  // The projections kept in GGUF blocks (lm_head_q: the head's), if any.
  QuantWeights quant;
  DeviceQuant lm_head_q;

  std::size_t bytes() const { return storage.bytes() + quant.storage.bytes(); }
  bool quantized() const { return quant.any(); }
};

// Converts and uploads `weights` (checked against `spec`). With
// `keep_quantized`, the projections the quantized kernels decode stay
// quantized: in the blocks of `gguf` (the file they were loaded from), or,
// without a file, as the FP8 codes `weights.fp8` holds.
Result<DeviceWeights> upload_weights(const model::ModelSpec& spec, const model::Weights& weights,
                                     const format::GgufFile* gguf = nullptr,
                                     bool keep_quantized = false);
// Random weights in the spec's shapes: matrices uniform with std 0.02, the
// embedding (and an untied head) with std 1 so logits have a real spread,
// norms 1 (0 with the (1 + w) offset), biases 0. `fp8`: the layers'
// projections in FP8 with one scale a row (device_quant.h), as
// `--quantize fp8` would store them.
Result<DeviceWeights> random_weights(const model::ModelSpec& spec, std::uint64_t seed,
                                     bool fp8 = false);

// A host copy (bf16 tensors) in the canonical per-layer form, e.g. to run the
// CPU program over the very values a random device model holds.
Result<model::Weights> download_weights(const model::ModelSpec& spec, const DeviceWeights& weights);

// Bytes the weights of `spec` occupy on the device.
std::size_t device_weight_bytes(const model::ModelSpec& spec);

}  // namespace cellm::cuda
