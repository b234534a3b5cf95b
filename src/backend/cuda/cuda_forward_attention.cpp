// The attention block of one layer of CudaForward::enqueue: q/k norms, rope
// and the K/V scatter into the pool, then the attention kernels for the
// step's rows (see cuda_forward.h).
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/kv_scatter.cuh"
#include "backend/cuda/kernels/qk_norm.cuh"
#include "backend/cuda/kernels/rope.cuh"
#include "backend/cuda/kernels/rope_scatter.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/rope_table.h"

namespace cellm::cuda {

CudaForward::StepInputs CudaForward::step_inputs() const {
  const auto pitch = static_cast<std::size_t>(max_step_);
  const auto array = [&](int index) {
    return step_.data() + static_cast<std::size_t>(index) * pitch;
  };
  return StepInputs{array(StepArrays::kTokens),       array(StepArrays::kPositions),
                    array(StepArrays::kSlots),        array(StepArrays::kCells),
                    array(StepArrays::kSelector),     array(StepArrays::kFreshFrom),
                    array(StepArrays::kAttentionRows)};
}

namespace {

// Bytes of one layer's K (or V) pool.
std::size_t pool_bytes(std::int32_t cells, std::int64_t kv_dim, KvDtype dtype) {
  return static_cast<std::size_t>(cells) * static_cast<std::size_t>(kv_dim) * kv_dtype_bytes(dtype);
}

}  // namespace

void* CudaForward::k_pool(int l) const {
  return kv_.data() + static_cast<std::size_t>(2 * l) * pool_bytes(kv_cells_, kv_dim_, kv_dtype_);
}

void* CudaForward::v_pool(int l) const {
  return static_cast<std::byte*>(k_pool(l)) + pool_bytes(kv_cells_, kv_dim_, kv_dtype_);
}

RopeScatterParams CudaForward::rope_scatter_params(int l, const ForwardShape& shape,
                                                   const StepInputs& in) const {
  const model::ModelSpec& s = spec_;
  RopeScatterParams rs;
  rs.q = qkv_.data();
  rs.k = rs.q + q_dim_;
  rs.v = rs.k + kv_dim_;
  rs.k_pool = k_pool(l);
  rs.v_pool = v_pool(l);
  rs.cells = in.cells;
  rs.seq_slots = in.slots;
  rs.positions = in.positions;
  // The tables are shared by every layer: the first layer's scatter writes them.
  rs.cell_table = l == 0 ? table_.data() : nullptr;
  rs.inv_freq = inv_freq_.data() + static_cast<std::size_t>(l) * inv_freq_stride_;
  rs.q_stride = qkv_dim_;
  rs.k_stride = qkv_dim_;
  rs.v_stride = qkv_dim_;
  rs.num_tokens = shape.width;
  rs.num_heads = s.num_heads;
  rs.num_kv_heads = s.num_kv_heads;
  rs.head_dim = s.head_dim;
  rs.rotary_dim = rotary_dims_[static_cast<std::size_t>(l)];
  rs.max_cells = kv_cells_;
  rs.max_seqs = max_seqs_;
  rs.table_stride = table_stride_;
  rs.kv_dtype = kv_dtype_;
  rs.pdl = true;
  return rs;
}

bool CudaForward::rope_in_gemv(int l, const ForwardShape& shape) const {
  const std::int32_t rotary_dim = rotary_dims_[static_cast<std::size_t>(l)];
  return fused_step(shape) && !spec_.qk_norm &&
         rope_scatter_supported(spec_.head_dim, rotary_dim) && rotary_dim == spec_.head_dim;
}

void CudaForward::enqueue_rope_scatter(int l, const ForwardShape& shape, const StepInputs& in,
                                       cudaStream_t stream) {
  const RopeScatterParams rs = rope_scatter_params(l, shape, in);
  if (rope_scatter_supported(rs.head_dim, rs.rotary_dim)) {
    launch_rope_scatter(rs, stream);
    return;
  }
  // Rope in place (k too: rope_scatter leaves the activation's k alone), then the scatter.
  RopeParams rope;
  rope.q = rs.q;
  rope.k = qkv_.data() + q_dim_;
  rope.positions = rs.positions;
  rope.inv_freq = rs.inv_freq;
  rope.q_stride = rs.q_stride;
  rope.k_stride = rs.k_stride;
  rope.num_tokens = rs.num_tokens;
  rope.num_heads = rs.num_heads;
  rope.num_kv_heads = rs.num_kv_heads;
  rope.head_dim = rs.head_dim;
  rope.rotary_dim = rs.rotary_dim;
  launch_rope(rope, stream);

  KvScatterParams sc;
  sc.k = rs.k;
  sc.v = rs.v;
  sc.k_pool = rs.k_pool;
  sc.v_pool = rs.v_pool;
  sc.cells = rs.cells;
  sc.seq_slots = rs.seq_slots;
  sc.positions = rs.positions;
  sc.cell_table = rs.cell_table;
  sc.k_stride = rs.k_stride;
  sc.v_stride = rs.v_stride;
  sc.num_tokens = rs.num_tokens;
  sc.num_kv_heads = rs.num_kv_heads;
  sc.head_dim = rs.head_dim;
  sc.max_cells = rs.max_cells;
  sc.max_seqs = rs.max_seqs;
  sc.table_stride = rs.table_stride;
  sc.kv_dtype = rs.kv_dtype;
  launch_kv_scatter(sc, stream);
}

void CudaForward::enqueue_attention(int l, const ForwardShape& shape, const StepInputs& in,
                                    const DecodeSplit& split, bool rope_done, cudaStream_t stream) {
  const model::ModelSpec& s = spec_;
  const model::LayerSpec& ls = s.layers[static_cast<std::size_t>(l)];
  const DeviceLayer& lw = weights_.layers[static_cast<std::size_t>(l)];
  const std::int32_t w = shape.width;
  bf16* q = qkv_.data();
  if (s.qk_norm) {
    QkNormParams p;
    p.q = q;
    p.k = q + q_dim_;
    p.q_weight = lw.q_norm;
    p.k_weight = lw.k_norm;
    p.q_stride = qkv_dim_;
    p.k_stride = qkv_dim_;
    p.num_tokens = w;
    p.num_heads = s.num_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_dim = s.head_dim;
    p.eps = s.norm_eps;
    p.weight_offset = norm_offset();
    p.pdl = true;
    launch_qk_norm(p, stream);
  }
  if (!rope_done) enqueue_rope_scatter(l, shape, in, stream);

  AttentionParams at;
  at.q = q;
  at.out = attn_.data();
  at.k_pool = k_pool(l);
  at.v_pool = v_pool(l);
  at.cell_table = table_.data();
  at.seq_slots = in.slots;
  at.positions = in.positions;
  at.q_stride = qkv_dim_;
  at.out_stride = q_dim_;
  at.num_tokens = w;
  at.num_heads = s.num_heads;
  at.num_kv_heads = s.num_kv_heads;
  at.head_dim = s.head_dim;
  at.max_cells = kv_cells_;
  at.max_seqs = max_seqs_;
  at.table_stride = table_stride_;
  at.window = ls.window;
  at.scale = attention_scale_;
  at.softcap = s.attn_logit_softcap.value_or(0.0f);
  at.kv_dtype = kv_dtype_;
  at.num_splits = split.splits;
  at.workspace = attn_ws_.data();
  at.split_min_keys = split.min_keys;
  at.counters = attn_counters_.data();
  // A row's keys older than the step are read before the wait on the q/k/v
  // projection.
  at.fresh_from = in.fresh_from;
  at.cells = in.cells;
  // decode_split() rounded the count to a multiple of its cluster.
  at.cluster = split.splits % split.cluster == 0 ? split.cluster : 1;
  // Where a launch's blocks fit the SMs one each: one block an SM, the next
  // kernel launched when the wait returns, the splits pushed into the
  // cluster's first block; 128-wide heads packed where that saves a wave.
  at.spread = true;
  at.early_next = true;
  at.push_merge = true;
  at.pack_wide = PackWide::kWhereItSavesAWave;
  at.pdl = true;
  if (shape.decode_rows >= 0) {
    // Decode rows first; the prefill kernel then takes the rest, whose
    // sequences own enough rows in this step to share K/V tiles.
    // Launches of at most kMaxDecodeWidth rows reuse the partials and the
    // counters one after another on the stream.
    for (std::int32_t first = 0; first < shape.decode_rows; first += kMaxDecodeWidth) {
      at.rows = in.attention_rows + first;
      at.num_tokens = std::min(kMaxDecodeWidth, shape.decode_rows - first);
      launch_attention_decode_v2(at, stream);
    }
    at.rows = in.attention_rows + shape.decode_rows;
    at.num_tokens = w - shape.decode_rows;
    if (at.num_tokens > 0) launch_attention_prefill_v2(at, stream);
  } else if (shape.decode_attention) {
    launch_attention_decode_v2(at, stream);
  } else {
    launch_attention_prefill_v2(at, stream);
  }
}

}  // namespace cellm::cuda
