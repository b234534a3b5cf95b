// The projections of a GGUF model that the GPU keeps in their blocks (issue
// 38): every linear whose GGUF type the quantized kernels decode
// (kernels/quant_blocks.h: every block type cellm loads) is uploaded as the file's
// bytes, Q/K rows of llama-family files reordered to Hugging Face's layout,
// instead of as the bf16 copy loading makes of it; the rest stay bf16. A
// fused projection (q/k/v, gate/up) is kept in blocks only when all of its
// pieces are, each piece a part at its row offset (same-type neighbours
// merge into one part, so a Q4_K gate/up is one matrix).
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

namespace cellm::cuda {

// Rows [row0, row0 + rows) of a projection's output, in blocks.
struct DeviceQuantPart {
  const std::uint8_t* blocks = nullptr;  // rows * row_bytes
  QuantType type = QuantType::kQ8_0;
  std::int64_t row0 = 0;
  std::int64_t rows = 0;
  std::int64_t row_bytes = 0;
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
  // "Q4_K x144, Q6_K x33": projections (pieces) kept in each type; "" when none.
  std::string summary;

  bool any() const { return !summary.empty(); }
};

// Uploads the projections of `file` that stay in blocks. Shapes are checked
// against `spec`; a tensor of the right name and type but another shape is
// an error naming it.
Result<QuantWeights> upload_quant_weights(const model::ModelSpec& spec,
                                          const format::GgufFile& file);

}  // namespace cellm::cuda
