// QuantSpec: how a checkpoint's weights are quantized, from the
// `quantization_config` of a Hugging Face config.json. cellm reads FP8
// (E4M3) checkpoints in three layouts:
//   - quant_method "fp8" (vLLM / transformers): one `weight_scale` per tensor
//     (shape [] or [1]), or, with `weight_block_size: [bo, bi]`,
//     `weight_scale_inv` tensors of [ceil(out/bo), ceil(in/bi)] block scales;
//   - quant_method "fbgemm_fp8": `weight_scale` [out, 1], one per output row;
//   - quant_method "compressed-tensors", format "float-quantized" or
//     "naive-quantized", with 8-bit float weights of strategy "tensor" ([1]),
//     "channel" ([out, 1]) or "block" (`block_structure` [bo, bi]).
// In every layout the real weight is the decoded E4M3 code times its scale
// (a `weight_scale_inv` is a multiplier too, despite its name). Activation
// scales (`input_scale`, fbgemm's `input_scale_ub`) and KV-cache scales
// (`k_scale`, `v_scale`) may be present; cellm reads past them, since
// activations are not quantized (yet) and the KV cache stays bf16.
//
// Thread-safety: a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cellm::model {

enum class QuantMethod : std::uint8_t { kNone, kFp8, kFbgemmFp8, kCompressedTensors };

// Which weights share one scale.
enum class ScaleGranularity : std::uint8_t {
  kTensor,   // one scale for the whole tensor
  kChannel,  // one per output row
  kBlock,    // one per [block_rows, block_cols] tile (edge tiles partial)
};

struct QuantSpec {
  QuantMethod method = QuantMethod::kNone;
  ScaleGranularity granularity = ScaleGranularity::kTensor;
  std::int32_t block_rows = 0;  // kBlock: output rows per tile
  std::int32_t block_cols = 0;  // kBlock: input columns per tile
  // The scale tensor beside "<module>.weight": "<module>.<scale_name>".
  std::string scale_name = "weight_scale";
  // Modules left unquantized, as the config lists them: stored module names
  // ("lm_head") or compressed-tensors "re:" patterns (matched from the start).
  std::vector<std::string> ignore;

  bool quantized() const { return method != QuantMethod::kNone; }
  // The [rows, cols] tile one scale covers in a [rows, cols] weight.
  std::pair<std::int64_t, std::int64_t> scale_block(std::int64_t rows, std::int64_t cols) const;
  // The number of scales along each axis for a [rows, cols] weight.
  std::pair<std::int64_t, std::int64_t> scale_grid(std::int64_t rows, std::int64_t cols) const;
  // Whether stored module name `module` ("model.layers.0.mlp.down_proj") is ignored.
  bool ignores(std::string_view module) const;
  // "fp8: E4M3 weights, per-tensor scales" (or "none").
  std::string describe() const;

  friend bool operator==(const QuantSpec&, const QuantSpec&) = default;
};

std::string_view quant_method_name(QuantMethod method);           // "fp8", "fbgemm_fp8", ...
std::string_view granularity_name(ScaleGranularity granularity);  // "per-tensor", ...

// Tensors that carry activation or KV-cache scales, which cellm reads past.
bool is_activation_scale(std::string_view stored_name);

}  // namespace cellm::model
