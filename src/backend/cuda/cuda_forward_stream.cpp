// One-token steps on the decode stream (decode_stream.cuh): the embedding,
// every layer in one persistent kernel, then the logits as in the GEMV chain.
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/launch.h"
#include "core/log.h"

namespace cellm::cuda {

Status CudaForward::init_stream() {
  const model::ModelSpec& s = spec_;
  stream_off_ = decode_stream_unsupported(s.hidden_size, static_cast<std::int32_t>(q_dim_),
                                          s.intermediate_size, s.num_heads, s.num_kv_heads,
                                          s.head_dim);
  if (stream_off_.empty() && !fusable_) stream_off_ = "the model has post-norms";
  if (stream_off_.empty() && (s.qk_norm || s.attn_logit_softcap.has_value())) {
    stream_off_ = "q/k norms or attention soft caps";
  }
  for (std::size_t l = 0; l < s.layers.size() && stream_off_.empty(); ++l) {
    if (s.layers[l].window != 0) stream_off_ = "a sliding-window layer";
    if (rotary_dims_[l] != s.head_dim) stream_off_ = "a partial rotary";
  }
  if (stream_off_.empty() && compute_capability_major() < 9) {
    stream_off_ = "the device predates sm_90 (bulk async copies)";
  }
  if (stream_off_.empty()) {
    stream_layout_ = decode_stream_layout(s.hidden_size, static_cast<std::int32_t>(q_dim_),
                                          s.intermediate_size, s.num_heads, s.num_kv_heads,
                                          s.head_dim, sm_count_, max_smem_per_block_optin());
    const int per_sm = stream_layout_.stages == 0
                           ? 0
                           : decode_stream_blocks_per_sm(stream_layout_.smem_bytes);
    if (per_sm < 0) {
      stream_off_ = fmt::format("the occupancy query failed: {}",
                                cudaGetErrorString(static_cast<cudaError_t>(-per_sm)));
    } else if (per_sm == 0) {
      stream_off_ = fmt::format(
          "its blocks of {} bytes of shared memory and {} weight stages do not fit one per SM",
          stream_layout_.smem_bytes, stream_layout_.stages);
    }
  }
  if (!stream_off_.empty()) {
    CELLM_LOG_INFO("cuda: one-token steps run the kernel chain ({})", stream_off_);
    return Status::ok();
  }
  std::vector<DecodeStreamLayer> table;
  for (int l = 0; l < s.num_layers; ++l) {
    const DeviceLayer& lw = weights_.layers[static_cast<std::size_t>(l)];
    DecodeStreamLayer d;
    d.attn_norm = lw.attn_norm;
    d.qkv = lw.qkv;
    d.qkv_bias = lw.qkv_bias;
    d.o = lw.o;
    d.mlp_norm = lw.mlp_norm;
    d.gate_up = lw.gate_up;
    d.down = lw.down;
    d.inv_freq = inv_freq_.data() + static_cast<std::size_t>(l) * inv_freq_stride_;
    table.push_back(d);
  }
  CELLM_ASSIGN_OR_RETURN(stream_layers_, DeviceBuffer<DecodeStreamLayer>::allocate(table.size()));
  CELLM_CUDA_CHECK(cudaMemcpy(stream_layers_.data(), table.data(),
                              table.size() * sizeof(DecodeStreamLayer), cudaMemcpyHostToDevice));
  CELLM_ASSIGN_OR_RETURN(stream_partials_,
                         DeviceBuffer<float>::allocate(
                             decode_stream_partials_floats(s.num_heads, s.head_dim)));
  CELLM_ASSIGN_OR_RETURN(stream_sync_, DeviceBuffer<std::uint32_t>::allocate(
                                           decode_stream_sync_words(s.num_kv_heads)));
  // Zero once; every completed launch leaves the counters zero.
  CELLM_CUDA_CHECK(cudaMemset(stream_sync_.data(), 0, stream_sync_.bytes()));
  return Status::ok();
}

bool CudaForward::stream_step(const ForwardShape& shape) const {
  return !stream_layers_.empty() && shape.kernels.decode_stream && shape.width == 1 &&
         shape.rows == 1 && shape.decode_rows < 0 && fused_step(shape);
}

Status CudaForward::enqueue_stream(const ForwardShape& shape, const StepInputs& in,
                                   cudaStream_t stream) {
  const model::ModelSpec& s = spec_;
  DecodeStreamParams p;
  p.layers = stream_layers_.data();
  p.num_layers = s.num_layers;
  p.hidden = s.hidden_size;
  p.inter = s.intermediate_size;
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  p.norm_eps = s.norm_eps;
  p.norm_weight_offset = norm_offset();
  p.scale = attention_scale_;
  p.gelu_tanh = s.activation == model::Activation::kGeluTanh;
  p.x = x_.data();
  p.qkv = qkv_.data();
  p.attn = attn_.data();
  p.gu = gu_.data();
  p.partials = stream_partials_.data();
  p.sync = stream_sync_.data();
  p.position = in.positions;
  p.slot = in.slots;
  p.cell = in.cells;
  p.kv = kv_.data();
  p.cell_table = table_.data();
  p.max_cells = kv_cells_;
  p.max_seqs = max_seqs_;
  p.table_stride = table_stride_;
  p.grid = sm_count_;
  p.smem_bytes = stream_layout_.smem_bytes;
  p.stages = stream_layout_.stages;
  p.pdl = shape.kernels.pdl;
  CELLM_RETURN_IF_ERROR(p.validate());

  embed(shape, in, stream);
  launch_decode_stream(p, stream);
  return enqueue_logits(shape, in, /*fused=*/true, stream);
}

}  // namespace cellm::cuda
