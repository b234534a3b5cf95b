#include "backend/cuda/kernels/kernel_choice.h"

#include <charconv>

#include <fmt/format.h>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/attention.cuh"
#include "core/env.h"
#include "core/log.h"

namespace cellm::cuda {
namespace {

Result<bool> parse_flag(const char* name, const std::string& value) {
  if (value == "1" || value == "on" || value == "true") return true;
  if (value == "0" || value == "off" || value == "false") return false;
  return invalid_argument("{}='{}': expected 0 or 1", name, value);
}

// True for "v2", false for "v1".
Result<bool> parse_version(const char* name, const std::string& value) {
  if (value == "v1" || value == "v2") return value == "v2";
  return invalid_argument("{}='{}': expected v1 or v2", name, value);
}

Result<std::int32_t> parse_int(const char* name, const std::string& value, std::int32_t lo,
                               std::int32_t hi) {
  std::int32_t out = 0;
  const char* end = value.data() + value.size();
  const auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (ec != std::errc() || ptr != end || out < lo || out > hi) {
    return invalid_argument("{}='{}': expected an integer in [{}, {}]", name, value, lo, hi);
  }
  return out;
}

constexpr std::pair<const char*, GemvMma> kMmaNames[] = {{"qkv", kMmaQkv},
                                                         {"o", kMmaO},
                                                         {"gate_up", kMmaGateUp},
                                                         {"down", kMmaDown},
                                                         {"lm_head", kMmaHead}};

// A flag (none or all) or a comma list of projection names.
Result<std::uint32_t> parse_mma(const char* name, const std::string& value) {
  if (auto flag = parse_flag(name, value); flag.ok()) return *flag ? kMmaAll : 0u;
  std::uint32_t bits = 0;
  std::size_t at = 0;
  while (at <= value.size()) {
    const std::size_t comma = std::min(value.find(',', at), value.size());
    const std::string item = value.substr(at, comma - at);
    bool known = false;
    for (const auto& [label, bit] : kMmaNames) {
      if (item == label) {
        bits |= bit;
        known = true;
      }
    }
    if (!known) {
      return invalid_argument(
          "{}='{}': expected 0, 1 or a comma list of qkv, o, gate_up, down and lm_head", name,
          value);
    }
    at = comma + 1;
  }
  return bits;
}

std::string describe_mma(std::uint32_t bits) {
  if (bits == 0) return "0";
  if (bits == kMmaAll) return "1";
  std::string out;
  for (const auto& [label, bit] : kMmaNames) {
    if ((bits & bit) != 0) out += (out.empty() ? "" : ",") + std::string(label);
  }
  return out;
}

}  // namespace

// kernel_choice.h stays free of CUDA headers (the app includes it), so its
// default candidate count is checked against gemm.h's here.
static_assert(KernelChoice{}.gemm_candidates == kDefaultAutotuneCandidates);

Result<KernelChoice> parse_kernel_choice(const EnvLookup& lookup) {
  KernelChoice choice;
  if (auto v = lookup("CELLM_DECODE_ATTN")) {
    CELLM_ASSIGN_OR_RETURN(const bool v2, parse_version("CELLM_DECODE_ATTN", *v));
    choice.decode_attention = v2 ? DecodeAttention::kV2 : DecodeAttention::kV1;
  }
  if (auto v = lookup("CELLM_PREFILL_ATTN")) {
    CELLM_ASSIGN_OR_RETURN(const bool v2, parse_version("CELLM_PREFILL_ATTN", *v));
    choice.prefill_attention = v2 ? PrefillAttention::kV2 : PrefillAttention::kV1;
  }
  if (auto v = lookup("CELLM_DECODE_SPLIT_KEYS")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_split_keys,
                           parse_int("CELLM_DECODE_SPLIT_KEYS", *v, 1, 1 << 20));
  }
  if (auto v = lookup("CELLM_DECODE_SPLIT_TARGET")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_split_target,
                           parse_int("CELLM_DECODE_SPLIT_TARGET", *v, 1, 32));
  }
  if (auto v = lookup("CELLM_DECODE_CLUSTER")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_cluster,
                           parse_int("CELLM_DECODE_CLUSTER", *v, 1, kAttentionMaxCluster));
    if (!valid_attention_cluster(choice.decode_cluster)) {
      return invalid_argument("CELLM_DECODE_CLUSTER='{}': expected 1, 2, 4 or 8", *v);
    }
  }
  if (auto v = lookup("CELLM_DECODE_SPLIT_SPAN")) {
    if (*v != "step" && *v != "table") {
      return invalid_argument("CELLM_DECODE_SPLIT_SPAN='{}': expected step or table", *v);
    }
    choice.decode_split_by_step = *v == "step";
  }
  if (auto v = lookup("CELLM_DECODE_SM_FIT")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_sm_fit, parse_flag("CELLM_DECODE_SM_FIT", *v));
  }
  if (auto v = lookup("CELLM_DECODE_CLUSTER_FIT")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_cluster_fit, parse_flag("CELLM_DECODE_CLUSTER_FIT", *v));
  }
  if (auto v = lookup("CELLM_DECODE_EARLY_KEYS")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_early_keys, parse_flag("CELLM_DECODE_EARLY_KEYS", *v));
  }
  if (auto v = lookup("CELLM_DECODE_SPREAD")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_spread, parse_flag("CELLM_DECODE_SPREAD", *v));
  }
  if (auto v = lookup("CELLM_DECODE_EARLY_NEXT")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_early_next, parse_flag("CELLM_DECODE_EARLY_NEXT", *v));
  }
  if (auto v = lookup("CELLM_DECODE_PUSH_MERGE")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_push_merge, parse_flag("CELLM_DECODE_PUSH_MERGE", *v));
  }
  if (auto v = lookup("CELLM_DECODE_PACK_WIDE")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_pack_wide, parse_flag("CELLM_DECODE_PACK_WIDE", *v));
  }
  if (auto v = lookup("CELLM_DECODE_FUSED_O")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_fused_o, parse_flag("CELLM_DECODE_FUSED_O", *v));
  }
  if (auto v = lookup("CELLM_FUSED_ROPE")) {
    CELLM_ASSIGN_OR_RETURN(choice.fused_rope, parse_flag("CELLM_FUSED_ROPE", *v));
  }
  if (auto v = lookup("CELLM_GEMV")) {
    CELLM_ASSIGN_OR_RETURN(choice.gemv, parse_flag("CELLM_GEMV", *v));
  }
  if (auto v = lookup("CELLM_GEMV_MAX_ROWS")) {
    CELLM_ASSIGN_OR_RETURN(choice.gemv_max_rows, parse_int("CELLM_GEMV_MAX_ROWS", *v, 1, 8));
  }
  if (auto v = lookup("CELLM_GEMV_SINGLE_ROWS")) {
    CELLM_ASSIGN_OR_RETURN(choice.gemv_single_rows, parse_flag("CELLM_GEMV_SINGLE_ROWS", *v));
  }
  if (auto v = lookup("CELLM_GEMV_STAGE_INPUTS")) {
    CELLM_ASSIGN_OR_RETURN(choice.gemv_stage_inputs, parse_flag("CELLM_GEMV_STAGE_INPUTS", *v));
  }
  if (auto v = lookup("CELLM_GEMV_MMA")) {
    CELLM_ASSIGN_OR_RETURN(choice.gemv_mma, parse_mma("CELLM_GEMV_MMA", *v));
  }
  if (auto v = lookup("CELLM_GEMV_MMA_WARPS")) {
    CELLM_ASSIGN_OR_RETURN(choice.gemv_mma_warps, parse_int("CELLM_GEMV_MMA_WARPS", *v, 0, 16));
    if (choice.gemv_mma_warps != 0 && choice.gemv_mma_warps != 8 && choice.gemv_mma_warps != 16) {
      return invalid_argument("CELLM_GEMV_MMA_WARPS is {}; use 0 (the kernel chooses), 8 or 16",
                              choice.gemv_mma_warps);
    }
  }
  if (auto v = lookup("CELLM_DECODE_STREAM")) {
    CELLM_ASSIGN_OR_RETURN(choice.decode_stream, parse_flag("CELLM_DECODE_STREAM", *v));
  }
  if (auto v = lookup("CELLM_PDL")) {
    CELLM_ASSIGN_OR_RETURN(choice.pdl, parse_flag("CELLM_PDL", *v));
  }
  if (auto v = lookup("CELLM_SPLIT_ARGMAX")) {
    CELLM_ASSIGN_OR_RETURN(choice.split_argmax, parse_flag("CELLM_SPLIT_ARGMAX", *v));
  }
  if (auto v = lookup("CELLM_HEAD_ARGMAX")) {
    CELLM_ASSIGN_OR_RETURN(choice.head_argmax, parse_flag("CELLM_HEAD_ARGMAX", *v));
  }
  if (auto v = lookup("CELLM_SAMPLE_CLUSTER")) {
    CELLM_ASSIGN_OR_RETURN(choice.cluster_sampler, parse_flag("CELLM_SAMPLE_CLUSTER", *v));
  }
  if (auto v = lookup("CELLM_SAMPLE_CANDIDATES")) {
    CELLM_ASSIGN_OR_RETURN(choice.sample_candidates, parse_flag("CELLM_SAMPLE_CANDIDATES", *v));
  }
  if (auto v = lookup("CELLM_GEMM_AUTOTUNE")) {
    CELLM_ASSIGN_OR_RETURN(choice.gemm_autotune, parse_flag("CELLM_GEMM_AUTOTUNE", *v));
  }
  if (auto v = lookup("CELLM_GEMM_CANDIDATES")) {
    CELLM_ASSIGN_OR_RETURN(choice.gemm_candidates,
                           parse_int("CELLM_GEMM_CANDIDATES", *v, 1, kMaxAutotuneCandidates));
  }
  return choice;
}

KernelChoice kernel_choice_from_env() {
  Result<KernelChoice> choice =
      parse_kernel_choice([](const char* name) { return env_string(name); });
  if (!choice.ok()) {
    CELLM_LOG_ERROR("cuda kernel knobs: {}; using the default kernels",
                    choice.status().to_string());
    return KernelChoice{};
  }
  if (*choice != KernelChoice{}) {
    CELLM_LOG_INFO("cuda kernel knobs: {}", describe(*choice));
  }
  return *choice;
}

std::string describe(const KernelChoice& choice) {
  return fmt::format(
      "decode={} prefill={} split_keys={} split_target={} cluster={} split_span={} "
      "sm_fit={} cluster_fit={} "
      "early_keys={} spread={} "
      "early_next={} push_merge={} pack_wide={} fused_o={} "
      "fused_rope={} gemv={} gemv_max_rows={} single_rows={} stage_inputs={} mma={} stream={} "
      "pdl={} "
      "autotune={} candidates={} "
      "split_argmax={} head_argmax={} cluster_sampler={} sample_candidates={}",
      choice.decode_attention == DecodeAttention::kV2 ? "v2" : "v1",
      choice.prefill_attention == PrefillAttention::kV2 ? "v2" : "v1", choice.decode_split_keys,
      choice.decode_split_target, choice.decode_cluster,
      choice.decode_split_by_step ? "step" : "table", choice.decode_sm_fit ? 1 : 0,
      choice.decode_cluster_fit ? 1 : 0, choice.decode_early_keys ? 1 : 0,
      choice.decode_spread ? 1 : 0, choice.decode_early_next ? 1 : 0,
      choice.decode_push_merge ? 1 : 0, choice.decode_pack_wide ? 1 : 0,
      choice.decode_fused_o ? 1 : 0, choice.fused_rope ? 1 : 0, choice.gemv ? 1 : 0,
      choice.gemv_max_rows, choice.gemv_single_rows ? 1 : 0, choice.gemv_stage_inputs ? 1 : 0,
      describe_mma(choice.gemv_mma) +
          (choice.gemv_mma_warps != 0 ? "/" + std::to_string(choice.gemv_mma_warps) : ""),
      choice.decode_stream ? 1 : 0, choice.pdl ? 1 : 0, choice.gemm_autotune ? 1 : 0,
      choice.gemm_candidates, choice.split_argmax ? 1 : 0, choice.head_argmax ? 1 : 0,
      choice.cluster_sampler ? 1 : 0, choice.sample_candidates ? 1 : 0);
}

}  // namespace cellm::cuda
