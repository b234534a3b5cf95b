#include "backend/cuda/cuda_forward.h"

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/embedding.cuh"
#include "backend/cuda/kernels/gated_mlp.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/kernels/qgemv_mma.cuh"
#include "backend/cuda/kernels/rms_norm.cuh"
#include "backend/cuda/kernels/soft_cap.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/rope_table.h"

namespace cellm::cuda {
namespace {

template <typename T>
Status alloc(DeviceBuffer<T>& buffer, std::size_t count) {
  CELLM_ASSIGN_OR_RETURN(buffer, DeviceBuffer<T>::allocate(count));
  return Status::ok();
}

}  // namespace

std::size_t CudaForward::kv_bytes_per_cell(const model::ModelSpec& spec, KvDtype kv_dtype) {
  return static_cast<std::size_t>(spec.num_layers) * 2 *
         static_cast<std::size_t>(spec.num_kv_heads) * static_cast<std::size_t>(spec.head_dim) *
         kv_dtype_bytes(kv_dtype);
}

std::size_t CudaForward::activation_bytes(const model::ModelSpec& s, std::int32_t max_step,
                                          bool quantized) {
  const auto t = static_cast<std::size_t>(max_step);
  const std::size_t q = static_cast<std::size_t>(s.num_heads) * s.head_dim;
  const std::size_t kv = static_cast<std::size_t>(s.num_kv_heads) * s.head_dim;
  const std::size_t h = static_cast<std::size_t>(s.hidden_size);
  const std::size_t bf16_elems =
      t * (4 * h + (q + 2 * kv) + q + 2 * static_cast<std::size_t>(s.intermediate_size));
  const std::size_t decode_width = std::min<std::size_t>(t, kMaxDecodeWidth);
  return bf16_elems * sizeof(bf16) + t * static_cast<std::size_t>(s.vocab_size) * sizeof(float) +
         attention_decode_workspace_bytes(static_cast<std::int64_t>(decode_width), s.num_heads,
                                          s.head_dim, kAttentionMaxSplits) +
         attention_decode_v2_counters(static_cast<std::int64_t>(decode_width), s.num_heads,
                                      s.num_kv_heads) *
             sizeof(std::int32_t) +
         GemmRunner::kDefaultWorkspaceBytes + t * StepArrays::kCount * sizeof(std::int32_t) +
         (quantized ? kQuantScratchBytes + fp8_activation_bytes(s, max_step) : 0);
}

CudaForward::CudaForward(const model::ModelSpec& spec, DeviceWeights weights, GemmRunner gemm)
    : spec_(spec), weights_(std::move(weights)), gemm_(std::move(gemm)) {}

Result<std::unique_ptr<CudaForward>> CudaForward::create(const model::ModelSpec& spec,
                                                         DeviceWeights weights,
                                                         std::int32_t max_step,
                                                         std::int32_t kv_cells, KvDtype kv_dtype) {
  if (max_step <= 0 || kv_cells < 2) {
    return invalid_argument(
        "cuda forward: max_step {} and kv_cells {} must be positive (cells >= 2)", max_step,
        kv_cells);
  }
  if (kv_dtype == KvDtype::kFp8 && spec.head_dim % 16 != 0) {
    return not_supported(
        "--kv-dtype fp8: head_dim {} is not a multiple of 16 (attention copies FP8 K/V 16 codes "
        "at a time); use bf16",
        spec.head_dim);
  }
  CELLM_ASSIGN_OR_RETURN(GemmRunner gemm, GemmRunner::create(GemmRunner::kDefaultWorkspaceBytes));
  auto f = std::unique_ptr<CudaForward>(new CudaForward(spec, std::move(weights), std::move(gemm)));
  f->max_step_ = max_step;
  f->kv_cells_ = kv_cells;
  f->kv_dtype_ = kv_dtype;
  f->sm_count_ = multiprocessor_count();
  f->q_dim_ = static_cast<std::int64_t>(spec.num_heads) * spec.head_dim;
  f->kv_dim_ = static_cast<std::int64_t>(spec.num_kv_heads) * spec.head_dim;
  f->qkv_dim_ = f->q_dim_ + 2 * f->kv_dim_;
  f->fusable_ = spec.hidden_size % 8 == 0 && f->q_dim_ % 8 == 0 && spec.intermediate_size % 8 == 0;
  for (const DeviceLayer& layer : f->weights_.layers) {
    if (layer.post_attn_norm != nullptr || layer.post_mlp_norm != nullptr) f->fusable_ = false;
  }
  // The fused GEMVs read bf16 rows; projections in blocks take the unfused
  // path, whose project() has a quantized GEMV.
  if (f->weights_.quantized()) f->fusable_ = false;
  f->attention_scale_ = spec.attention_scale > 0.0f
                            ? spec.attention_scale
                            : 1.0f / std::sqrt(static_cast<float>(spec.head_dim));
  const auto t = static_cast<std::size_t>(max_step);
  const auto h = static_cast<std::size_t>(spec.hidden_size);
  CELLM_RETURN_IF_ERROR(alloc(f->step_, t * StepArrays::kCount));
  CELLM_CUDA_CHECK(cudaMemset(f->step_.data(), 0, f->step_.bytes()));
  CELLM_RETURN_IF_ERROR(alloc(f->x_, t * h));
  CELLM_RETURN_IF_ERROR(alloc(f->h_, t * h));
  CELLM_RETURN_IF_ERROR(alloc(f->tmp_, t * h));
  CELLM_RETURN_IF_ERROR(alloc(f->sel_, t * h));
  CELLM_RETURN_IF_ERROR(alloc(f->qkv_, t * static_cast<std::size_t>(f->qkv_dim_)));
  CELLM_RETURN_IF_ERROR(alloc(f->attn_, t * static_cast<std::size_t>(f->q_dim_)));
  CELLM_RETURN_IF_ERROR(alloc(f->gu_, t * 2 * static_cast<std::size_t>(spec.intermediate_size)));
  CELLM_RETURN_IF_ERROR(alloc(f->logits_, t * static_cast<std::size_t>(spec.vocab_size)));
  const std::int64_t decode_width = std::min(max_step, kMaxDecodeWidth);
  CELLM_RETURN_IF_ERROR(
      alloc(f->attn_ws_, attention_decode_workspace_bytes(decode_width, spec.num_heads,
                                                          spec.head_dim, kAttentionMaxSplits) /
                                 sizeof(float) +
                             1));
  CELLM_RETURN_IF_ERROR(alloc(f->gemm_ws_, f->gemm_.workspace_bytes()));
  if (f->weights_.quantized()) {
    CELLM_RETURN_IF_ERROR(alloc(f->quant_scratch_, kQuantScratchBytes / sizeof(bf16)));
    CELLM_RETURN_IF_ERROR(f->setup_fp8_gemm());
  }
  // Decode v2's counters must start at zero; every completed launch leaves them so.
  CELLM_RETURN_IF_ERROR(
      alloc(f->attn_counters_,
            attention_decode_v2_counters(decode_width, spec.num_heads, spec.num_kv_heads)));
  CELLM_CUDA_CHECK(cudaMemset(f->attn_counters_.data(), 0, f->attn_counters_.bytes()));
  // The lm_head GEMV's argmax (GemvArgmax): a partial per block, and a
  // counter that starts at zero and every completed launch leaves so.
  static_assert(kGemvArgmaxPartBytes == sizeof(std::int64_t));
  CELLM_RETURN_IF_ERROR(alloc(f->argmax_partials_, static_cast<std::size_t>(gemv_max_blocks())));
  CELLM_RETURN_IF_ERROR(alloc(f->argmax_counter_, 1));
  CELLM_CUDA_CHECK(cudaMemset(f->argmax_counter_.data(), 0, f->argmax_counter_.bytes()));
  // K/V pools: every layer keeps a full pool; windows only bound the reads.
  CELLM_RETURN_IF_ERROR(
      alloc(f->kv_, static_cast<std::size_t>(kv_cells) * kv_bytes_per_cell(spec, kv_dtype)));
  // Cell 0 is the scratch cell padding rows read; keep it finite.
  CELLM_CUDA_CHECK(cudaMemset(f->kv_.data(), 0, f->kv_.bytes()));

  std::int32_t max_rotary = 2;
  for (const auto& layer : spec.layers) {
    const int rd = rope_rotary_dim(layer.rope, spec.head_dim);
    f->rotary_dims_.push_back(rd);
    max_rotary = std::max(max_rotary, rd);
  }
  f->inv_freq_stride_ = max_rotary / 2;
  std::vector<float> freqs(static_cast<std::size_t>(spec.num_layers) * f->inv_freq_stride_, 0.0f);
  for (int l = 0; l < spec.num_layers; ++l) {
    std::vector<float> inv =
        rope_inv_freq(spec.layers[static_cast<std::size_t>(l)].rope, spec.head_dim);
    std::copy(inv.begin(), inv.end(),
              freqs.begin() + static_cast<std::ptrdiff_t>(l) * f->inv_freq_stride_);
  }
  CELLM_RETURN_IF_ERROR(alloc(f->inv_freq_, freqs.size()));
  CELLM_CUDA_CHECK(cudaMemcpy(f->inv_freq_.data(), freqs.data(), freqs.size() * sizeof(float),
                              cudaMemcpyHostToDevice));
  return f;
}

std::size_t CudaForward::workspace_bytes() const {
  return x_.bytes() + h_.bytes() + tmp_.bytes() + sel_.bytes() + qkv_.bytes() + attn_.bytes() +
         gu_.bytes() + logits_.bytes() + attn_ws_.bytes() + attn_counters_.bytes() +
         gemm_ws_.bytes() + step_.bytes() + quant_scratch_.bytes() + act_fp8_.bytes() +
         act_scales_.bytes();
}

Status CudaForward::bind_tables(std::int32_t max_seqs, std::int32_t max_seq_len) {
  if (max_seqs <= 0 || max_seq_len <= 0) {
    return invalid_argument("cell tables need positive sizes, got {} x {}", max_seqs, max_seq_len);
  }
  CELLM_RETURN_IF_ERROR(alloc(table_, static_cast<std::size_t>(max_seqs) * max_seq_len));
  CELLM_CUDA_CHECK(cudaMemset(table_.data(), 0, table_.bytes()));
  max_seqs_ = max_seqs;
  table_stride_ = max_seq_len;
  return Status::ok();
}

Status CudaForward::gemm(const bf16* a, std::int64_t lda, const bf16* w, std::int64_t n,
                         std::int64_t k, void* out, DType out_dtype, std::int32_t m,
                         const bf16* bias, std::uint32_t mma, cudaStream_t stream) {
  if (gemv_takes(active_, m)) {
    GemvParams g = gemv_params(a, lda, w, n, k, nullptr, m);
    g.out = out;
    g.out_f32 = out_dtype == DType::kF32;
    g.bias = bias;
    g.tensor_cores = tensor_cores_for(g, mma);
    // Geometry the GEMV does not take (k not a multiple of 8, ...) stays on cuBLASLt.
    if (g.validate().is_ok()) {
      launch_gemv(g, stream);
      return Status::ok();
    }
  }
  GemmArgs args;
  args.a = a;
  args.b = w;
  args.out = out;
  args.bias = bias;
  args.m = m;
  args.n = n;
  args.k = k;
  args.lda = lda;
  args.ldb = k;
  args.ldc = n;
  args.out_dtype = out_dtype;
  // Time cuBLASLt's first kDefaultAutotuneCandidates heuristic results per
  // decode GEMM shape and keep the fastest.
  args.autotune = true;
  return gemm_.run(args, gemm_ws_.data(), stream);
}

Status CudaForward::project(const bf16* a, std::int64_t lda, const bf16* w, const DeviceQuant& q,
                            std::int64_t n, std::int64_t k, void* out, DType out_dtype,
                            std::int32_t m, const bf16* bias, std::uint32_t mma,
                            cudaStream_t stream) {
  if (q.empty()) return gemm(a, lda, w, n, k, out, out_dtype, m, bias, mma, stream);
  const bool f32 = out_dtype == DType::kF32;
  const std::int64_t elem = f32 ? sizeof(float) : sizeof(bf16);
  auto* out_bytes = static_cast<std::byte*>(out);
  if (m <= kQGemvMaxRows) {
    for (const DeviceQuantPart& part : q.parts) {
      QGemvParams p;
      p.a = a;
      p.lda = lda;
      p.w = part.blocks;
      p.type = part.type;
      p.bias = bias != nullptr ? bias + part.row0 : nullptr;
      p.out = out_bytes + part.row0 * elem;
      p.out_f32 = f32;
      p.m = m;
      p.n = static_cast<std::int32_t>(part.rows);
      p.k = static_cast<std::int32_t>(k);
      p.ldw_bytes = part.row_bytes;
      p.ldc = n;
      p.scales = part.scales;
      p.pdl = true;
      CELLM_RETURN_IF_ERROR(p.validate());
      if ((active_.gemv_mma & kMmaQuant) != 0 && qgemv_on_tensor_cores(p)) {
        launch_qgemv_mma(p, stream);
      } else {
        launch_qgemv(p, stream);
      }
    }
    return Status::ok();
  }
  return project_wide(a, lda, q, n, k, out, out_dtype, m, bias, stream);
}

void CudaForward::norm(const bf16* x, bf16* residual, const bf16* weight, bf16* out,
                       std::int32_t rows, cudaStream_t stream) const {
  RmsNormParams p;
  p.x = x;
  p.residual = residual;
  p.weight = weight;
  p.out = out;
  p.rows = rows;
  p.dim = spec_.hidden_size;
  p.eps = spec_.norm_eps;
  p.weight_offset = norm_offset();
  p.pdl = true;
  launch_rms_norm(p, stream);
}

Status CudaForward::gemv(const GemvParams& params, cudaStream_t stream) {
  CELLM_RETURN_IF_ERROR(params.validate());
  launch_gemv(params, stream);
  return Status::ok();
}

GemvParams CudaForward::gemv_params(const bf16* a, std::int64_t lda, const bf16* w, std::int64_t n,
                                    std::int64_t k, bf16* out, std::int32_t m) const {
  GemvParams g =
      gemv_dense(a, w, out, m, static_cast<std::int32_t>(n), static_cast<std::int32_t>(k));
  g.lda = lda;
  g.norm_eps = spec_.norm_eps;
  g.norm_weight_offset = norm_offset();
  g.pdl = true;
  g.single_rows = true;
  g.stage_inputs = true;
  return g;
}

bool CudaForward::gemv_takes(const KernelChoice& kernels, std::int32_t rows) {
  return rows <= std::min(kernels.gemv_max_rows, kGemvMaxRows);
}

bool CudaForward::fused_step(const ForwardShape& shape) const {
  return fusable_ && gemv_takes(shape.kernels, shape.width);
}

bool CudaForward::takes_argmax(const ForwardShape& shape) const {
  // A soft cap rewrites the logits after the lm_head: its rounding can tie
  // values the lm_head told apart, so the argmax must see the capped ones.
  return shape.argmax_to != nullptr && shape.rows == 1 &&
         fused_step(shape) && !spec_.final_logit_softcap;
}

Status CudaForward::validate_shape(const ForwardShape& shape) const {
  const std::int32_t w = shape.width;
  if (w <= 0 || w > max_step_ || shape.rows <= 0 || shape.rows > w) {
    return invalid_argument("cuda forward: width {} / rows {} outside [1, {}]", w, shape.rows,
                            max_step_);
  }
  if (shape.decode_attention && w > kMaxDecodeWidth) {
    return invalid_argument("cuda forward: split-KV attention serves at most {} rows",
                            kMaxDecodeWidth);
  }
  if (shape.decode_rows > w) {
    return invalid_argument("cuda forward: {} decode rows of {} (at most all)", shape.decode_rows,
                            w);
  }
  if (table_.empty()) return invalid_argument("cuda forward: bind the cell tables first");
  return Status::ok();
}

DecodeSplit CudaForward::decode_split(const ForwardShape& shape) const {
  const model::ModelSpec& s = spec_;
  const std::int32_t min_keys = kDecodeSplitKeys;
  const std::int32_t cluster = kDecodeCluster;
  // Rows of the split-KV kernel: all of them, or a mixed step's decode rows.
  const bool split_rows = shape.decode_rows >= 0;
  const std::int32_t rows = split_rows ? std::min(shape.decode_rows, kMaxDecodeWidth) : shape.width;
  if (!(shape.decode_attention || split_rows) || rows <= 0) return {1, min_keys, 1};
  const std::int32_t keys =
      shape.key_span > 0 ? std::min(shape.key_span, table_stride_) : table_stride_;
  // Where up to twice the keys a split let the splits fit the SMs one block
  // each (rounded down to whole clusters), a split takes them: the launch
  // then keeps the spread, early-next and push-merge paths (H200, 1B batch 1
  // at 2100 keys: 16 splits of 256 keys 0.864 ms/step against 32 of 128
  // 0.904; at 8200 keys 16 splits of 512 lost, 1.101 against 1.022, so the
  // rule stops at twice).
  std::int32_t split_keys = min_keys;
  const auto blocks =
      static_cast<std::int64_t>(attention_decode_v2_counters(rows, s.num_heads, s.num_kv_heads));
  const std::int64_t fit = sm_count_ / std::max<std::int64_t>(1, blocks) / cluster * cluster;
  if (fit >= 1 && (static_cast<std::int64_t>(keys) + min_keys - 1) / min_keys > fit) {
    const std::int64_t per_split = (keys + fit - 1) / fit;
    if (per_split <= 2 * std::int64_t{min_keys}) {
      split_keys = static_cast<std::int32_t>((per_split + 63) / 64 * 64);
    }
  }
  const auto splits_in = [&](std::int32_t clusters_of) {
    return attention_decode_v2_splits(rows, s.num_heads, s.num_kv_heads, keys, sm_count_,
                                      split_keys, kDecodeSplitTarget, clusters_of);
  };
  // A step that wants fewer splits than a cluster holds launches clusters of
  // the next power of two instead of padding its splits to a whole cluster
  // (batch 32 at short contexts: 2 splits, 8 launched).
  const std::int32_t wanted = splits_in(1);
  std::int32_t launch_cluster = 1;
  while (launch_cluster < wanted && launch_cluster < cluster) launch_cluster *= 2;
  return {std::min(kAttentionMaxSplits, splits_in(launch_cluster)), split_keys, launch_cluster};
}

std::int32_t CudaForward::key_span(std::int32_t keys) const {
  std::int64_t span = kMinKeySpan;
  while (span < keys && span < table_stride_) span *= 2;
  return static_cast<std::int32_t>(std::min<std::int64_t>(span, table_stride_));
}

std::vector<std::int32_t> CudaForward::key_spans() const {
  std::vector<std::int32_t> spans;
  for (std::int64_t span = kMinKeySpan;; span *= 2) {
    spans.push_back(static_cast<std::int32_t>(std::min<std::int64_t>(span, table_stride_)));
    if (span >= table_stride_) break;
  }
  return spans;
}

Status CudaForward::enqueue(const ForwardShape& shape, cudaStream_t stream) {
  CELLM_RETURN_IF_ERROR(validate_shape(shape));
  const model::ModelSpec& s = spec_;
  const std::int32_t w = shape.width;
  const StepInputs in = step_inputs();
  const std::int64_t hidden = s.hidden_size;
  const std::int64_t inter = s.intermediate_size;
  active_ = shape.kernels;
  const bool fused = fused_step(shape);

  embed(shape, in, stream);

  const DecodeSplit split = decode_split(shape);
  for (int l = 0; l < s.num_layers; ++l) {
    const DeviceLayer& lw = weights_.layers[static_cast<std::size_t>(l)];
    const bool rope_in_qkv = rope_in_gemv(l, shape);
    if (fused) {
      // x_ is the whole residual stream: the GEMVs add into it and normalise
      // their own inputs, so no norm, add or activation kernel runs.
      GemvParams qkv = gemv_params(x_.data(), hidden, lw.qkv, qkv_dim_, hidden, qkv_.data(), w);
      qkv.bias = lw.qkv_bias;
      qkv.prologue = GemvPrologue::kRmsNorm;
      qkv.norm_weight = lw.attn_norm;
      if (rope_in_qkv) {
        qkv.epilogue = GemvEpilogue::kRopeScatter;
        qkv.rope = rope_scatter_params(l, shape, in);
      }
      qkv.tensor_cores = tensor_cores_for(qkv, kMmaQkv);
      CELLM_RETURN_IF_ERROR(gemv(qkv, stream));
    } else {
      if (l == 0) {
        norm(x_.data(), nullptr, lw.attn_norm, h_.data(), w, stream);
      } else {
        norm(tmp_.data(), x_.data(), lw.attn_norm, h_.data(), w, stream);
      }
      CELLM_RETURN_IF_ERROR(project(h_.data(), hidden, lw.qkv, lw.qkv_q, qkv_dim_, hidden,
                                    qkv_.data(), DType::kBF16, w, lw.qkv_bias, kMmaQkv, stream));
    }
    enqueue_attention(l, shape, in, split, rope_in_qkv, stream);
    if (fused) {
      GemvParams o = gemv_params(attn_.data(), q_dim_, lw.o, hidden, q_dim_, x_.data(), w);
      o.epilogue = GemvEpilogue::kResidualAdd;
      o.tensor_cores = tensor_cores_for(o, kMmaO);
      CELLM_RETURN_IF_ERROR(gemv(o, stream));
      GemvParams gate_up = gemv_params(x_.data(), hidden, lw.gate_up, inter, hidden, gu_.data(), w);
      gate_up.ldc = 2 * inter;
      gate_up.prologue = GemvPrologue::kRmsNorm;
      gate_up.norm_weight = lw.mlp_norm;
      gate_up.epilogue = s.activation == model::Activation::kGeluTanh ? GemvEpilogue::kGatedGeluTanh
                                                                      : GemvEpilogue::kGatedSilu;
      gate_up.tensor_cores = tensor_cores_for(gate_up, kMmaGateUp);
      CELLM_RETURN_IF_ERROR(gemv(gate_up, stream));
      GemvParams down = gemv_params(gu_.data(), 2 * inter, lw.down, hidden, inter, x_.data(), w);
      down.epilogue = GemvEpilogue::kResidualAdd;
      down.tensor_cores = tensor_cores_for(down, kMmaDown);
      CELLM_RETURN_IF_ERROR(gemv(down, stream));
      continue;
    }
    CELLM_RETURN_IF_ERROR(project(attn_.data(), q_dim_, lw.o, lw.o_q, hidden, q_dim_, tmp_.data(),
                                  DType::kBF16, w, nullptr, kMmaO, stream));
    if (lw.post_attn_norm != nullptr) {
      norm(tmp_.data(), nullptr, lw.post_attn_norm, tmp_.data(), w, stream);
    }
    norm(tmp_.data(), x_.data(), lw.mlp_norm, h_.data(), w, stream);
    CELLM_RETURN_IF_ERROR(project(h_.data(), hidden, lw.gate_up, lw.gate_up_q, 2 * inter, hidden,
                                  gu_.data(), DType::kBF16, w, nullptr, kMmaGateUp, stream));
    GatedMlpParams mlp;
    mlp.gate = gu_.data();
    mlp.up = gu_.data() + inter;
    mlp.out = gu_.data();
    mlp.gate_stride = 2 * inter;
    mlp.up_stride = 2 * inter;
    mlp.out_stride = 2 * inter;
    mlp.rows = w;
    mlp.inter = s.intermediate_size;
    mlp.activation = s.activation == model::Activation::kGeluTanh ? GateActivation::kGeluTanh
                                                                  : GateActivation::kSilu;
    mlp.pdl = true;
    launch_gated_mlp(mlp, stream);
    CELLM_RETURN_IF_ERROR(project(gu_.data(), 2 * inter, lw.down, lw.down_q, hidden, inter,
                                  tmp_.data(), DType::kBF16, w, nullptr, kMmaDown, stream));
    if (lw.post_mlp_norm != nullptr) {
      norm(tmp_.data(), nullptr, lw.post_mlp_norm, tmp_.data(), w, stream);
    }
  }
  return enqueue_logits(shape, in, fused, stream);
}

void CudaForward::embed(const ForwardShape& shape, const StepInputs& in,
                        cudaStream_t stream) const {
  // The step's first kernel: it follows the step's upload (no pdl).
  EmbeddingParams emb;
  emb.tokens = in.tokens;
  emb.table = weights_.embed;
  emb.out = x_.data();
  emb.num_tokens = shape.width;
  emb.vocab = spec_.vocab_size;
  emb.dim = spec_.hidden_size;
  emb.scale = spec_.embedding_scale;
  launch_embedding(emb, stream);
}

bool CudaForward::tensor_cores_for(const GemvParams& params, std::uint32_t bit) const {
  if ((active_.gemv_mma & bit) == 0 || gemv_mma_rounds(params) > kGemvMmaMaxRounds) return false;
  // Decided for the widest GEMV step, whatever this step's rows: every
  // width then runs the projection on the same kernel, so a row's bits do
  // not depend on how many rows its step has (a verification step gives
  // the bits of plain one-row decoding).
  GemvParams widest = params;
  widest.m = std::min(active_.gemv_max_rows, kGemvMaxRows);
  widest.argmax = GemvArgmax{};
  widest.tensor_cores = true;
  return gemv_uses_tensor_cores(widest);
}

Status CudaForward::enqueue_logits(const ForwardShape& shape, const StepInputs& in, bool fused,
                                   cudaStream_t stream) {
  const model::ModelSpec& s = spec_;
  const std::int32_t w = shape.width;
  const std::int64_t hidden = s.hidden_size;
  EmbeddingParams gather;  // the selected rows of the final hidden state
  gather.tokens = in.selector;
  gather.table = fused ? x_.data() : h_.data();
  gather.out = sel_.data();
  gather.num_tokens = shape.rows;
  gather.vocab = w;
  gather.dim = s.hidden_size;
  gather.scale = 1.0f;
  gather.pdl = true;
#if CELLM_KERNEL_TRACE
  gather.trace_name = "gather";
#endif
  if (fused) {
    // The final norm runs on the gathered rows, inside the lm_head GEMV. A
    // one-token step selects its only row, so the GEMV reads it in place and
    // the gather's launch leaves the chain.
    const bool in_place = w == 1;
    if (!in_place) launch_embedding(gather, stream);
    GemvParams head = gemv_params(in_place ? x_.data() : sel_.data(), hidden, weights_.lm_head,
                                  s.vocab_size, hidden, nullptr, shape.rows);
    head.out = logits_.data();
    head.out_f32 = true;
    head.prologue = GemvPrologue::kRmsNorm;
    head.norm_weight = weights_.final_norm;
    if (takes_argmax(shape)) {
      head.argmax = GemvArgmax{.partials = argmax_partials_.data(),
                               .counter = argmax_counter_.data(),
                               .out = shape.argmax_to};
    }
    head.tensor_cores = tensor_cores_for(head, kMmaHead);
    CELLM_RETURN_IF_ERROR(gemv(head, stream));
  } else {
    norm(tmp_.data(), x_.data(), weights_.final_norm, h_.data(), w, stream);
    launch_embedding(gather, stream);
    CELLM_RETURN_IF_ERROR(project(sel_.data(), hidden, weights_.lm_head, weights_.lm_head_q,
                                  s.vocab_size, hidden, logits_.data(), DType::kF32, shape.rows,
                                  nullptr, kMmaHead, stream));
  }
  if (s.final_logit_softcap) {
    SoftCapParams cap;
    cap.logits = logits_.data();
    cap.count = static_cast<std::int64_t>(shape.rows) * s.vocab_size;
    cap.cap = *s.final_logit_softcap;
    cap.pdl = true;
    launch_soft_cap(cap, stream);
  }
  return Status::ok();
}

}  // namespace cellm::cuda
