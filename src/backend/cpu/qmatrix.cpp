#include "backend/cpu/qmatrix.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/qmatrix_x8.h"
#include "model/gguf_model.h"

namespace cellm::cpu {

namespace {

// The x8 layout where it pays (see qmatrix_from_gguf).
void maybe_x8(QMatrix& m, QLayout layout) {
  if (layout != QLayout::kAuto || !has_avx512_vnni() || !x8_type(m.type) || m.rows % kX8Rows != 0) {
    return;
  }
  auto owned = std::make_shared<std::vector<std::uint8_t>>(
      repack_x8(m.type, m.data, m.rows, m.cols, m.row_bytes));
  m.x8 = true;
  m.group_bytes = owned->size() / static_cast<std::size_t>(m.rows / kX8Rows);
  m.data = owned->data();
  m.storage = owned;
}

}  // namespace

Result<QMatrix> qmatrix_from_gguf(const format::GgufFile& file, const format::GgufTensorInfo& info,
                                  std::int32_t rotary_heads, QLayout layout) {
  if (!has_quant_kernel(info.type)) {
    return invalid_argument("tensor '{}' is {}: the fast CPU program has no kernel for it",
                            info.name, format::ggml_type_name(info.type));
  }
  const auto type_info = format::ggml_type_info(static_cast<std::uint32_t>(info.type));
  if (info.ne.size() != 2 || !type_info || info.ne[0] % type_info->block_elems != 0) {
    return invalid_argument("tensor '{}' is not a 2-D matrix of whole {} blocks", info.name,
                            format::ggml_type_name(info.type));
  }
  QMatrix m;
  m.type = info.type;
  m.cols = static_cast<std::int64_t>(info.ne[0]);
  m.rows = static_cast<std::int64_t>(info.ne[1]);
  m.row_bytes =
      static_cast<std::size_t>(info.ne[0] / type_info->block_elems) * type_info->block_bytes;
  const std::span<const std::uint8_t> bytes = file.tensor_bytes(info);
  if (bytes.size() != m.row_bytes * static_cast<std::size_t>(m.rows)) {
    return invalid_argument("tensor '{}' holds {} bytes; {} rows of {} bytes expected", info.name,
                            bytes.size(), m.rows, m.row_bytes);
  }
  if (rotary_heads <= 0) {
    m.data = bytes.data();
    m.storage = file.file();
    maybe_x8(m, layout);
    return m;
  }
  if (m.rows % (2 * rotary_heads) != 0) {
    return invalid_argument("tensor '{}': {} rows do not split into {} rotary heads", info.name,
                            m.rows, rotary_heads);
  }
  // The permutation the loader undoes on float rows, applied to whole block rows.
  auto owned = std::make_shared<std::vector<std::uint8_t>>(bytes.size());
  model::unpermute_rotary_row_bytes(bytes, *owned, m.rows, m.row_bytes, rotary_heads);
  m.data = owned->data();
  m.storage = owned;
  maybe_x8(m, layout);
  return m;
}

void quantize_rows(ActKind kind, const float* x, std::int64_t t, std::int64_t cols,
                   ThreadPool& pool, QuantActs& out) {
  out.kind = kind;
  out.t = t;
  out.cols = cols;
  out.row_bytes = act_row_bytes(kind, cols);
  const std::size_t need = out.row_bytes * static_cast<std::size_t>(t);
  if (out.data.size() < need) out.data.resize(need);
  std::uint8_t* base = out.data.data();
  const std::size_t rb = out.row_bytes;
  if (t == 1) {
    quantize_act(kind, x, cols, base);
    return;
  }
  pool.run([&](int id, int n) {
    for (std::int64_t r = id; r < t; r += n) {
      quantize_act(kind, x + r * cols, cols, base + static_cast<std::size_t>(r) * rb);
    }
  });
}

void qmatmul_slice(const QMatrix& w, const QuantActs& act, DotFn dot, TileKernel tile, float* y,
                   std::int64_t y_stride, int part, int parts) {
  if (w.x8) {
    qgemm_x8_slice(w, act, y, y_stride, part, parts);
    return;
  }
  const std::int64_t rows = w.rows;
  const std::int64_t t = act.t;
  const std::int64_t cols = w.cols;
  // Whole row tiles to each part, so tiles never straddle two threads.
  const std::int64_t unit = tile.fn != nullptr ? tile.rows : 1;
  const std::int64_t units = (rows + unit - 1) / unit;
  const std::int64_t per = (units + parts - 1) / parts * unit;
  const std::int64_t r0 = std::min(rows, per * part);
  const std::int64_t r1 = std::min(rows, r0 + per);
  // Weight rows kept in cache while every activation tile passes over them.
  const std::int64_t row_block = std::max<std::int64_t>(8, unit * 4);
  for (std::int64_t rb = r0; rb < r1; rb += row_block) {
    const std::int64_t re = std::min(r1, rb + row_block);
    std::int64_t i = 0;
    if (tile.fn != nullptr) {
      for (; i + kTile <= t; i += kTile) {
        const std::uint8_t* acts[kTile];
        for (int k = 0; k < kTile; ++k) acts[k] = act.row(i + k);
        std::int64_t r = rb;
        for (; r + unit <= re; r += unit) {
          float o[kTile * kMaxTileRows];
          tile.fn(w.row(r), w.row_bytes, acts, cols, o);
          for (std::int64_t u = 0; u < unit; ++u) {
            for (int k = 0; k < kTile; ++k) y[(i + k) * y_stride + r + u] = o[u * kTile + k];
          }
        }
        for (; r < re; ++r) {
          for (int k = 0; k < kTile; ++k) y[(i + k) * y_stride + r] = dot(w.row(r), acts[k], cols);
        }
      }
    }
    for (; i < t; ++i) {
      const std::uint8_t* a = act.row(i);
      float* yi = y + i * y_stride;
      for (std::int64_t r = rb; r < re; ++r) yi[r] = dot(w.row(r), a, cols);
    }
  }
}

void qmatmul(const QMatrix& w, const QuantActs& act, DotFn dot, TileKernel tile, ThreadPool& pool,
             float* y, std::int64_t y_stride) {
  // Small products are not worth waking the other threads for.
  if (w.rows * act.t * w.cols < 64 * 1024) {
    qmatmul_slice(w, act, dot, tile, y, y_stride, 0, 1);
  } else {
    pool.run([&](int id, int n) { qmatmul_slice(w, act, dot, tile, y, y_stride, id, n); });
  }
}

}  // namespace cellm::cpu
