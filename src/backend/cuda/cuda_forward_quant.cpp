// CudaForward's wide steps over projections kept quantized (more rows than
// the quantized GEMV takes: prefill chunks, batched decode), and the FP8
// GEMM path among them (issue 38, item 3).
//
// FP8 parts with one scale a row run on FP8 tensor cores: the step's input
// rows are quantized to E4M3 once per projection call, one scale per row
// (kernels/quantize_fp8.cuh), and each part is one cuBLASLt FP8 GEMM with
// both scale vectors applied in its epilogue (gemm_fp8.h). The activations'
// quantization is the one numerical change against the dequantize path
// (which multiplies bf16 activations): a per-token E4M3 rounding, ~2^-4 of
// each value at most, as FP8 serving engines do it.
//
// Block-scaled FP8 checkpoints (a scale per 128 x 128 weights, say) keep
// the dequantize path. cuBLASLt has block modes for them (VEC128_32F for the
// activations, BLK128x128_32F for the weights), but they take the scales in
// layouts of their own and only blocks of exactly 128 x 128 on k and n
// multiples of 128, while the upload expands a checkpoint's grid to one
// scale per row and column block (the GEMV's RowScales), so the block
// height is gone by the time the forward sees it; carrying it through, and
// a second activation quantizer per 128 columns, is left until a
// block-scaled model's prefill is measured to need it.
#include <algorithm>

#include "backend/cuda/cuda_forward.h"
#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/kernels/quantize_fp8.cuh"
#include "core/log.h"

namespace cellm::cuda {
namespace {

// Every projection's parts: the layers', then the head's.
template <typename Fn>
void for_each_part(const DeviceWeights& weights, Fn&& fn) {
  for (const DeviceLayer& layer : weights.layers) {
    for (const DeviceQuant* q : {&layer.qkv_q, &layer.o_q, &layer.gate_up_q, &layer.down_q}) {
      for (const DeviceQuantPart& part : q->parts) fn(part);
    }
  }
  for (const DeviceQuantPart& part : weights.lm_head_q.parts) fn(part);
}

constexpr std::int64_t round_up16(std::int64_t v) {
  return (v + 15) / 16 * 16;
}

// The widest input a projection takes: hidden (q/k/v, gate/up, the head),
// heads * head_dim (o), intermediate (down).
std::int64_t widest_input(const model::ModelSpec& spec) {
  return std::max({static_cast<std::int64_t>(spec.hidden_size),
                   static_cast<std::int64_t>(spec.num_heads) * spec.head_dim,
                   static_cast<std::int64_t>(spec.intermediate_size)});
}

}  // namespace

std::string CudaForward::weight_blocks() const {
  std::string blocks = weights_.quant.summary;
  if (fp8_gemm_.has_value()) blocks += "; wide steps on FP8 GEMMs";
  return blocks;
}

std::size_t CudaForward::fp8_activation_bytes(const model::ModelSpec& spec, std::int32_t max_step) {
  const auto t = static_cast<std::size_t>(max_step);
  return t * static_cast<std::size_t>(round_up16(widest_input(spec))) + t * sizeof(float);
}

bool CudaForward::fp8_gemm_takes(const DeviceQuantPart& part) {
  return part.type == QuantType::kF8_E4M3 && part.scales.scales != nullptr && part.scales.ld == 1;
}

Status CudaForward::setup_fp8_gemm() {
  bool any = false;
  for_each_part(weights_,
                [&any](const DeviceQuantPart& part) { any = any || fp8_gemm_takes(part); });
  if (!any) return Status::ok();
  auto runner = Fp8GemmRunner::create(gemm_.workspace_bytes());
  Status check = runner.ok() ? runner->self_check(gemm_ws_.data(), nullptr) : runner.status();
  if (!check.is_ok()) {
    CELLM_LOG_WARN(
        "cuda: no FP8 GEMM on this GPU ({}); FP8 projections' wide steps dequantize to bf16",
        check.to_string());
    return Status::ok();
  }
  act_fp8_ld_ = round_up16(widest_input(spec_));
  const auto t = static_cast<std::size_t>(max_step_);
  CELLM_ASSIGN_OR_RETURN(
      act_fp8_, DeviceBuffer<std::uint8_t>::allocate(t * static_cast<std::size_t>(act_fp8_ld_)));
  CELLM_ASSIGN_OR_RETURN(act_scales_, DeviceBuffer<float>::allocate(t));
  fp8_gemm_ = std::move(runner).value();
  CELLM_LOG_INFO("cuda: FP8 projections' wide steps run FP8 GEMMs (activations per token)");
  return Status::ok();
}

Status CudaForward::project_wide(const bf16* a, std::int64_t lda, const DeviceQuant& q,
                                 std::int64_t n, std::int64_t k, void* out, DType out_dtype,
                                 std::int32_t m, const bf16* bias, cudaStream_t stream) {
  const std::int64_t elem = out_dtype == DType::kF32 ? sizeof(float) : sizeof(bf16);
  auto* out_bytes = static_cast<std::byte*>(out);
  bool quantized = false;  // a's rows in act_fp8_ for this call
  for (const DeviceQuantPart& part : q.parts) {
    if (fp8_gemm_.has_value() && fp8_gemm_takes(part) && m <= max_step_ && k <= act_fp8_ld_) {
      Status status = Status::ok();
      if (!quantized) {
        QuantizeFp8Params qp;
        qp.a = a;
        qp.lda = lda;
        qp.m = m;
        qp.k = static_cast<std::int32_t>(k);
        qp.out = act_fp8_.data();
        qp.ldo = act_fp8_ld_;
        qp.scales = act_scales_.data();
        qp.pdl = true;
        status = qp.validate();
        if (status.is_ok()) {
          launch_quantize_fp8(qp, stream);
          quantized = true;
        }
      }
      if (status.is_ok()) {
        Fp8GemmArgs g;
        g.a = act_fp8_.data();
        g.a_scales = act_scales_.data();
        g.b = part.blocks;
        g.b_scales = part.scales.scales;
        g.out = out_bytes + part.row0 * elem;
        g.bias = bias != nullptr ? bias + part.row0 : nullptr;
        g.m = m;
        g.n = part.rows;
        g.k = k;
        g.lda = act_fp8_ld_;
        g.ldb = part.row_bytes;
        g.ldc = n;
        g.out_dtype = out_dtype;
        // fast_accum stays off: on an H100 it made m = 512 GEMMs 10-20%
        // faster (BM_WideFp8Gemm: gate/up 90 against 108 us, with the
        // quantization), but the forward's logits have not been checked
        // with it (gpu_quant_test).
        status = g.validate();
        if (status.is_ok()) status = fp8_gemm_->run(g, gemm_ws_.data(), stream);
        if (status.is_ok()) continue;
      }
      // Geometry the FP8 GEMM does not take (validate), or a shape cuBLASLt
      // has no FP8 algorithm for (planned once, so this is not retried per
      // step): the part is dequantized instead. Anything else is an error.
      if (status.code() != StatusCode::kInvalidArgument &&
          status.code() != StatusCode::kNotSupported) {
        return status;
      }
      if (!fp8_fallback_logged_) {
        fp8_fallback_logged_ = true;
        CELLM_LOG_WARN("cuda: an FP8 projection's wide step dequantizes to bf16 instead: {}",
                       status.to_string());
      }
    }
    CELLM_RETURN_IF_ERROR(dequantize_gemm(a, lda, part, n, k, out, out_dtype, m, bias, stream));
  }
  return Status::ok();
}

Status CudaForward::dequantize_gemm(const bf16* a, std::int64_t lda, const DeviceQuantPart& part,
                                    std::int64_t n, std::int64_t k, void* out, DType out_dtype,
                                    std::int32_t m, const bf16* bias, cudaStream_t stream) {
  const std::int64_t elem = out_dtype == DType::kF32 ? sizeof(float) : sizeof(bf16);
  auto* out_bytes = static_cast<std::byte*>(out);
  // Whole multiples of 64 rows a chunk, so every chunk's output starts aligned.
  const std::int64_t chunk_rows = std::max<std::int64_t>(
      64, static_cast<std::int64_t>(kQuantScratchBytes / sizeof(bf16)) / k / 64 * 64);
  for (std::int64_t r0 = 0; r0 < part.rows; r0 += chunk_rows) {
    const std::int64_t rows = std::min(chunk_rows, part.rows - r0);
    DequantParams d;
    d.w = part.blocks + r0 * part.row_bytes;
    d.type = part.type;
    d.rows = rows;
    d.cols = static_cast<std::int32_t>(k);
    d.ldw_bytes = part.row_bytes;
    d.out = quant_scratch_.data();
    d.ldo = k;
    d.scales = part.scales;
    if (d.scales.scales != nullptr) d.scales.scales += r0 * part.scales.ld;
    CELLM_RETURN_IF_ERROR(d.validate());
    launch_dequantize(d, stream);
    GemmArgs args;
    args.a = a;
    args.b = quant_scratch_.data();
    args.out = out_bytes + (part.row0 + r0) * elem;
    args.bias = bias != nullptr ? bias + part.row0 + r0 : nullptr;
    args.m = m;
    args.n = rows;
    args.k = k;
    args.lda = lda;
    args.ldb = k;
    args.ldc = n;
    args.out_dtype = out_dtype;
    CELLM_RETURN_IF_ERROR(gemm_.run(args, gemm_ws_.data(), stream));
  }
  return Status::ok();
}

}  // namespace cellm::cuda
