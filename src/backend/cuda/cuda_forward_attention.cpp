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

bf16* CudaForward::k_pool(int l) const {
  const std::size_t pool_elems =
      static_cast<std::size_t>(kv_cells_) * static_cast<std::size_t>(kv_dim_);
  return kv_.data() + static_cast<std::size_t>(2 * l) * pool_elems;
}

bf16* CudaForward::v_pool(int l) const {
  return k_pool(l) + static_cast<std::size_t>(kv_cells_) * static_cast<std::size_t>(kv_dim_);
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
  rs.pdl = shape.kernels.pdl;
  return rs;
}

bool CudaForward::rope_in_gemv(int l, const ForwardShape& shape) const {
  const std::int32_t rotary_dim = rotary_dims_[static_cast<std::size_t>(l)];
  return fused_step(shape) && shape.kernels.fused_rope && !spec_.qk_norm &&
         rope_scatter_supported(spec_.head_dim, rotary_dim) && rotary_dim == spec_.head_dim;
}

void CudaForward::enqueue_rope_scatter(int l, const ForwardShape& shape, const StepInputs& in,
                                       cudaStream_t stream) {
  const RopeScatterParams rs = rope_scatter_params(l, shape, in);
  if (shape.kernels.fused_rope && rope_scatter_supported(rs.head_dim, rs.rotary_dim)) {
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
  launch_kv_scatter(sc, stream);
}

Status CudaForward::init_fused_o() {
  const model::ModelSpec& s = spec_;
  if (!fusable_) {
    fused_o_off_ = "the model has post-norms or widths the GEMV does not take";
  } else if (compute_capability_major() < 9 || !cluster_launch_supported()) {
    fused_o_off_ = "the device has no thread block clusters (sm_90)";
  } else {
    fused_o_off_ =
        attention_fused_o_unsupported(s.hidden_size, s.num_heads, s.num_kv_heads, s.head_dim,
                                      KernelChoice{}.decode_cluster, max_smem_per_block_optin());
  }
  if (!fused_o_off_.empty()) return Status::ok();
  CELLM_ASSIGN_OR_RETURN(o_partials_,
                         DeviceBuffer<float>::allocate(static_cast<std::size_t>(s.num_kv_heads) *
                                                       static_cast<std::size_t>(s.hidden_size)));
  CELLM_ASSIGN_OR_RETURN(o_counters_, DeviceBuffer<std::int32_t>::allocate(kAttentionMaxCluster));
  // Zero once; every completed launch leaves them zero.
  CELLM_CUDA_CHECK(cudaMemset(o_counters_.data(), 0, o_counters_.bytes()));
  return Status::ok();
}

bool CudaForward::o_in_attention(const ForwardShape& shape) const {
  const model::ModelSpec& s = spec_;
  return !o_counters_.empty() && shape.kernels.decode_fused_o && shape.width == 1 &&
         shape.decode_rows < 0 && shape.decode_attention &&
         shape.kernels.decode_attention == DecodeAttention::kV2 && fused_step(shape) &&
         *attention_fused_o_unsupported(s.hidden_size, s.num_heads, s.num_kv_heads, s.head_dim,
                                        shape.kernels.decode_cluster,
                                        max_smem_per_block_optin()) == '\0';
}

Status CudaForward::enqueue_attention(int l, const ForwardShape& shape, const StepInputs& in,
                                      const DecodeSplit& split, bool rope_done, bool o_fused,
                                      cudaStream_t stream) {
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
    p.pdl = shape.kernels.pdl;
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
  at.num_splits = split.splits;
  at.workspace = attn_ws_.data();
  at.split_min_keys = split.min_keys;
  at.counters = attn_counters_.data();
  if (shape.kernels.decode_early_keys) {
    at.fresh_from = in.fresh_from;
    at.cells = in.cells;
  }
  // decode_split() rounded the count to a multiple of its cluster for v2.
  at.cluster = split.splits % split.cluster == 0 ? split.cluster : 1;
  at.spread = shape.kernels.decode_spread;
  at.early_next = shape.kernels.decode_early_next;
  at.push_merge = shape.kernels.decode_push_merge;
  at.pack_wide = shape.kernels.decode_pack_wide ? PackWide::kWhereItSavesAWave : PackWide::kNever;
  at.pdl = shape.kernels.pdl;
  const auto prefill_attention = shape.kernels.prefill_attention == PrefillAttention::kV2
                                     ? launch_attention_prefill_v2
                                     : launch_attention_prefill;
  const bool decode_v2 = shape.kernels.decode_attention == DecodeAttention::kV2;
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
    if (at.num_tokens > 0) prefill_attention(at, stream);
  } else if (shape.decode_attention && decode_v2) {
    if (o_fused) {
      at.o_weight = lw.o;
      at.o_residual = x_.data();
      at.o_partials = o_partials_.data();
      at.o_counters = o_counters_.data();
      at.o_rows = s.hidden_size;
      CELLM_RETURN_IF_ERROR(at.validate_decode_v2());
    }
    launch_attention_decode_v2(at, stream);
  } else if (shape.decode_attention) {
    launch_attention_decode(at, stream);
  } else {
    prefill_attention(at, stream);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
