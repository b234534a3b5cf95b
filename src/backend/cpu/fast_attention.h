// The fast CPU program's attention over the cell cache: the reference's
// semantics (attend_cells in ops.h: per head, softmax over the row's
// visible cells of scale * q.k with the optional tanh softcap, then the
// weighted sum of the values; grouped-query heads share a KV head) computed
// in float32 with vector dot products, the heads of one KV group visiting
// each cell once. The reference accumulates in double, so the two agree
// within float rounding, not bit for bit.
//
// A head's result has one order of operations whatever else is computed
// with it (which heads share its call, which thread runs it): the forward
// splits a row's heads over threads, and a speculative verification row must
// give the bits of the same row decoded alone.
//
// Thread-safety: a pure function over caller-owned memory; `scratch` belongs
// to the calling thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant_dot.h"

namespace cellm::cpu {

// One row: q and out are [heads, head_dim]; k and v are [cells, kv_heads,
// head_dim]; `cells` are the row's visible cells (none: out is zeros).
void attend_row_fast(const float* q, const float* k, const float* v,
                     std::span<const std::int32_t> cells, const AttentionParams& params, Isa isa,
                     float* out, std::vector<float>& scratch);

// Heads [head_begin, head_end) of one row, the same bits as attend_row_fast
// gives them; the other heads of `out` are left alone.
void attend_heads_fast(const float* q, const float* k, const float* v,
                       std::span<const std::int32_t> cells, const AttentionParams& params,
                       Isa isa, std::int32_t head_begin, std::int32_t head_end, float* out,
                       std::vector<float>& scratch);

}  // namespace cellm::cpu
