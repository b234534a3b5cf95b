// The projections of a GGUF model that the GPU keeps in their blocks (issue
// 38): every linear whose GGUF type the quantized kernels decode
// (kernels/quant_blocks.h: every block type cellm loads) is uploaded as the file's
// bytes, Q/K rows of llama-family files reordered to Hugging Face's layout
// and Q6_K rows of whole 2048-weight groups repacked for 16-byte loads
// (QuantType::kQ6_K_R8, kernels/quant_blocks_q6r8.h: the same bytes, moved
// within each row), instead of as the bf16 copy loading makes of it; the
// rest stay bf16. A fused projection (q/k/v, gate/up) is kept in blocks only
// when all of its pieces are, each piece a part at its row offset (same-type
// neighbours merge into one part, so a Q4_K gate/up is one matrix; Q4_K and
// Q6_K_R8 parts start on 16-byte boundaries, for their wide-load kernels).
//
// FP8 checkpoints (and `--quantize fp8`) take the same form: each projection
// whose stored E4M3 codes Weights::fp8 holds is uploaded as those codes, one
// byte a weight, with its scales expanded to one float per row and scale
// block (the kernels' RowScales), so per-tensor, per-channel and block-scaled
// checkpoints all run through one kernel.
//
// Thread-safety: immutable after construction; read by the engine thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "format/gguf.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace cellm::cuda {

// Rows [row0, row0 + rows) of a projection's output, in blocks.
struct DeviceQuantPart {
  const std::uint8_t* blocks = nullptr;  // rows * row_bytes
  QuantType type = QuantType::kQ8_0;
  std::int64_t row0 = 0;
  std::int64_t rows = 0;
  std::int64_t row_bytes = 0;
  RowScales scales;  // kF8_E4M3: the part's rows' scales
};

// A projection in blocks, parts in row order; empty: it is bf16.
struct DeviceQuant {
  std::vector<DeviceQuantPart> parts;
  bool empty() const { return parts.empty(); }
};

struct QuantWeights {
  DeviceBuffer<std::uint8_t> storage;
  struct Layer {
    DeviceQuant qkv, o, gate_up, down;
  };
  std::vector<Layer> layers;
  DeviceQuant lm_head;
  // "Q4_K x144, Q6_K_R8 x33" (or "F8_E4M3 x224"): projections (pieces) kept
  // in each type (Q6_K_R8: Q6_K rows repacked for 16-byte loads); "" when
  // none.
  std::string summary;

  bool any() const { return !summary.empty(); }
};

// Uploads the projections of `file` that stay in blocks. Shapes are checked
// against `spec`; a tensor of the right name and type but another shape is
// an error naming it.
Result<QuantWeights> upload_quant_weights(const model::ModelSpec& spec,
                                          const format::GgufFile& file);

// Uploads the projections whose FP8 codes `weights.fp8` holds (empty
// QuantWeights when it holds none). A projection keeps bf16 when a piece is
// missing there or its scale blocks split a run of 8 columns.
Result<QuantWeights> upload_fp8_weights(const model::ModelSpec& spec,
                                        const model::Weights& weights);

// Random FP8 layer projections in the spec's shapes (benchmarks of FP8
// models without files): codes of uniform values, one scale a row, so the
// weights are uniform with std `stddev` (the head stays bf16, as
// `--quantize fp8` leaves it).
Result<QuantWeights> random_fp8_weights(const model::ModelSpec& spec, std::uint64_t seed,
                                        float stddev);

}  // namespace cellm::cuda
