// Quantization on load (`--quantize fp8`): a bf16, f16 or f32 checkpoint's
// projection weights rounded to FP8 E4M3 with one scale per output row, the
// way FP8 checkpoints with per-channel scales store them (fbgemm_fp8,
// compressed-tensors "channel"), so that everything downstream treats the
// result exactly like such a checkpoint.
//
// For each of a layer's q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj
// and down_proj (embeddings, lm_head, norms and biases stay as stored):
//   scale_r = max_c |w[r][c]| / 448      (1 for an all-zero row)
//   code    = f32_to_e4m3(w[r][c] / scale_r)      (format/fp8.h)
// and the tensor in LayerWeights becomes a new [rows, cols] tensor of
// e4m3(code) × scale_r in the output dtype (the product rounded once to f32,
// then to bf16 when asked: what dequantize_e4m3 gives for an FP8
// checkpoint). Weights::fp8 gets {codes u8 [rows, cols], scales f32
// [rows, 1], block_rows 1, block_cols cols} for each.
//
// Names in Weights::fp8: the canonical checkpoint name of each weight
// ("model.layers.3.mlp.down_proj.weight"). phi3 stores q/k/v and gate/up
// fused ("self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight") and an FP8
// phi3 checkpoint's entries keep those fused names; here the entries take
// the split names ("self_attn.q_proj.weight", ..., "mlp.up_proj.weight"),
// one per LayerWeights tensor, since per-row scales make the split exact and
// a backend then finds every projection under the same names whatever the
// architecture.
//
// Thread-safety: quantize_fp8 mutates only the Weights it is given (using
// its own worker threads); the other functions are pure.
#pragma once

#include <cstdint>
#include <string_view>

#include "cellm/status.h"
#include "core/dtype.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace cellm::model {

enum class Quantize : std::uint8_t { kNone, kFp8 };

// "none" or "fp8"; anything else is an error naming the choices.
Result<Quantize> parse_quantize(std::string_view name);
std::string_view quantize_name(Quantize q);  // "none", "fp8"

// Rounds the projections of `weights` to FP8 as described above. Inputs must
// be host f32, bf16 or f16 [rows, cols] tensors (views of mapped files
// included); `out_dtype` is kF32 or kBF16 (LoadOptions::dequant_dtype). A
// non-finite weight is an error naming the tensor and row. On error
// `weights` may be partly quantized and should be dropped.
Status quantize_fp8(const ModelSpec& spec, Weights& weights, DType out_dtype);

}  // namespace cellm::model
