// The kernel knobs: defaults are the established kernels, each variable is
// read and checked, and a bad value is an error naming the variable (the
// environment path falls back to the defaults). Runs without a GPU.
#include "backend/cuda/kernels/kernel_choice.h"

#include <map>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "cellm/status.h"

namespace cellm::cuda {
namespace {

EnvLookup lookup_from(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

TEST(KernelChoiceTest, DefaultsAreTheMeasuredFastestKernels) {
  auto choice = parse_kernel_choice(lookup_from({}));
  ASSERT_TRUE(choice.ok());
  EXPECT_EQ(choice->decode_attention, DecodeAttention::kV2);
  EXPECT_EQ(choice->prefill_attention, PrefillAttention::kV2);
  EXPECT_TRUE(choice->fused_rope);
  EXPECT_TRUE(choice->gemv);
  EXPECT_EQ(choice->gemv_max_rows, 1);
  EXPECT_TRUE(choice->gemv_single_rows);
  EXPECT_TRUE(choice->gemv_stage_inputs);
  EXPECT_EQ(choice->gemv_mma, kMmaQkv | kMmaO | kMmaGateUp | kMmaDown);
  EXPECT_FALSE(choice->decode_stream);
  EXPECT_TRUE(choice->pdl);
  EXPECT_EQ(choice->decode_split_target, 2);
  EXPECT_TRUE(choice->decode_split_by_step);
  EXPECT_TRUE(choice->decode_sm_fit);
  EXPECT_TRUE(choice->decode_cluster_fit);
  EXPECT_TRUE(choice->decode_early_keys);
  EXPECT_TRUE(choice->decode_spread);
  EXPECT_TRUE(choice->decode_early_next);
  EXPECT_TRUE(choice->decode_push_merge);
  EXPECT_TRUE(choice->decode_pack_wide);
  EXPECT_FALSE(choice->decode_fused_o);
  EXPECT_TRUE(choice->gemm_autotune);
  EXPECT_EQ(choice->gemm_candidates, 8);
  EXPECT_EQ(*choice, KernelChoice{});
}

TEST(KernelChoiceTest, ReadsEveryVariable) {
  auto choice = parse_kernel_choice(lookup_from({{"CELLM_DECODE_ATTN", "v1"},
                                                 {"CELLM_PREFILL_ATTN", "v1"},
                                                 {"CELLM_DECODE_SPLIT_KEYS", "128"},
                                                 {"CELLM_DECODE_SPLIT_TARGET", "6"},
                                                 {"CELLM_DECODE_CLUSTER", "4"},
                                                 {"CELLM_DECODE_EARLY_KEYS", "0"},
                                                 {"CELLM_DECODE_SPLIT_SPAN", "table"},
                                                 {"CELLM_DECODE_SM_FIT", "0"},
                                                 {"CELLM_DECODE_CLUSTER_FIT", "0"},
                                                 {"CELLM_DECODE_SPREAD", "0"},
                                                 {"CELLM_DECODE_EARLY_NEXT", "0"},
                                                 {"CELLM_DECODE_PUSH_MERGE", "0"},
                                                 {"CELLM_DECODE_PACK_WIDE", "0"},
                                                 {"CELLM_DECODE_FUSED_O", "1"},
                                                 {"CELLM_FUSED_ROPE", "0"},
                                                 {"CELLM_GEMV", "off"},
                                                 {"CELLM_GEMV_MAX_ROWS", "8"},
                                                 {"CELLM_GEMV_SINGLE_ROWS", "0"},
                                                 {"CELLM_GEMV_STAGE_INPUTS", "0"},
                                                 {"CELLM_GEMV_MMA", "1"},
                                                 {"CELLM_DECODE_STREAM", "1"},
                                                 {"CELLM_PDL", "0"},
                                                 {"CELLM_GEMM_AUTOTUNE", "0"},
                                                 {"CELLM_GEMM_CANDIDATES", "24"},
                                                 {"CELLM_SPLIT_ARGMAX", "0"},
                                                 {"CELLM_HEAD_ARGMAX", "0"},
                                                 {"CELLM_SAMPLE_CLUSTER", "0"},
                                                 {"CELLM_SAMPLE_CANDIDATES", "0"}}));
  ASSERT_TRUE(choice.ok()) << choice.status().to_string();
  EXPECT_EQ(choice->decode_attention, DecodeAttention::kV1);
  EXPECT_EQ(choice->decode_split_keys, 128);
  EXPECT_EQ(choice->decode_split_target, 6);
  EXPECT_EQ(choice->decode_cluster, 4);
  EXPECT_FALSE(choice->decode_split_by_step);
  EXPECT_FALSE(choice->decode_sm_fit);
  EXPECT_FALSE(choice->decode_cluster_fit);
  EXPECT_FALSE(choice->decode_early_keys);
  EXPECT_FALSE(choice->decode_spread);
  EXPECT_FALSE(choice->decode_early_next);
  EXPECT_FALSE(choice->decode_push_merge);
  EXPECT_FALSE(choice->decode_pack_wide);
  EXPECT_TRUE(choice->decode_fused_o);
  EXPECT_FALSE(choice->fused_rope);
  EXPECT_FALSE(choice->gemv);
  EXPECT_EQ(choice->gemv_max_rows, 8);
  EXPECT_FALSE(choice->gemv_single_rows);
  EXPECT_FALSE(choice->gemv_stage_inputs);
  EXPECT_EQ(choice->gemv_mma, kMmaAll);
  EXPECT_TRUE(choice->decode_stream);
  EXPECT_FALSE(choice->pdl);
  EXPECT_FALSE(choice->gemm_autotune);
  EXPECT_EQ(choice->gemm_candidates, 24);
  EXPECT_FALSE(choice->split_argmax);
  EXPECT_FALSE(choice->head_argmax);
  EXPECT_FALSE(choice->cluster_sampler);
  EXPECT_FALSE(choice->sample_candidates);
  EXPECT_EQ(choice->prefill_attention, PrefillAttention::kV1);
  EXPECT_EQ(describe(*choice),
            "decode=v1 prefill=v1 split_keys=128 split_target=6 cluster=4 split_span=table "
            "sm_fit=0 cluster_fit=0 early_keys=0 spread=0 "
            "early_next=0 push_merge=0 pack_wide=0 fused_o=1 "
            "fused_rope=0 gemv=0 gemv_max_rows=8 single_rows=0 stage_inputs=0 mma=1 stream=1 "
            "pdl=0 autotune=0 candidates=24 "
            "split_argmax=0 head_argmax=0 cluster_sampler=0 sample_candidates=0");
}

TEST(KernelChoiceTest, BadValuesNameTheVariable) {
  const std::map<std::string, std::string> bad[] = {
      {{"CELLM_DECODE_ATTN", "v3"}},
      {{"CELLM_PREFILL_ATTN", "fast"}},
      {{"CELLM_FUSED_ROPE", "yes please"}},
      {{"CELLM_DECODE_SPLIT_SPAN", "longest"}},
      {{"CELLM_GEMV", "2"}},
      {{"CELLM_GEMM_AUTOTUNE", "yes"}},
      {{"CELLM_GEMM_CANDIDATES", "0"}},
      {{"CELLM_GEMM_CANDIDATES", "65"}},
      {{"CELLM_GEMV_MAX_ROWS", "9"}},
      {{"CELLM_PDL", "2"}},
      {{"CELLM_SPLIT_ARGMAX", "2"}},
      {{"CELLM_HEAD_ARGMAX", "yes"}},
      {{"CELLM_SAMPLE_CLUSTER", "yes"}},
      {{"CELLM_SAMPLE_CANDIDATES", "some"}},
      {{"CELLM_DECODE_SPLIT_TARGET", "0"}},
      {{"CELLM_DECODE_SPLIT_TARGET", "33"}},
      {{"CELLM_GEMV_MAX_ROWS", "4x"}},
      {{"CELLM_DECODE_SPLIT_KEYS", "0"}},
      {{"CELLM_DECODE_SPLIT_KEYS", ""}},
      {{"CELLM_DECODE_CLUSTER", "3"}},
      {{"CELLM_DECODE_CLUSTER", "16"}},
      {{"CELLM_DECODE_STREAM", "persistent"}},
      {{"CELLM_GEMV_SINGLE_ROWS", "2"}},
      {{"CELLM_GEMV_STAGE_INPUTS", "smem"}},
      {{"CELLM_GEMV_MMA", "tensor"}},
      {{"CELLM_GEMV_MMA", "qkv,head"}},
      {{"CELLM_GEMV_MMA", "o,"}},
      {{"CELLM_DECODE_EARLY_KEYS", "later"}},
      {{"CELLM_DECODE_FUSED_O", "2"}},
      {{"CELLM_DECODE_SPREAD", "wide"}},
      {{"CELLM_DECODE_EARLY_NEXT", "soon"}},
      {{"CELLM_DECODE_PUSH_MERGE", "push"}},
      {{"CELLM_DECODE_PACK_WIDE", "3"}},
  };
  for (const auto& values : bad) {
    auto choice = parse_kernel_choice(lookup_from(values));
    ASSERT_FALSE(choice.ok()) << values.begin()->first << "=" << values.begin()->second;
    EXPECT_EQ(choice.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(choice.status().message().find(values.begin()->first), std::string::npos)
        << choice.status().to_string();
  }
}

TEST(KernelChoiceTest, FlagsTakeZeroAndOneSpellings) {
  for (const char* off : {"0", "off", "false"}) {
    auto choice = parse_kernel_choice(lookup_from({{"CELLM_FUSED_ROPE", off}}));
    ASSERT_TRUE(choice.ok()) << off;
    EXPECT_FALSE(choice->fused_rope) << off;  // the default is on
  }
  for (const char* on : {"1", "on", "true"}) {
    auto choice = parse_kernel_choice(lookup_from({{"CELLM_GEMV", on}}));
    ASSERT_TRUE(choice.ok()) << on << ": " << choice.status().to_string();
    EXPECT_TRUE(choice->gemv) << on;  // the default is off
  }
}

// The fused o projection is off by default (measured slower), the spread,
// the early launch of the next kernel, the push merge, packed wide heads
// and the GEMV's staged inputs on; each knob moves only itself.
TEST(KernelChoiceTest, EachDecodeAndGemvKnobMovesOnlyItself) {
  // `name=value` parses to the defaults with `set` applied, and its
  // description holds `shown`.
  const auto expect_only = [](const char* name, const char* value, auto set, const char* shown) {
    auto choice = parse_kernel_choice(lookup_from({{name, value}}));
    ASSERT_TRUE(choice.ok()) << name << "=" << value << ": " << choice.status().to_string();
    KernelChoice expected;
    set(expected);
    EXPECT_EQ(*choice, expected) << name << "=" << value;
    EXPECT_NE(describe(*choice).find(shown), std::string::npos) << describe(*choice);
  };
  expect_only(
      "CELLM_DECODE_FUSED_O", "1", [](KernelChoice& c) { c.decode_fused_o = true; },
      " early_keys=1 spread=1 early_next=1 push_merge=1 pack_wide=1 fused_o=1 "
      "fused_rope=1 ");
  expect_only(
      "CELLM_DECODE_FUSED_O", "0", [](KernelChoice&) {}, " fused_o=0 ");
  expect_only(
      "CELLM_DECODE_SPLIT_SPAN", "table", [](KernelChoice& c) { c.decode_split_by_step = false; },
      " cluster=8 split_span=table sm_fit=1 cluster_fit=1 early_keys=1 ");
  expect_only(
      "CELLM_DECODE_SM_FIT", "0", [](KernelChoice& c) { c.decode_sm_fit = false; },
      " split_span=step sm_fit=0 cluster_fit=1 early_keys=1 ");
  expect_only(
      "CELLM_DECODE_CLUSTER_FIT", "0", [](KernelChoice& c) { c.decode_cluster_fit = false; },
      " sm_fit=1 cluster_fit=0 early_keys=1 ");
  expect_only(
      "CELLM_DECODE_SPREAD", "0", [](KernelChoice& c) { c.decode_spread = false; },
      " spread=0 early_next=1 push_merge=1 pack_wide=1 fused_o=0 ");
  expect_only(
      "CELLM_DECODE_EARLY_NEXT", "off", [](KernelChoice& c) { c.decode_early_next = false; },
      " spread=1 early_next=0 push_merge=1 pack_wide=1 fused_o=0 ");
  expect_only(
      "CELLM_DECODE_PUSH_MERGE", "0", [](KernelChoice& c) { c.decode_push_merge = false; },
      " early_next=1 push_merge=0 pack_wide=1 fused_o=0 ");
  expect_only(
      "CELLM_DECODE_PACK_WIDE", "0", [](KernelChoice& c) { c.decode_pack_wide = false; },
      " push_merge=1 pack_wide=0 fused_o=0 ");
  expect_only(
      "CELLM_GEMV_STAGE_INPUTS", "0", [](KernelChoice& c) { c.gemv_stage_inputs = false; },
      " single_rows=1 stage_inputs=0 mma=qkv,o,gate_up,down stream=0 ");
  expect_only(
      "CELLM_GEMV_MMA", "1", [](KernelChoice& c) { c.gemv_mma = kMmaAll; },
      " stage_inputs=1 mma=1 stream=0 ");
  expect_only(
      "CELLM_GEMV_MMA", "0", [](KernelChoice& c) { c.gemv_mma = 0; },
      " stage_inputs=1 mma=0 stream=0 ");
  expect_only(
      "CELLM_GEMV_MMA", "down,o", [](KernelChoice& c) { c.gemv_mma = kMmaO | kMmaDown; },
      " stage_inputs=1 mma=o,down stream=0 ");
  expect_only(
      "CELLM_GEMV_MMA_WARPS", "8", [](KernelChoice& c) { c.gemv_mma_warps = 8; },
      " mma=qkv,o,gate_up,down/8 stream=0 ");
  EXPECT_FALSE(parse_kernel_choice(lookup_from({{"CELLM_GEMV_MMA_WARPS", "4"}})).ok());
}

}  // namespace
}  // namespace cellm::cuda
