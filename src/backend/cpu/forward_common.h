// The parts of one transformer step that both CPU forwards run alike: the
// float32 reference (CpuForward, cpu_forward.h) and the fast program
// (FastForward, fast_forward.h). Each forward keeps its own matrix products
// (BLAS in the reference; GGUF blocks or BLAS through begin_input/linear in
// the fast program), its own attention and its own activation; what lies
// between them (the step's buffers, the embedding, the input norms, Q/K
// norm and RoPE, K/V placement, the residual add, the final norm and the
// logit soft cap) is written once here, so the two cannot drift apart and
// the fast program's non-matmul bits stay the reference's.
//
// Thread-safety: plain functions over caller-owned memory that run on the
// calling thread (no pool, no OpenMP); a StepBuffers belongs to one forward,
// which has one caller at a time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "model/model_spec.h"
#include "model/weights.h"

namespace cellm::cpu {

struct StepRows;  // cpu_forward.h, which holds a StepBuffers
class KvStore;

// One step's activations, grown on demand and reused across steps. For t
// rows: x the residual stream and h its normed copy [t, hidden] (after the
// layers, h holds the LM head's input rows); q and attn [t, heads *
// head_dim]; k and v [t, kv_heads * head_dim]; o a block's output [t,
// hidden]; gate and up [t, intermediate]; row_cells the cells each row
// attends in the current layer.
struct StepBuffers {
  std::vector<float> x, h, q, k, v, attn, o, gate, up;
  std::vector<std::span<const std::int32_t>> row_cells;
};

// The per-layer RoPE tables of `spec`, rounded to `table_dtype`.
std::vector<std::vector<float>> rope_tables(const model::ModelSpec& spec, DType table_dtype);
// The attention score scale: the spec's, else 1 / sqrt(head_dim).
float attention_scale(const model::ModelSpec& spec);

// Checks that `rows` agree in length (fatal otherwise), grows `b` for them
// and fills b.x with the embeddings of rows.tokens times the spec's
// embedding scale. Returns the row count t.
std::int64_t begin_step(const model::ModelSpec& spec, const Tensor& embed, const StepRows& rows,
                        StepBuffers& b);

// b.h = RMSNorm(b.x) through a block's input norm `norm`, for t rows.
void norm_block_input(const model::ModelSpec& spec, const Tensor& norm, std::int64_t t,
                      StepBuffers& b);

// Between the Q/K/V projections (in b.q, b.k, b.v) and attention: the
// per-head Q/K norm of qk_norm models, RoPE at the rows' positions with
// `inv_freq`, the step's K/V written into their cells of `layer` (before
// anyone attends, so a row sees the earlier rows of its own sequence in the
// same step) and b.row_cells set to each row's history cut to `window`
// (0: all of it). Returns the parameters attention runs with.
AttentionParams prepare_attention(const model::ModelSpec& spec, const model::LayerWeights& w,
                                  std::span<const float> inv_freq, std::int32_t window, float scale,
                                  std::int32_t layer, const StepRows& rows, KvStore& kv,
                                  StepBuffers& b);

// Adds the block output in b.o to the residual stream b.x, through
// `post_norm` first when the model sandwiches its blocks (gemma3).
void add_block_output(const model::ModelSpec& spec, const Tensor& post_norm, std::int64_t t,
                      StepBuffers& b);

// The LM head's input: b.h [selector.size(), hidden] gets the final norm of
// the selected rows of b.x. With `taps` non-null, taps [t, hidden] gets the
// final norm of every row first and the selected rows are copied from it.
// Returns selector.size().
std::int64_t final_norm_rows(const model::ModelSpec& spec, const Tensor& norm, std::int64_t t,
                             std::span<const std::int64_t> selector, float* taps, StepBuffers& b);

// Caps `rows` rows of logits when the spec has a final logit soft cap.
void cap_logits(const model::ModelSpec& spec, float* logits, std::int64_t rows);

}  // namespace cellm::cpu
