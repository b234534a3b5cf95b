// Decode v2 and prefill v2 over FP8 (E4M3) K/V pools. The pools hold the
// codes format/fp8.h's encoder gives for a bf16 scenario's values; the
// kernels must attend exactly the decoded values: against the float64
// reference over the decoded pools at the bf16 kernels' own tolerance, and
// against the bf16 kernels run over the decoded pools to far below it (the
// same bf16 tiles reach the same mma in the same order). Against the
// reference over the original bf16 pools the tolerance is E4M3's (stated
// below). Also: the launch settings the forward uses (clusters, the push
// merge, one block an SM), the shared memory of the FP8 layouts, and the
// refusal of head dims that are not multiples of 16 (without a GPU).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cuda/kernels/attention.cuh"
#include "cellm/status.h"
#include "decode_cases.h"
#include "decode_reference.h"
#include "gpu_test_util.h"
#include "kv_fp8_pools.h"

namespace cellm::cuda {
namespace {

using testing::as_double;
using testing::DecodeCase;
using testing::DecodeDevice;
using testing::DecodeScenario;
using testing::DeviceArray;
using testing::kAttentionNmse;
using testing::nmse;
using testing::to_float;

// FP8 against bf16 launches over the same decoded values: identical tiles and
// sums, so anything above rounding noise is a wrong tile.
constexpr double kSameTilesNmse = 1e-6;
// FP8 pools against the reference over the original bf16 pools. E4M3 keeps 3
// mantissa bits (a relative error up to 2^-4 a value); a host simulation of
// these scenarios' distributions (K, V uniform in [-1, 1], q in [-3, 3]) gave
// an NMSE of 0.5e-3 to 1.2e-3 for head dims 16 to 256 and 1 to 8192 keys.
constexpr double kFp8Nmse = 5e-3;

// A scenario and its FP8 form: the codes of its pools, and the scenario
// again over the decoded values (what the FP8 kernels must attend).
struct Fp8Scenario {
  DecodeScenario bf16;
  DecodeScenario decoded;
  std::vector<fp8_e4m3> k_codes, v_codes;
};

Fp8Scenario make_fp8(DecodeScenario s) {
  Fp8Scenario f;
  f.k_codes = testing::encode_e4m3(s.k_pool);
  f.v_codes = testing::encode_e4m3(s.v_pool);
  f.decoded = s;
  f.decoded.k_pool = testing::decode_e4m3(f.k_codes);
  f.decoded.v_pool = testing::decode_e4m3(f.v_codes);
  f.bf16 = std::move(s);
  return f;
}

// A decode scenario plus a prefill chunk: sequence 0's last `chunk` positions
// as consecutive rows (the prefill kernel's tiles share them).
DecodeScenario with_chunk(DecodeScenario s, const DecodeCase& c, int chunk) {
  std::mt19937 rng(c.seed + 1000);
  const int len0 = c.max_len;  // make_decode_scenario gives sequence 0 max_len keys
  for (int i = std::max(0, len0 - chunk); i < len0; ++i) {
    s.slots.push_back(0);
    s.positions.push_back(i);
  }
  const auto extra = testing::random_bf16(
      (s.slots.size() * static_cast<std::size_t>(s.q_stride)) - s.q.size(), rng, -3.0f, 3.0f);
  s.q.insert(s.q.end(), extra.begin(), extra.end());
  return s;
}

// The FP8 launch and the bf16 launch over the decoded pools, on one device
// scenario (the counters and workspace are left as they were found).
struct Outputs {
  std::vector<float> fp8;
  std::vector<float> bf16_decoded;
};

template <typename Launch>
Outputs run_both(const DecodeCase& c, const Fp8Scenario& f, float scale, Launch launch,
                 AttentionParams (*adjust)(AttentionParams) = nullptr) {
  DecodeDevice d(c, f.decoded);
  const DeviceArray<fp8_e4m3> k8(f.k_codes), v8(f.v_codes);
  AttentionParams p = d.params(c, f.decoded, scale);
  if (adjust != nullptr) p = adjust(p);
  Outputs o;
  d.out.poison();
  launch(p);
  o.bf16_decoded = to_float(d.out.download());
  p.k_pool = k8.data();
  p.v_pool = v8.data();
  p.kv_dtype = KvDtype::kFp8;
  EXPECT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
  d.out.poison();
  launch(p);
  o.fp8 = to_float(d.out.download());
  for (const std::int32_t counter : d.counters.download()) EXPECT_EQ(counter, 0);
  return o;
}

void expect_fp8_outputs(const DecodeCase& c, const Fp8Scenario& f, float scale, const Outputs& o,
                        const std::string& what) {
  EXPECT_LT(nmse(o.fp8, as_double(o.bf16_decoded)), kSameTilesNmse)
      << what << ": FP8 pools against bf16 pools of the decoded values";
  EXPECT_LT(nmse(o.fp8, testing::decode_reference(c, f.decoded, scale)), kAttentionNmse)
      << what << ": against the float64 reference over the decoded values";
  EXPECT_LT(nmse(o.fp8, testing::decode_reference(c, f.bf16, scale)), kFp8Nmse)
      << what << ": against the float64 reference over the bf16 pools";
  testing::expect_empty_rows_zero(c, f.bf16, o.fp8, what);
}

float scale_of(const DecodeCase& c) {
  return 1.0f / std::sqrt(static_cast<float>(c.head_dim));
}

class AttentionFp8Test : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(AttentionFp8Test, DecodeAttendsTheDecodedValues) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c = GetParam();
  const Fp8Scenario f = make_fp8(testing::make_decode_scenario(c));
  const Outputs o = run_both(
      c, f, scale_of(c), [](const AttentionParams& p) { launch_attention_decode_v2(p, nullptr); });
  expect_fp8_outputs(c, f, scale_of(c), o, "decode");
}

// As CudaForward launches it: clusters of up to 8 splits, the push merge
// where it applies, one block an SM, programmatic launch.
TEST_P(AttentionFp8Test, DecodeWithTheForwardsLaunchSettings) {
  CELLM_REQUIRE_GPU();
  DecodeCase c = GetParam();
  c.splits = 8;
  const Fp8Scenario f = make_fp8(testing::make_decode_scenario(c));
  const Outputs o = run_both(
      c, f, scale_of(c), [](const AttentionParams& p) { launch_attention_decode_v2(p, nullptr); },
      [](AttentionParams p) {
        p.cluster = 8;
        p.spread = true;
        p.early_next = true;
        p.push_merge = true;
        p.pack_wide = PackWide::kWhereItSavesAWave;
        p.pdl = true;
        return p;
      });
  expect_fp8_outputs(c, f, scale_of(c), o, "decode, forward's settings");
}

TEST_P(AttentionFp8Test, PrefillAttendsTheDecodedValues) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c = GetParam();
  const Fp8Scenario f =
      make_fp8(with_chunk(testing::make_decode_scenario(c), c, std::min(c.max_len, 70)));
  const Outputs o = run_both(
      c, f, scale_of(c), [](const AttentionParams& p) { launch_attention_prefill_v2(p, nullptr); });
  expect_fp8_outputs(c, f, scale_of(c), o, "prefill");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionFp8Test,
                         ::testing::ValuesIn(testing::model_decode_cases(
                             41,
                             {
                                 // Group 4 at head dim 128, contexts 1..2048, the awkward rows.
                                 DecodeCase{8, 2, 128, 6, 1, 2048, 0, 0.0f, 0, 256, 47},
                                 // Head dim 48: the 64 bucket with its last 16 columns unused.
                                 DecodeCase{8, 2, 48, 5, 1, 300, 0, 0.0f, 4, 64, 48},
                             })),
                         [](const auto& info) { return testing::decode_case_name(info.param); });

// The FP8 layouts never ask for more shared memory than the bf16 ones they
// replace (half-size stages and one widened tile against full stages), and
// fit a Hopper block.
TEST(AttentionFp8LayoutTest, SharedMemoryAtMostTheBf16Layouts) {
  for (const int hd : {16, 64, 128, 256}) {
    const std::size_t decode8 = attention_decode_v2_smem_bytes(hd, KvDtype::kFp8);
    const std::size_t prefill8 = attention_prefill_v2_smem_bytes(hd, KvDtype::kFp8);
    EXPECT_GT(decode8, 0u) << hd;
    EXPECT_GT(prefill8, 0u) << hd;
    EXPECT_LE(decode8, attention_decode_v2_smem_bytes(hd)) << hd;
    EXPECT_LE(prefill8, attention_prefill_v2_smem_bytes(hd)) << hd;
    EXPECT_LE(std::max(decode8, prefill8), 227u * 1024u) << hd;
  }
}

TEST(AttentionFp8ValidateTest, RefusesHeadDimsNotAMultipleOf16) {
  AttentionParams p = testing::unlaunched_decode_params();
  p.kv_dtype = KvDtype::kFp8;
  ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
  p.head_dim = 40;
  p.q_stride = p.out_stride = 8 * 40;
  const Status fp8 = p.validate_decode_v2();
  EXPECT_EQ(fp8.code(), StatusCode::kNotSupported) << fp8.to_string();
  EXPECT_NE(fp8.to_string().find("16"), std::string::npos) << fp8.to_string();
  p.kv_dtype = KvDtype::kBF16;
  EXPECT_TRUE(p.validate_decode_v2().is_ok()) << "bf16 pools take multiples of 8";
}

}  // namespace
}  // namespace cellm::cuda
