// The decode GEMV against a float64 product and against cuBLASLt on the same
// operands: rows 1..8 (every compiled row bucket and the rows between), k
// tails that are not multiples of a warp step, n not a multiple of the block's
// columns, column-slice activations (lda > k), bias, f32 output, and the
// projection shapes of the real models. The fused prologue/epilogues are
// checked against a float64 reference that repeats the kernel's bf16
// roundings (the epilogues'; the norm is applied in float, unrounded), with
// PDL chains, determinism and out-of-range stores.
// Refusals run without a GPU.
#include "backend/cuda/kernels/gemv.cuh"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "gemv_reference.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::bf16_round;
using testing::DeviceArray;
using testing::from_bf16;
using testing::gated;
using testing::HostGemv;
using testing::kBf16Nmse;
using testing::kNormF32Nmse;
using testing::mismatch_fraction;
using testing::nmse;
using testing::random_bf16;
using testing::reference;
using testing::RefVariant;
using testing::to_bf16;
using testing::to_float;

struct GemvCase {
  int m, n, k;
  bool f32_out;
  bool bias;
};

class GemvTest : public ::testing::TestWithParam<GemvCase> {};

TEST_P(GemvTest, MatchesReferenceAndCublasLt) {
  CELLM_REQUIRE_GPU();
  const GemvCase c = GetParam();
  std::mt19937 rng(c.m * 131 + c.n * 7 + c.k);
  const int lda = c.k + 16;  // a column slice of a wider buffer
  const auto a = random_bf16(static_cast<std::size_t>(c.m) * lda, rng);
  const auto w = random_bf16(static_cast<std::size_t>(c.n) * c.k, rng, -0.05f, 0.05f);
  const auto bias = random_bf16(c.n, rng);
  DeviceArray<bf16> da(a), dw(w), dbias(bias);
  DeviceArray<bf16> out16(static_cast<std::size_t>(c.m) * c.n);
  DeviceArray<float> out32(static_cast<std::size_t>(c.m) * c.n);
  DeviceArray<bf16> lt16(static_cast<std::size_t>(c.m) * c.n);
  DeviceArray<float> lt32(static_cast<std::size_t>(c.m) * c.n);
  out16.poison();
  out32.poison();

  GemvParams p;
  p.a = da.data();
  p.w = dw.data();
  p.bias = c.bias ? dbias.data() : nullptr;
  p.out = c.f32_out ? static_cast<void*>(out32.data()) : out16.data();
  p.out_f32 = c.f32_out;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.lda = lda;
  p.ldw = c.k;
  p.ldc = c.n;
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  launch_gemv(p, nullptr);
  const auto got = c.f32_out ? out32.download() : to_float(out16.download());

  const auto af = to_float(a);
  const auto wf = to_float(w);
  const auto biasf = to_float(bias);
  std::vector<double> ref(static_cast<std::size_t>(c.m) * c.n);
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double sum = c.bias ? biasf[static_cast<std::size_t>(j)] : 0.0;
      for (int kk = 0; kk < c.k; ++kk) {
        sum += static_cast<double>(af[static_cast<std::size_t>(i) * lda + kk]) *
               wf[static_cast<std::size_t>(j) * c.k + kk];
      }
      ref[static_cast<std::size_t>(i) * c.n + j] = sum;
    }
  }
  EXPECT_LT(nmse(got, ref), c.f32_out ? 1e-8 : kBf16Nmse);

  // cuBLASLt on the same operands (a bias needs its bf16 output). It has no
  // algorithm for an output row that is not 16-byte aligned (n % 8 != 0 in
  // bf16): such shapes never reach it in a forward, whose widths are
  // multiples of 64, so only the float64 reference above checks them.
  if (c.n % 8 != 0) return;
  auto runner = GemmRunner::create(GemmRunner::kDefaultWorkspaceBytes);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  DeviceArray<std::byte> workspace(GemmRunner::kDefaultWorkspaceBytes);
  GemmArgs args;
  args.a = da.data();
  args.b = dw.data();
  args.out = c.f32_out ? static_cast<void*>(lt32.data()) : lt16.data();
  args.bias = c.bias && !c.f32_out ? dbias.data() : nullptr;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.lda = lda;
  args.ldb = c.k;
  args.ldc = c.n;
  args.out_dtype = c.f32_out ? DType::kF32 : DType::kBF16;
  if (c.bias && c.f32_out) return;  // cuBLASLt takes no bias with f32 output
  const Status lt_status = runner->run(args, workspace.data(), nullptr);
  ASSERT_TRUE(lt_status.is_ok()) << lt_status.to_string();
  const auto lt = c.f32_out ? lt32.download() : to_float(lt16.download());
  const std::vector<double> lt_double(lt.begin(), lt.end());
  EXPECT_LT(nmse(got, lt_double), c.f32_out ? 1e-8 : 2 * kBf16Nmse);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemvTest,
    ::testing::Values(GemvCase{1, 4, 8, false, false},         // smallest
                      GemvCase{1, 3072, 2048, false, false},   // 1B qkv, batch 1
                      GemvCase{2, 2048, 2048, false, true},    // o_proj-like with bias
                      GemvCase{3, 1027, 520, false, false},    // n, k tails; 3 rows (bucket 4)
                      GemvCase{4, 16384, 2048, false, false},  // 1B gate_up
                      GemvCase{5, 2048, 8192, false, false},   // 1B down_proj (bucket 8)
                      GemvCase{8, 4096, 14336, false, false},  // 8B down_proj
                      GemvCase{8, 6144, 4096, false, true},    // 8B qkv with bias
                      GemvCase{1, 50000, 576, true, false},    // lm_head, f32 logits
                      GemvCase{7, 1001, 2056, true, false},    // f32, odd sizes
                      GemvCase{6, 64, 4104, true, true}),      // f32 with bias
    [](const auto& info) {
      const GemvCase& c = info.param;
      return fmt::format("m{}_n{}_k{}{}{}", c.m, c.n, c.k, c.f32_out ? "_f32" : "",
                         c.bias ? "_bias" : "");
    });

// ---- fused prologue and epilogues ----

struct FusedCase {
  const char* name;
  int m, n, k;
  bool norm;
  float offset;
  GemvEpilogue epilogue;
  bool bias;
  bool f32_out;
  // GemvParams::single_rows: small projections give each warp one row.
  bool single_rows = false;
};

struct FusedOperands {
  std::vector<bf16> a;
  std::vector<bf16> w;
  std::vector<bf16> bias;
  std::vector<bf16> norm_weight;
  HostGemv host;
};

FusedOperands make_operands(const FusedCase& c, std::mt19937& rng) {
  FusedOperands o;
  const std::int64_t lda = c.k + 24;  // a column slice of a wider buffer
  const int w_rows = gated(c.epilogue) ? 2 * c.n : c.n;
  o.a = random_bf16(static_cast<std::size_t>(c.m * lda), rng);
  o.w = random_bf16(static_cast<std::size_t>(w_rows) * c.k, rng, -0.05f, 0.05f);
  if (c.bias) o.bias = random_bf16(static_cast<std::size_t>(c.n), rng);
  if (c.norm) {
    // Gemma stores w - 1: its weights sit around 0, the others around 1.
    o.norm_weight = c.offset == 0.0f ? random_bf16(static_cast<std::size_t>(c.k), rng, 0.5f, 1.5f)
                                     : random_bf16(static_cast<std::size_t>(c.k), rng, -0.5f, 0.5f);
  }
  o.host.m = c.m;
  o.host.n = c.n;
  o.host.k = c.k;
  o.host.lda = lda;
  o.host.a = to_float(o.a);
  o.host.w = to_float(o.w);
  o.host.bias = to_float(o.bias);
  o.host.norm_weight = to_float(o.norm_weight);
  o.host.offset = c.offset;
  o.host.epilogue = c.epilogue;
  return o;
}

class GemvFusedTest : public ::testing::TestWithParam<FusedCase> {};

TEST_P(GemvFusedTest, MatchesTheReferenceAndKeepsTheRestOfOut) {
  CELLM_REQUIRE_GPU();
  const FusedCase c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.m * 131 + c.n * 7 + c.k) + 17);
  FusedOperands o = make_operands(c, rng);
  // ldc > n and a spare row past m: what lies outside [m, n] must survive.
  const std::int64_t ldc = c.n + 24;
  const std::size_t out_count = static_cast<std::size_t>((c.m + 1) * ldc);
  // Finite known contents rather than the NaN poison: kResidualAdd reads out.
  const auto init16 = random_bf16(out_count, rng);
  const auto init32 = to_float(init16);
  o.host.residual = init32;
  o.host.ldc = ldc;

  DeviceArray<bf16> da(o.a), dw(o.w), dbias(o.bias), dnorm(o.norm_weight);
  DeviceArray<bf16> out16(init16);
  DeviceArray<float> out32(init32);
  GemvParams p;
  p.a = da.data();
  p.w = dw.data();
  p.bias = c.bias ? dbias.data() : nullptr;
  p.out = c.f32_out ? static_cast<void*>(out32.data()) : out16.data();
  p.out_f32 = c.f32_out;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.lda = o.host.lda;
  p.ldw = c.k;
  p.ldc = ldc;
  p.prologue = c.norm ? GemvPrologue::kRmsNorm : GemvPrologue::kNone;
  p.norm_weight = c.norm ? dnorm.data() : nullptr;
  p.norm_eps = o.host.eps;
  p.norm_weight_offset = c.offset;
  p.epilogue = c.epilogue;
  p.single_rows = c.single_rows;
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  ASSERT_EQ(gemv_uses_single_rows(p), c.single_rows) << "the case meant to cover one-row units";
  CELLM_CUDA_CHECK(cudaDeviceSynchronize());
  launch_gemv(p, nullptr);
  const auto all = c.f32_out ? out32.download() : to_float(out16.download());
  // Staged inputs (where the rows fit) give the same bits: the same sums in
  // the same order, from shared memory instead of global.
  out16.assign(init16);
  out32.assign(init32);
  p.stage_inputs = true;
  launch_gemv(p, nullptr);
  const auto staged = c.f32_out ? out32.download() : to_float(out16.download());
  ASSERT_EQ(staged.size(), all.size());
  std::size_t staged_differ = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    staged_differ +=
        std::bit_cast<std::uint32_t>(staged[i]) != std::bit_cast<std::uint32_t>(all[i]);
  }
  // (Cases past kGemvMaxStagedBytes keep their loads, and more than 4 rows
  // run as two launches that may differ: the outputs must match either way.)
  EXPECT_EQ(staged_differ, 0u) << "asking for staged inputs changed the output";

  // The checks every kernel's output must pass.
  const auto check = [&](const std::vector<float>& result, const char* kernel) {
    SCOPED_TRACE(kernel);
    std::vector<float> got(static_cast<std::size_t>(c.m) * c.n);
    std::size_t outside_changed = 0;
    for (int r = 0; r <= c.m; ++r) {
      for (std::int64_t col = 0; col < ldc; ++col) {
        const std::size_t at = static_cast<std::size_t>(r * ldc + col);
        if (r < c.m && col < c.n) {
          got[static_cast<std::size_t>(r) * c.n + static_cast<std::size_t>(col)] = result[at];
        } else {
          outside_changed +=
              std::bit_cast<std::uint32_t>(result[at]) != std::bit_cast<std::uint32_t>(init32[at]);
        }
      }
    }
    EXPECT_EQ(outside_changed, 0u) << "elements past n or m of out were written";

    const double tolerance = c.f32_out ? kNormF32Nmse : kBf16Nmse;
    const auto ref = reference(o.host);
    EXPECT_LT(nmse(got, ref), tolerance);

    std::vector<std::pair<const char*, RefVariant>> wrong;
    if (c.norm) {
      wrong.push_back({"no norm", RefVariant{.norm = false}});
      wrong.push_back(
          {"other offset", RefVariant{.offset_delta = c.offset == 0.0f ? 1.0f : -1.0f}});
    }
    if (c.epilogue == GemvEpilogue::kResidualAdd) {
      wrong.push_back({"no residual", RefVariant{.residual = false}});
    }
    if (gated(c.epilogue)) wrong.push_back({"act on up", RefVariant{.act_on_up = true}});
    for (const auto& [what, variant] : wrong) {
      EXPECT_GT(nmse(got, reference(o.host, variant)), 100 * tolerance) << what;
    }
    if (c.norm && c.f32_out) {
      EXPECT_GT(nmse(got, reference(o.host, RefVariant{.round_norm = true})), tolerance)
          << "the normalised input's bf16 rounding is not visible at this tolerance";
    }
    if (gated(c.epilogue) && !c.norm) {
      // Exact inputs: only the float sums' order differs, so nearly every output
      // rounds to the reference's bf16, and an unrounded gate moves ~1/4 of them.
      // (With the norm one input across a bf16 edge can nudge a whole row.)
      EXPECT_LT(mismatch_fraction(got, ref), 0.03);
      EXPECT_GT(mismatch_fraction(got, reference(o.host, RefVariant{.round_gate = false})), 0.08)
          << "the gate's bf16 rounding is not visible";
    }
  };
  check(all, "cuda cores");

  // Row invariance: row r of the m-row call has the bits of a one-row call
  // on row r alone (a speculative verification step must reproduce plain
  // one-row decoding exactly). Each one-row call writes only its row of out.
  if (c.m > 1) {
    out16.assign(init16);
    out32.assign(init32);
    for (int r = 0; r < c.m; ++r) {
      GemvParams one = p;
      one.m = 1;
      one.a = p.a + r * p.lda;
      one.out = c.f32_out ? static_cast<void*>(out32.data() + r * ldc)
                          : static_cast<void*>(out16.data() + r * ldc);
      ASSERT_EQ(gemv_uses_single_rows(one), gemv_uses_single_rows(p));
      launch_gemv(one, nullptr);
    }
    const auto alone = c.f32_out ? out32.download() : to_float(out16.download());
    std::size_t rows_differ = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(c.m * ldc); ++i) {
      rows_differ += std::bit_cast<std::uint32_t>(alone[i]) != std::bit_cast<std::uint32_t>(all[i]);
    }
    EXPECT_EQ(rows_differ, 0u) << "a row of the " << c.m << "-row call differs from the row alone";
  }

  // On tensor cores (every one-row case, and the wider ones whose rows fit):
  // the same checks (sums in another order, so not the same bits), and the
  // same bits on a second run.
  p.tensor_cores = true;
  if (c.m == 1) {
    ASSERT_TRUE(gemv_uses_tensor_cores(p)) << "one-row cases run on tensor cores too";
  }
  if (gemv_uses_tensor_cores(p)) {
    std::vector<float> mma[2];
    for (auto& run : mma) {
      out16.assign(init16);
      out32.assign(init32);
      launch_gemv(p, nullptr);
      run = c.f32_out ? out32.download() : to_float(out16.download());
    }
    check(mma[0], "tensor cores");
    std::size_t runs_differ = 0;
    for (std::size_t i = 0; i < mma[0].size(); ++i) {
      runs_differ +=
          std::bit_cast<std::uint32_t>(mma[0][i]) != std::bit_cast<std::uint32_t>(mma[1][i]);
    }
    EXPECT_EQ(runs_differ, 0u) << "two tensor-core runs differ";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forward, GemvFusedTest,
    ::testing::Values(
        FusedCase{"qkv_norm_bias", 1, 3072, 2048, true, 0.0f, GemvEpilogue::kStore, true, false},
        FusedCase{"qkv_8b_norm_bias", 3, 6144, 4096, true, 0.0f, GemvEpilogue::kStore, true, false},
        FusedCase{"o_proj_residual", 1, 2048, 2048, false, 0.0f, GemvEpilogue::kResidualAdd, false,
                  false},
        FusedCase{"down_residual", 4, 4096, 14336, false, 0.0f, GemvEpilogue::kResidualAdd, false,
                  false},
        FusedCase{"residual_bias", 2, 1000, 520, false, 0.0f, GemvEpilogue::kResidualAdd, true,
                  false},
        FusedCase{"gate_up_norm_silu", 1, 8192, 2048, true, 0.0f, GemvEpilogue::kGatedSilu, false,
                  false},
        FusedCase{"odd_norm_silu", 2, 1000, 520, true, 0.0f, GemvEpilogue::kGatedSilu, false,
                  false},
        FusedCase{"silu", 3, 1536, 1024, false, 0.0f, GemvEpilogue::kGatedSilu, false, false},
        FusedCase{"gelu", 4, 512, 1024, false, 0.0f, GemvEpilogue::kGatedGeluTanh, false, false},
        FusedCase{"gemma_norm_gelu", 2, 2048, 1152, true, 1.0f, GemvEpilogue::kGatedGeluTanh, false,
                  false},
        FusedCase{"lm_head_norm_f32", 1, 50000, 576, true, 0.0f, GemvEpilogue::kStore, false, true},
        FusedCase{"norm_f32_rows8", 8, 4000, 2048, true, 0.0f, GemvEpilogue::kStore, false, true},
        FusedCase{"gemma_norm_f32", 2, 3000, 1152, true, 1.0f, GemvEpilogue::kStore, false, true},
        FusedCase{"gemma_norm_store", 5, 1027, 2304, true, 1.0f, GemvEpilogue::kStore, false,
                  false},
        // One-row units (small, long projections of one-row steps): the down
        // projections of 1B and Qwen3-0.6B, and k and n tails with a norm, a
        // bias and float output.
        FusedCase{"down_single_rows", 1, 2048, 8192, false, 0.0f, GemvEpilogue::kResidualAdd, false,
                  false, true},
        FusedCase{"qwen_down_single_rows", 1, 1024, 3072, false, 0.0f, GemvEpilogue::kResidualAdd,
                  false, false, true},
        FusedCase{"bias_single_rows", 1, 2047, 4104, false, 0.0f, GemvEpilogue::kResidualAdd, true,
                  false, true},
        FusedCase{"gemma_norm_f32_single_rows", 1, 1001, 2312, true, 1.0f, GemvEpilogue::kStore,
                  false, true, true},
        // Many-row calls of the same projections keep one-row units, so each
        // row sums in the order of the one-row call (row invariance above).
        FusedCase{"down_single_rows_rows4", 4, 2048, 8192, false, 0.0f, GemvEpilogue::kResidualAdd,
                  false, false, true},
        FusedCase{"gemma_norm_f32_single_rows_rows7", 7, 1001, 2312, true, 1.0f,
                  GemvEpilogue::kStore, false, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

// A pdl GEMV reads what the GEMV before it wrote: the first is big enough
// that a second that did not wait would read its NaN-poisoned input.
TEST(GemvPdlTest, ChainMatchesTheUnchainedRunAndTheReference) {
  CELLM_REQUIRE_GPU();
  // kN1: the second GEMV's rows and norm weight fit its staged inputs.
  constexpr int kK1 = 4096;
  constexpr int kN1 = 4096;
  constexpr int kN2 = 2048;
  constexpr int kN3 = 4096;
  std::mt19937 rng(2025);
  const auto a1 = random_bf16(kK1, rng);
  const auto w1 = random_bf16(static_cast<std::size_t>(kN1) * kK1, rng, -0.05f, 0.05f);
  const auto norm2 = random_bf16(kN1, rng, 0.5f, 1.5f);
  const auto w2 = random_bf16(static_cast<std::size_t>(kN2) * kN1, rng, -0.05f, 0.05f);
  const auto w3 = random_bf16(static_cast<std::size_t>(kN3) * kN2, rng, -0.05f, 0.05f);
  const auto bias3 = random_bf16(kN3, rng);
  const auto residual0 = random_bf16(kN3, rng);
  DeviceArray<bf16> da1(a1), dw1(w1), dnorm2(norm2), dw2(w2), dw3(w3), dbias3(bias3);
  DeviceArray<bf16> residual(residual0);
  DeviceArray<bf16> out1(kN1), out2(kN2);
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();

  GemvParams p1 = gemv_dense(da1.data(), dw1.data(), out1.data(), 1, kN1, kK1);
  GemvParams p2 = gemv_dense(out1.data(), dw2.data(), out2.data(), 1, kN2, kN1);
  p2.prologue = GemvPrologue::kRmsNorm;
  p2.norm_weight = dnorm2.data();
  GemvParams p3 = gemv_dense(out2.data(), dw3.data(), residual.data(), 1, kN3, kN2);
  p3.bias = dbias3.data();
  p3.epilogue = GemvEpilogue::kResidualAdd;
  for (const GemvParams* p : {&p1, &p2, &p3}) {
    ASSERT_TRUE(p->validate().is_ok()) << p->validate().to_string();
  }

  struct Outputs {
    std::vector<bf16> out1, out2, residual;
  };
  const auto run_chain = [&](bool pdl, bool staged) {
    residual.assign(residual0);
    out1.poison();  // also waits for the upload above
    out2.poison();
    p2.pdl = pdl;
    p3.pdl = pdl;
    for (GemvParams* p : {&p1, &p2, &p3}) p->stage_inputs = staged;
    launch_gemv(p1, stream->get());
    launch_gemv(p2, stream->get());
    launch_gemv(p3, stream->get());
    stream->synchronize();
    return Outputs{out1.download(), out2.download(), residual.download()};
  };
  const Outputs chained = run_chain(true, false);
  const Outputs plain = run_chain(false, false);
  // Staged, the second and third copy their poisoned inputs only after their waits.
  p2.stage_inputs = p3.stage_inputs = true;
  ASSERT_TRUE(gemv_stages_inputs(p2) && gemv_stages_inputs(p3));
  const Outputs staged = run_chain(true, true);
  const auto bits = [](const std::vector<bf16>& v) {
    std::vector<std::uint16_t> out(v.size());
    std::memcpy(out.data(), v.data(), v.size() * sizeof(bf16));
    return out;
  };
  EXPECT_EQ(bits(chained.out1), bits(plain.out1));
  EXPECT_EQ(bits(chained.out2), bits(plain.out2));
  EXPECT_EQ(bits(chained.residual), bits(plain.residual));
  EXPECT_EQ(bits(staged.out1), bits(plain.out1));
  EXPECT_EQ(bits(staged.out2), bits(plain.out2));
  EXPECT_EQ(bits(staged.residual), bits(plain.residual));

  // Each stage against float64 on the inputs the GPU actually gave it.
  HostGemv h1;
  h1.m = 1;
  h1.n = kN1;
  h1.k = kK1;
  h1.lda = kK1;
  h1.a = to_float(a1);
  h1.w = to_float(w1);
  EXPECT_LT(nmse(to_float(chained.out1), reference(h1)), kBf16Nmse);
  HostGemv h2;
  h2.m = 1;
  h2.n = kN2;
  h2.k = kN1;
  h2.lda = kN1;
  h2.a = to_float(chained.out1);
  h2.w = to_float(w2);
  h2.norm_weight = to_float(norm2);
  h2.eps = p2.norm_eps;
  EXPECT_LT(nmse(to_float(chained.out2), reference(h2)), kBf16Nmse);
  EXPECT_GT(nmse(to_float(chained.out2), reference(h2, RefVariant{.norm = false})),
            100 * kBf16Nmse);
  HostGemv h3;
  h3.m = 1;
  h3.n = kN3;
  h3.k = kN2;
  h3.lda = kN2;
  h3.a = to_float(chained.out2);
  h3.w = to_float(w3);
  h3.bias = to_float(bias3);
  h3.epilogue = GemvEpilogue::kResidualAdd;
  h3.residual = to_float(residual0);
  h3.ldc = kN3;
  EXPECT_LT(nmse(to_float(chained.residual), reference(h3)), kBf16Nmse);
}

// One-row units are for small projections whose row pairs
// would leave the GPU half empty and have more weights than a warp keeps in
// flight; everything else keeps pairs (see GemvParams::single_rows).
TEST(GemvSingleRowsTest, TakesOnlySmallLongProjections) {
  CELLM_REQUIRE_GPU();
  const auto params = [](std::int32_t m, std::int32_t n, std::int32_t k, GemvEpilogue e) {
    GemvParams p = gemv_dense(nullptr, nullptr, nullptr, m, n, k);
    p.epilogue = e;
    p.single_rows = true;
    return p;
  };
  EXPECT_TRUE(gemv_uses_single_rows(params(1, 2048, 8192, GemvEpilogue::kResidualAdd)));
  EXPECT_TRUE(gemv_uses_single_rows(params(1, 1024, 3072, GemvEpilogue::kStore)));
  GemvParams off = params(1, 2048, 8192, GemvEpilogue::kResidualAdd);
  off.single_rows = false;
  EXPECT_FALSE(gemv_uses_single_rows(off)) << "the knob is off";
  EXPECT_TRUE(gemv_uses_single_rows(params(8, 2048, 8192, GemvEpilogue::kResidualAdd)))
      << "the row count does not decide (row invariance)";
  EXPECT_FALSE(gemv_uses_single_rows(params(1, 2048, 2048, GemvEpilogue::kResidualAdd)))
      << "a pair's weights are all in flight at once";
  EXPECT_FALSE(gemv_uses_single_rows(params(1, 1024, 8192, GemvEpilogue::kGatedSilu)))
      << "a gated unit is a gate and an up row";
  EXPECT_FALSE(gemv_uses_single_rows(params(1, 3072, 8192, GemvEpilogue::kRopeScatter)))
      << "rope pairs the halves of a head";
  // The edges. Rows of more than 2048 columns (two batches of a pair):
  EXPECT_FALSE(gemv_uses_single_rows(params(1, 2048, 2048, GemvEpilogue::kStore)));
  EXPECT_TRUE(gemv_uses_single_rows(params(1, 2048, 2056, GemvEpilogue::kStore)));
  // Pairs in blocks of four warps that fill at most half of one wave of four
  // blocks per SM: n / 2 pairs in n / 8 blocks, so n <= 16 blocks per SM.
  // 8B's 4096 outputs on the H200's 132 SMs (512 blocks of 528) keep pairs.
  const int sms = multiprocessor_count();
  EXPECT_TRUE(gemv_uses_single_rows(params(1, 16 * sms, 8192, GemvEpilogue::kResidualAdd)));
  EXPECT_FALSE(gemv_uses_single_rows(params(1, 16 * sms + 8, 8192, GemvEpilogue::kResidualAdd)));
  EXPECT_FALSE(gemv_uses_single_rows(params(1, 4096, 14336, GemvEpilogue::kResidualAdd)));
}

// Staged inputs take the rows (and the norm weight) that fit
// kGemvMaxStagedBytes of shared memory a block; longer or wider calls, and
// the q/k/v projection, keep their global loads (see
// GemvParams::stage_inputs). Host logic only.
TEST(GemvStageInputsTest, TakesTheRowsThatFitTheBudget) {
  const auto params = [](int m, int k, bool norm) {
    GemvParams p = gemv_dense(nullptr, nullptr, nullptr, m, 2048, k);
    if (norm) p.prologue = GemvPrologue::kRmsNorm;
    p.stage_inputs = true;
    return p;
  };
  EXPECT_EQ(gemv_staged_bytes(params(1, 2048, true)), 8192);
  EXPECT_TRUE(gemv_stages_inputs(params(1, 2048, true)));    // 1B gate/up, lm_head
  EXPECT_TRUE(gemv_stages_inputs(params(1, 8192, false)));   // 1B down: 16 KB, the limit
  EXPECT_TRUE(gemv_stages_inputs(params(1, 4096, true)));    // 8B gate/up, lm_head
  EXPECT_FALSE(gemv_stages_inputs(params(1, 14336, false)))  // 8B down: 28 KB
      << "past the budget";
  EXPECT_FALSE(gemv_stages_inputs(params(4, 2048, true))) << "4 rows and the norm: 20 KB";
  EXPECT_TRUE(gemv_stages_inputs(params(4, 2048, false)));
  GemvParams off = params(1, 2048, true);
  off.stage_inputs = false;
  EXPECT_FALSE(gemv_stages_inputs(off)) << "the knob is off";
  GemvParams qkv = params(1, 2048, true);
  qkv.epilogue = GemvEpilogue::kRopeScatter;
  EXPECT_FALSE(gemv_stages_inputs(qkv)) << "q/k/v keeps its global loads (measured slower staged)";
}

// Tensor cores take calls of 1..8 rows whose staged inputs fit and whose
// rope heads are a multiple of 16 wide (GemvParams::tensor_cores). Host
// logic only.
TEST(GemvTensorCoresTest, TakesCallsThatFit) {
  CELLM_REQUIRE_GPU();  // a block's groups follow the SM count
  const auto params = [](int m, int k, bool norm) {
    GemvParams p = gemv_dense(nullptr, nullptr, nullptr, m, 2048, k);
    if (norm) p.prologue = GemvPrologue::kRmsNorm;
    p.tensor_cores = true;
    return p;
  };
  EXPECT_TRUE(gemv_uses_tensor_cores(params(1, 2048, true)));    // 1B gate/up, lm_head
  EXPECT_TRUE(gemv_uses_tensor_cores(params(1, 14336, false)));  // 8B down: 28 KB
  EXPECT_FALSE(gemv_uses_tensor_cores(params(1, 8192, true))) << "48 KB of norm inputs";
  GemvParams head = params(1, 4096, true);  // 8B's lm_head: 24 KB of inputs, 16 KB of partials
  head.n = 128256;
  head.out_f32 = true;
  EXPECT_TRUE(gemv_uses_tensor_cores(head));
  head.n = 4 * 128256;
  EXPECT_FALSE(gemv_uses_tensor_cores(head)) << "the partials of 4x the groups do not fit";
  // Rows: 2048 columns with the norm take 8 KB a row (high and low parts)
  // and 4 KB of norm weight. One row keeps to 48 KB; more rows may take
  // what a block can opt into (gemv_mma_max_smem_bytes).
  EXPECT_EQ(gemv_mma_max_smem_bytes(1), kGemvMmaMaxSharedBytes);
  EXPECT_EQ(gemv_mma_max_smem_bytes(2), std::max<std::int64_t>(kGemvMmaMaxSharedBytes,
                                                               max_smem_per_block_optin()));
  EXPECT_TRUE(gemv_uses_tensor_cores(params(2, 2048, true)));
  EXPECT_TRUE(gemv_uses_tensor_cores(params(8, 2048, true)));
  EXPECT_TRUE(gemv_uses_tensor_cores(params(8, 2048, false)));  // 1B's o projection: 38 KB
  EXPECT_TRUE(gemv_uses_tensor_cores(params(8, 8192, false)));  // 1B's down: 16 KB a row
  EXPECT_EQ(gemv_uses_tensor_cores(params(8, 14336, false)),   // 8B's down: 28 KB a row
            gemv_mma_smem_bytes(params(8, 14336, false)) <= max_smem_per_block_optin());
  EXPECT_FALSE(gemv_uses_tensor_cores(params(9, 64, false))) << "eight B columns";
  for (int m = 1; m <= 8; ++m) {
    EXPECT_EQ(gemv_mma_rounds(params(m, 2048, true)), gemv_mma_rounds(params(1, 2048, true)))
        << "the walk must not depend on the rows";
    EXPECT_EQ(gemv_uses_tensor_cores(params(m, 2048, true)),
              gemv_mma_smem_bytes(params(m, 2048, true)) <= gemv_mma_max_smem_bytes(m));
  }
  GemvParams off = params(1, 2048, true);
  off.tensor_cores = false;
  EXPECT_FALSE(gemv_uses_tensor_cores(off)) << "the knob is off";
  GemvParams rope = params(1, 2048, true);
  rope.epilogue = GemvEpilogue::kRopeScatter;
  rope.rope.head_dim = 64;
  EXPECT_TRUE(gemv_uses_tensor_cores(rope));
  rope.rope.head_dim = 72;
  EXPECT_FALSE(gemv_uses_tensor_cores(rope)) << "a rope group is 8 dims of a half head";
}

TEST(GemvDeterminismTest, SameGatedCallGivesSameBits) {
  CELLM_REQUIRE_GPU();
  const FusedCase c{"det", 4, 2048, 2048, true, 0.0f, GemvEpilogue::kGatedSilu, false, false};
  std::mt19937 rng(99);
  const FusedOperands o = make_operands(c, rng);
  DeviceArray<bf16> da(o.a), dw(o.w), dnorm(o.norm_weight);
  DeviceArray<bf16> out(static_cast<std::size_t>(c.m) * c.n);
  GemvParams p = gemv_dense(da.data(), dw.data(), out.data(), c.m, c.n, c.k);
  p.lda = o.host.lda;
  p.prologue = GemvPrologue::kRmsNorm;
  p.norm_weight = dnorm.data();
  p.norm_eps = o.host.eps;
  p.epilogue = c.epilogue;
  ASSERT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  out.poison();
  launch_gemv(p, nullptr);
  const auto first = out.download();
  out.poison();
  launch_gemv(p, nullptr);
  const auto second = out.download();
  ASSERT_EQ(first.size(), second.size());
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(bf16)), 0);
  EXPECT_LT(nmse(to_float(first), reference(o.host)), kBf16Nmse);
}

// ---- host-only checks ----

// validate() never dereferences: the pointers only need their alignment, and
// a and out their own (non-overlapping) ranges: a is 4 x 64 bf16, out 4 x 16.
GemvParams fake_params() {
  alignas(16) static std::byte a_storage[4 * 64 * 2];
  alignas(16) static std::byte out_storage[4 * 16 * 4];
  const auto* a = reinterpret_cast<const bf16*>(a_storage);
  return gemv_dense(a, a, out_storage, 4, 16, 64);
}

TEST(GemvValidateTest, RefusesAnOutputThatOverlapsTheInput) {
  GemvParams p = fake_params();
  p.out = const_cast<bf16*>(p.a) + 3 * 64 + 8;  // inside a's last row
  Status status = p.validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("overlap"), std::string::npos) << status.to_string();
  p.out = const_cast<bf16*>(p.a) + 3 * 64 + 64;  // just past it
  EXPECT_TRUE(p.validate().is_ok()) << p.validate().to_string();
  p.out = const_cast<bf16*>(p.a) - 3 * 16 - 8;  // its last row reaches into a
  status = p.validate();
  EXPECT_NE(status.message().find("overlap"), std::string::npos) << status.to_string();
}

TEST(GemvValidateTest, AcceptsAWellFormedCall) {
  EXPECT_TRUE(fake_params().validate().is_ok()) << fake_params().validate().to_string();
}

TEST(GemvValidateTest, RefusesRowsPastTheBuckets) {
  GemvParams p = fake_params();
  p.m = kGemvMaxRows + 1;
  const Status status = p.validate();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("m=9"), std::string::npos) << status.to_string();
  p.m = 0;
  EXPECT_FALSE(p.validate().is_ok());
}

TEST(GemvValidateTest, RefusesKTailsAndShortLeadingDims) {
  GemvParams p = fake_params();
  p.k = 60;
  EXPECT_FALSE(p.validate().is_ok());
  p = fake_params();
  p.lda = 32;
  EXPECT_FALSE(p.validate().is_ok());
  p = fake_params();
  p.lda = 68;  // not a multiple of 8: rows lose 16-byte alignment
  EXPECT_FALSE(p.validate().is_ok());
  p = fake_params();
  p.ldc = 8;
  EXPECT_FALSE(p.validate().is_ok());
  p = fake_params();
  p.w = reinterpret_cast<const bf16*>(reinterpret_cast<std::uintptr_t>(p.w) + 2);
  EXPECT_FALSE(p.validate().is_ok());
}

// The message of a refusal, which must name `what`; empty when accepted.
std::string refusal(const GemvParams& p) {
  const Status status = p.validate();
  if (status.is_ok()) return {};
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.to_string();
  return std::string(status.message());
}

GemvParams fake_norm_params() {
  alignas(16) static std::byte weight[128];
  GemvParams p = fake_params();
  p.prologue = GemvPrologue::kRmsNorm;
  p.norm_weight = reinterpret_cast<const bf16*>(weight);
  return p;
}

TEST(GemvValidateTest, AcceptsTheFusedForms) {
  GemvParams p = fake_norm_params();
  EXPECT_EQ(refusal(p), "");
  p.norm_weight_offset = 1.0f;
  p.out_f32 = true;
  EXPECT_EQ(refusal(p), "");
  p = fake_params();
  p.bias = p.a;
  p.epilogue = GemvEpilogue::kResidualAdd;
  EXPECT_EQ(refusal(p), "");
  for (GemvEpilogue e : {GemvEpilogue::kGatedSilu, GemvEpilogue::kGatedGeluTanh}) {
    p = fake_norm_params();
    p.epilogue = e;
    EXPECT_EQ(refusal(p), "");
  }
}

TEST(GemvValidateTest, RefusesANormWithoutItsWeight) {
  GemvParams p = fake_norm_params();
  p.norm_weight = nullptr;
  EXPECT_NE(refusal(p).find("norm_weight"), std::string::npos) << refusal(p);
  p = fake_norm_params();
  p.norm_weight =
      reinterpret_cast<const bf16*>(reinterpret_cast<std::uintptr_t>(p.norm_weight) + 2);
  EXPECT_NE(refusal(p).find("norm_weight"), std::string::npos) << refusal(p);
  // Without the prologue the weight is not read, so it may be anything.
  p.prologue = GemvPrologue::kNone;
  EXPECT_EQ(refusal(p), "");
}

TEST(GemvValidateTest, RefusesABadNormEpsOrOffset) {
  for (float eps : {0.0f, -1e-6f, std::nanf("")}) {
    GemvParams p = fake_norm_params();
    p.norm_eps = eps;
    EXPECT_NE(refusal(p).find("eps"), std::string::npos) << eps << ": " << refusal(p);
  }
  for (float offset : {0.5f, -1.0f, 2.0f}) {
    GemvParams p = fake_norm_params();
    p.norm_weight_offset = offset;
    EXPECT_NE(refusal(p).find("offset"), std::string::npos) << offset << ": " << refusal(p);
  }
}

TEST(GemvValidateTest, RefusesFloatOutputOutsideThePlainStore) {
  for (GemvEpilogue e :
       {GemvEpilogue::kResidualAdd, GemvEpilogue::kGatedSilu, GemvEpilogue::kGatedGeluTanh}) {
    GemvParams p = fake_params();
    p.out_f32 = true;
    p.epilogue = e;
    EXPECT_NE(refusal(p).find("float output"), std::string::npos) << refusal(p);
  }
}

TEST(GemvValidateTest, RefusesABiasOnTheGatedEpilogues) {
  for (GemvEpilogue e : {GemvEpilogue::kGatedSilu, GemvEpilogue::kGatedGeluTanh}) {
    GemvParams p = fake_params();
    p.bias = p.a;
    p.epilogue = e;
    EXPECT_NE(refusal(p).find("bias"), std::string::npos) << refusal(p);
    p.bias = nullptr;
    EXPECT_EQ(refusal(p), "");
  }
}

TEST(GemvValidateTest, ARefusalIsPureAndRepeatable) {
  GemvParams p = fake_norm_params();
  p.norm_eps = 0.0f;
  p.pdl = true;
  const Status first = p.validate();
  const Status second = p.validate();
  EXPECT_FALSE(first.is_ok());
  EXPECT_EQ(first, second);
  EXPECT_EQ(p.norm_eps, 0.0f);
  EXPECT_EQ(p.prologue, GemvPrologue::kRmsNorm);
  EXPECT_TRUE(p.pdl);
  // Fixing the one field it named is enough.
  p.norm_eps = 1e-6f;
  EXPECT_TRUE(p.validate().is_ok()) << p.validate().to_string();
}

}  // namespace
}  // namespace cellm::cuda
