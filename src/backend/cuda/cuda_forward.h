// CudaForward: one forward pass of a decoder over a packed token axis, as a
// sequence of kernel launches on one stream with every buffer allocated up
// front (sized for max_step), so the same launches can be captured into a
// CUDA graph per static width and replayed for any mix of sessions.
//
// Step inputs live in fixed device buffers written by one host-to-device copy
// per step (tokens, positions, sequence slots, cells, selector). The K/V
// pools (bf16, or FP8 E4M3 codes: KvDtype in cuda_types.h) and the device
// copy of the cell tables live here too; the forward's KV scatter keeps the
// tables current for the tokens it writes.
//
// Thread-safety: not thread-safe; the program's engine thread drives it.
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_types.h"
#include "backend/cuda/device_weights.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_fp8.h"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/kernel_choice.h"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "model/model_spec.h"

namespace cellm::cuda {

// Host-visible layout of the per-step inputs: seven int32 arrays of max_step.
// kFreshFrom: per row, the lowest position of the step's rows of its sequence
// (AttentionParams::fresh_from; 0 is always safe). kAttentionRows is read
// only by steps with ForwardShape::decode_rows >= 0.
struct StepArrays {
  static constexpr int kCount = 7;
  enum Index { kTokens = 0, kPositions, kSlots, kCells, kSelector, kFreshFrom, kAttentionRows };
};

// The split-KV decode kernels serve at most this many rows in one launch
// (their partials and counters are sized for it).
inline constexpr std::int32_t kMaxDecodeWidth = 256;

struct ForwardShape {
  std::int32_t width = 0;        // token rows, padding included
  std::int32_t rows = 0;         // selected rows (logits rows)
  bool decode_attention = true;  // split-KV kernel; else flash-prefill tiles
  KernelChoice kernels{};        // the open choices (a captured graph keeps its own)
  // A mixed step: attention runs the split-KV kernel over the
  // token rows kAttentionRows[0, decode_rows) and the prefill kernel over
  // kAttentionRows[decode_rows, width). -1: one kernel (decode_attention) for
  // every row.
  std::int32_t decode_rows = -1;
  // Where the lm_head GEMV writes the argmax of the step's one logits row
  // (GemvArgmax; a page-locked host int's device mapping), when the step
  // takes it there (CudaForward::takes_argmax). Null: no argmax.
  std::int32_t* argmax_to = nullptr;
  // How many keys the step's rows attend at most (CudaForward::key_span of
  // its longest row; 0: the cell table's whole length). It sets how the
  // split-KV kernel cuts the keys (decode_split), which a captured graph
  // bakes in: sized for the table instead, a short session's blocks
  // outnumber the SMs and lose the one-block-an-SM paths.
  std::int32_t key_span = 0;
};

// How the split-KV decode attention cuts a step's keys: at most `splits`
// splits, every used one at least `min_keys` keys, launched in clusters of
// `cluster` where it divides `splits` (AttentionParams::num_splits,
// split_min_keys and cluster).
struct DecodeSplit {
  std::int32_t splits = 1;
  std::int32_t min_keys = 0;
  std::int32_t cluster = 1;
  friend auto operator<=>(const DecodeSplit&, const DecodeSplit&) = default;
};

class CudaForward {
 public:
  // Allocates weights-independent buffers: activations for max_step rows, the
  // K/V pools for `kv_cells` cells of `kv_dtype` (FP8 needs head_dim a
  // multiple of 16). The cell table comes with bind_tables.
  static Result<std::unique_ptr<CudaForward>> create(const model::ModelSpec& spec,
                                                     DeviceWeights weights, std::int32_t max_step,
                                                     std::int32_t kv_cells,
                                                     KvDtype kv_dtype = KvDtype::kBF16);

  // (Re)allocates the device cell tables [max_seqs, max_seq_len], zeroed.
  Status bind_tables(std::int32_t max_seqs, std::int32_t max_seq_len);

  // Enqueues the forward. No allocation, no synchronisation: capturable.
  Status enqueue(const ForwardShape& shape, cudaStream_t stream);
  // Whether enqueue(shape) writes the argmax of its logits row to
  // shape.argmax_to: one selected row, the lm_head on the GEMV, and logits
  // that nothing changes after it (a greedy one-token step then launches no
  // argmax kernel).
  bool takes_argmax(const ForwardShape& shape) const;
  // How enqueue(shape) cuts its keys for the split-KV kernel.
  DecodeSplit decode_split(const ForwardShape& shape) const;
  // ForwardShape::key_span for a step whose longest row attends `keys` keys:
  // the next power of two (at least kMinKeySpan), at most the table's length.
  // Spans, not exact lengths, keep the graphs a program captures few
  // (key_spans) and let eager steps split as a replayed graph does.
  std::int32_t key_span(std::int32_t keys) const;
  // Every span key_span returns for this table, shortest first.
  std::vector<std::int32_t> key_spans() const;
  static constexpr std::int32_t kMinKeySpan = 64;

  std::int32_t* step_device() const { return step_.data(); }  // [StepArrays::kCount, max_step]
  std::int32_t* table_device() const { return table_.data(); }
  std::int32_t max_step() const { return max_step_; }
  std::int32_t kv_cells() const { return kv_cells_; }
  std::int32_t table_stride() const { return table_stride_; }
  const float* logits() const { return logits_.data(); }  // [max_step, vocab]
  std::size_t kv_bytes() const { return kv_.bytes(); }
  KvDtype kv_dtype() const { return kv_dtype_; }
  std::size_t weight_bytes() const { return weights_.bytes(); }
  // The projections kept quantized (QuantWeights::summary), and, when FP8
  // ones run their wide steps on FP8 GEMMs, "; wide steps on FP8 GEMMs".
  std::string weight_blocks() const;
  // Resident weight bytes a decode step reads: all but an embedding table
  // that is not the head.
  std::size_t weight_bytes_read() const {
    const bool embed_is_head = weights_.lm_head == weights_.embed && weights_.lm_head_q.empty();
    const std::size_t embed = static_cast<std::size_t>(spec_.vocab_size) *
                              static_cast<std::size_t>(spec_.hidden_size) * sizeof(bf16);
    return weights_.bytes() - (embed_is_head ? 0 : embed);
  }
  std::size_t workspace_bytes() const;
  const model::ModelSpec& spec() const { return spec_; }

  // Bytes of K+V per cell over all layers (FP8 pools: half of bf16's).
  static std::size_t kv_bytes_per_cell(const model::ModelSpec& spec,
                                       KvDtype kv_dtype = KvDtype::kBF16);
  // Activation and workspace bytes for max_step rows (and, for weights kept
  // in blocks, the scratch their wide steps dequantize into and the rows'
  // FP8 codes and scales the FP8 GEMMs read).
  static std::size_t activation_bytes(const model::ModelSpec& spec, std::int32_t max_step,
                                      bool quantized = false);
  // The bf16 rows a wide step dequantizes a projection's blocks into, a
  // chunk of rows at a time (chunks that fit are each one cuBLASLt GEMM).
  static constexpr std::size_t kQuantScratchBytes = std::size_t{64} << 20;

 private:
  // Device pointers to the step's input arrays (StepArrays).
  struct StepInputs {
    const std::int32_t* tokens;
    const std::int32_t* positions;
    const std::int32_t* slots;
    const std::int32_t* cells;
    const std::int32_t* selector;
    const std::int32_t* fresh_from;
    const std::int32_t* attention_rows;
  };

  CudaForward(const model::ModelSpec& spec, DeviceWeights weights, GemmRunner gemm);
  Status validate_shape(const ForwardShape& shape) const;
  // A step that runs every projection on the GEMV with the norms, residual
  // adds and the MLP activation fused in (models without post-norms).
  bool fused_step(const ForwardShape& shape) const;
  // Whether `rows` rows go to the GEMV instead of cuBLASLt under `kernels`.
  static bool gemv_takes(const KernelChoice& kernels, std::int32_t rows);
  // 1 where the model stores its norm weights as w - 1 (Gemma), else 0.
  float norm_offset() const { return spec_.norm_weight_offset ? 1.0f : 0.0f; }
  // RMSNorm of `rows` hidden rows (plus `residual`, which it updates, when given).
  void norm(const bf16* x, bf16* residual, const bf16* weight, bf16* out, std::int32_t rows,
            cudaStream_t stream) const;
  StepInputs step_inputs() const;
  // cuda_forward_attention.cpp: q/k norms, rope, the K/V scatter (unless
  // `rope_done`: the q/k/v GEMV did both) and attention of layer l.
  void enqueue_attention(int l, const ForwardShape& shape, const StepInputs& in,
                         const DecodeSplit& split, bool rope_done, cudaStream_t stream);
  void enqueue_rope_scatter(int l, const ForwardShape& shape, const StepInputs& in,
                            cudaStream_t stream);
  // Layer l's K and V pools: [cells, kv_heads, head_dim] of kv_dtype_ each, inside kv_.
  void* k_pool(int l) const;
  void* v_pool(int l) const;
  // Layer l's rope + K/V scatter as rope_scatter (or the q/k/v GEMV's epilogue) takes it.
  RopeScatterParams rope_scatter_params(int l, const ForwardShape& shape,
                                        const StepInputs& in) const;
  // Whether layer l's q/k/v GEMV does the rope and the scatter itself (a fused
  // step, full rotary, no q/k norm in between).
  bool rope_in_gemv(int l, const ForwardShape& shape) const;
  // The token embeddings of the step's `width` rows into x_ (its first kernel).
  void embed(const ForwardShape& shape, const StepInputs& in, cudaStream_t stream) const;
  // Final norm, the selected rows and the lm_head (and the logit soft cap).
  Status enqueue_logits(const ForwardShape& shape, const StepInputs& in, bool fused,
                        cudaStream_t stream);
  // A bf16 product: the GEMV for steps of up to KernelChoice::gemv_max_rows
  // rows (on tensor cores where tensor_cores_for accepts the projection,
  // `mma` being its GemvMma bit), cuBLASLt otherwise.
  Status gemm(const bf16* a, std::int64_t lda, const bf16* w, std::int64_t n, std::int64_t k,
              void* out, DType out_dtype, std::int32_t m, const bf16* bias, std::uint32_t mma,
              cudaStream_t stream);
  // One projection of the unfused path: gemm() over the bf16 matrix `w`, or,
  // where it is kept in blocks (`q`), the quantized GEMV for up to
  // kQGemvMaxRows rows (on tensor cores where KernelChoice::gemv_mma has
  // kMmaQuant and qgemv_on_tensor_cores says so: qgemv_mma.cuh) and, wider, its blocks dequantized into
  // quant_scratch_ chunk by chunk, each chunk one cuBLASLt GEMM.
  Status project(const bf16* a, std::int64_t lda, const bf16* w, const DeviceQuant& q,
                 std::int64_t n, std::int64_t k, void* out, DType out_dtype, std::int32_t m,
                 const bf16* bias, std::uint32_t mma, cudaStream_t stream);
  // cuda_forward_quant.cpp: project()'s steps wider than the quantized
  // GEMV. FP8 parts with one scale a row (fp8_gemm_takes) run an FP8 GEMM
  // on the rows of `a` quantized once per call into act_fp8_; the other
  // parts, and FP8 ones where no FP8 GEMM runs (fp8_gemm_ unset, or a shape
  // cuBLASLt has no FP8 algorithm for: logged once), are dequantized into
  // quant_scratch_ chunk by chunk, each chunk one bf16 GEMM.
  Status project_wide(const bf16* a, std::int64_t lda, const DeviceQuant& q, std::int64_t n,
                      std::int64_t k, void* out, DType out_dtype, std::int32_t m, const bf16* bias,
                      cudaStream_t stream);
  Status dequantize_gemm(const bf16* a, std::int64_t lda, const DeviceQuantPart& part,
                         std::int64_t n, std::int64_t k, void* out, DType out_dtype, std::int32_t m,
                         const bf16* bias, cudaStream_t stream);
  // Whether `part` is FP8 with one scale a row (per-tensor and per-channel
  // checkpoints, `--quantize fp8`): the form the FP8 GEMM's per-row weight
  // scales take. Block-scaled parts keep the dequantize path (see
  // cuda_forward_quant.cpp for why).
  static bool fp8_gemm_takes(const DeviceQuantPart& part);
  // At create: when some part is fp8_gemm_takes, an FP8 GEMM runner that
  // passed its self-check and the activation scratch, else (logged) none.
  Status setup_fp8_gemm();
  // The FP8 codes and scales for max_step rows of the widest projection input.
  static std::size_t fp8_activation_bytes(const model::ModelSpec& spec, std::int32_t max_step);
  // A plain GEMV (programmatic launch, the model's norm constants).
  GemvParams gemv_params(const bf16* a, std::int64_t lda, const bf16* w, std::int64_t n,
                         std::int64_t k, bf16* out, std::int32_t m) const;
  Status gemv(const GemvParams& params, cudaStream_t stream);
  // Whether a GEMV projection (a step of up to gemv_max_rows rows) asks for
  // tensor cores: its KernelChoice::gemv_mma bit is set and its walk is
  // short (gemv_mma_rounds), and the widest GEMV step's rows
  // (KernelChoice::gemv_max_rows) fit the kernel's shared memory
  // (gemv_uses_tensor_cores): one kernel for every width, so row invariant.
  bool tensor_cores_for(const GemvParams& params, std::uint32_t bit) const;

  model::ModelSpec spec_;
  DeviceWeights weights_;
  GemmRunner gemm_;
  std::int32_t max_step_ = 0;
  std::int32_t kv_cells_ = 0;
  std::int32_t max_seqs_ = 0;
  std::int32_t table_stride_ = 0;
  int sm_count_ = 0;
  std::int64_t q_dim_ = 0, kv_dim_ = 0, qkv_dim_ = 0;
  float attention_scale_ = 0.0f;

  DeviceBuffer<std::int32_t> step_;   // [StepArrays::kCount, max_step]
  DeviceBuffer<std::int32_t> table_;  // [max_seqs, table_stride]
  DeviceBuffer<std::byte> kv_;        // [layers, 2, cells, kv_heads, head_dim] of kv_dtype_
  KvDtype kv_dtype_ = KvDtype::kBF16;
  DeviceBuffer<float> inv_freq_;  // [layers, max_rotary / 2]
  std::vector<std::int32_t> rotary_dims_;
  std::int32_t inv_freq_stride_ = 0;
  DeviceBuffer<bf16> x_, h_, tmp_, qkv_, attn_, gu_, sel_;
  DeviceBuffer<float> logits_;
  DeviceBuffer<float> attn_ws_;
  DeviceBuffer<std::int32_t> attn_counters_;    // decode v2's split counters, kept zero
  DeviceBuffer<std::int64_t> argmax_partials_;  // GemvArgmax: one per GEMV block
  DeviceBuffer<std::int32_t> argmax_counter_;   // GemvArgmax's counter, kept zero
  DeviceBuffer<std::byte> gemm_ws_;
  DeviceBuffer<bf16> quant_scratch_;       // kQuantScratchBytes, only for weights in blocks
  std::optional<Fp8GemmRunner> fp8_gemm_;  // set by setup_fp8_gemm when FP8 GEMMs run here
  DeviceBuffer<std::uint8_t> act_fp8_;     // [max_step, act_fp8_ld_] E4M3 codes of a GEMM's input
  DeviceBuffer<float> act_scales_;         // [max_step]: their per-row scales
  std::int64_t act_fp8_ld_ = 0;
  bool fp8_fallback_logged_ = false;
  std::int32_t max_decode_splits_ = 1;
  KernelChoice active_{};  // the enqueue in progress
  bool fusable_ = false;   // no post-norms, and every width a multiple of 8
};

}  // namespace cellm::cuda
