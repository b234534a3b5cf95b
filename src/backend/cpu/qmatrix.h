// QMatrix: a weight matrix [rows, cols] kept in its GGUF blocks, and the
// threaded products of such a matrix with activation rows quantized for its
// type (quant_dot.h). Rows are split across the fast program's ThreadPool
// (one run per product: the barrier at its end is the only wait).
//
// Thread-safety: a QMatrix is immutable after construction; qmatmul may run
// concurrently on distinct outputs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/quant_dot.h"
#include "backend/cpu/thread_pool.h"
#include "cellm/status.h"
#include "format/gguf.h"

namespace cellm::cpu {

struct QMatrix {
  format::GgmlType type = format::GgmlType::kF32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::size_t row_bytes = 0;
  const std::uint8_t* data = nullptr;   // rows * row_bytes
  std::shared_ptr<const void> storage;  // keeps `data` alive (mapping or own copy)
  // The x8 layout (qmatrix_x8.h): `data` holds rows / 8 groups of
  // group_bytes each, and row() means nothing.
  bool x8 = false;
  std::size_t group_bytes = 0;

  bool defined() const { return data != nullptr; }
  const std::uint8_t* row(std::int64_t r) const {
    return data + static_cast<std::size_t>(r) * row_bytes;
  }
};

// The GGUF tensor as a QMatrix with the canonical [rows, cols] shape. With
// `rotary_heads` > 0 the rows are reordered from GGUF's interleaved rotary
// layout to the half-split one (llama Q/K), into an owned copy.
// InvalidArgument when the type has no kernel or the shape is not 2-D with
// whole blocks per row. kAuto repacks into the x8 layout where the
// processor has AVX-512 VNNI and the type and row count allow; kRows keeps
// the file's row layout.
enum class QLayout : std::uint8_t { kAuto, kRows };
Result<QMatrix> qmatrix_from_gguf(const format::GgufFile& file, const format::GgufTensorInfo& info,
                                  std::int32_t rotary_heads, QLayout layout = QLayout::kAuto);

// A quantized activation batch: `t` rows of `cols` values in blocks of `kind`.
struct QuantActs {
  ActKind kind = ActKind::kQ8;
  std::int64_t t = 0;
  std::int64_t cols = 0;
  std::size_t row_bytes = 0;
  std::vector<std::uint8_t> data;
  const std::uint8_t* row(std::int64_t r) const {
    return data.data() + static_cast<std::size_t>(r) * row_bytes;
  }
};

// Quantizes x [t, cols] into `out` (reusing its storage), rows split across
// `threads` when there are several.
void quantize_rows(ActKind kind, const float* x, std::int64_t t, std::int64_t cols,
                   ThreadPool& pool, QuantActs& out);

// y[i, r] = dot(w.row(r), act.row(i)) for i < act.t, r < w.rows; y's rows
// are `y_stride` floats apart. `act` must be quantized for w's type.
// Thread `part` of `parts`'s share of qmatmul: a contiguous range of w's
// rows (for callers that put several products in one pool run).
void qmatmul_slice(const QMatrix& w, const QuantActs& act, DotFn dot, TileKernel tile, float* y,
                   std::int64_t y_stride, int part, int parts);

// `tile` (its fn may be null) takes kTile activation rows and tile.rows
// weight rows at a time; the rest go through `dot`.
void qmatmul(const QMatrix& w, const QuantActs& act, DotFn dot, TileKernel tile, ThreadPool& pool,
             float* y, std::int64_t y_stride);

}  // namespace cellm::cpu
