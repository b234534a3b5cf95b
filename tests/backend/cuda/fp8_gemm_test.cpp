// The FP8 wide-step path (issue 38, item 3): the cuBLASLt FP8 GEMM with
// per-row scales against a float64 host product of the very codes and
// scales it multiplied (the activations' own quantization, by the kernel
// quantize_fp8_test checks, included, so only the GEMM's arithmetic is left
// to tolerate), on Llama-8B-like k and n at m = 9, 64 and 512; plus
// refusals, the self-check, and a replay inside a captured graph.
#include <bit>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/gemm_fp8.h"
#include "backend/cuda/kernels/quantize_fp8.cuh"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "format/fp8.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::from_bf16;
using testing::random_bf16;

constexpr std::size_t kWorkspace = std::size_t{32} << 20;

// Weight codes of N(0, 1) values quantized per row (as `--quantize fp8`
// does), their per-row scales drawn apart so a misapplied scale shows.
struct HostWeights {
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
};
HostWeights random_weights(int n, int k, std::mt19937& rng) {
  HostWeights w;
  w.codes.resize(static_cast<std::size_t>(n) * k);
  w.scales.resize(static_cast<std::size_t>(n));
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.5e-3f, 4e-3f);
  for (auto& code : w.codes) code = format::f32_to_e4m3(value(rng) * 100.0f);
  for (auto& s : w.scales) s = scale(rng);
  return w;
}

struct GemmCase {
  int m, n, k;
  bool bias;
  bool f32_out;
  bool fast_accum = false;
};

class Fp8GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(Fp8GemmTest, MatchesTheProductOfItsCodesAndScales) {
  CELLM_REQUIRE_GPU();
  const GemmCase c = GetParam();
  std::mt19937 rng(static_cast<unsigned>(c.m * 7 + c.n * 3 + c.k));
  const int lda = c.k + 8;  // a column slice of a wider bf16 buffer
  const int ldq = c.k;      // the quantized rows, packed
  const std::vector<bf16> a = random_bf16(static_cast<std::size_t>(c.m) * lda, rng, -2.0f, 2.0f);
  const HostWeights w = random_weights(c.n, c.k, rng);
  const std::vector<bf16> bias = random_bf16(static_cast<std::size_t>(c.n), rng);
  DeviceArray<bf16> da(a), dbias(bias);
  DeviceArray<std::uint8_t> dq(static_cast<std::size_t>(c.m) * ldq), dw(w.codes);
  DeviceArray<float> dsa(static_cast<std::size_t>(c.m)), dsw(w.scales);
  DeviceArray<bf16> out16(static_cast<std::size_t>(c.m) * c.n);
  DeviceArray<float> out32(static_cast<std::size_t>(c.m) * c.n);
  out16.poison();
  out32.poison();
  DeviceArray<std::byte> workspace(kWorkspace);

  QuantizeFp8Params qp;
  qp.a = da.data();
  qp.lda = lda;
  qp.m = c.m;
  qp.k = c.k;
  qp.out = dq.data();
  qp.ldo = ldq;
  qp.scales = dsa.data();
  ASSERT_TRUE(qp.validate().is_ok()) << qp.validate().to_string();
  launch_quantize_fp8(qp, nullptr);

  auto runner = Fp8GemmRunner::create(kWorkspace);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  Fp8GemmArgs args;
  args.a = dq.data();
  args.a_scales = dsa.data();
  args.b = dw.data();
  args.b_scales = dsw.data();
  args.out = c.f32_out ? static_cast<void*>(out32.data()) : out16.data();
  args.bias = c.bias ? dbias.data() : nullptr;
  args.m = c.m;
  args.n = c.n;
  args.k = c.k;
  args.lda = ldq;
  args.ldb = c.k;
  args.ldc = c.n;
  args.out_dtype = c.f32_out ? DType::kF32 : DType::kBF16;
  args.fast_accum = c.fast_accum;
  const Status status = runner->run(args, workspace.data(), nullptr);
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(runner->cached_plans(), 1u);

  // The reference multiplies what the GEMM was given: the device's codes and
  // scales (their bits are QuantizeFp8Test's business).
  const std::vector<std::uint8_t> qa = dq.download();
  const std::vector<float> sa = dsa.download();
  std::vector<float> got(static_cast<std::size_t>(c.m) * c.n);
  if (c.f32_out) {
    got = out32.download();
  } else {
    const std::vector<bf16> g = out16.download();
    for (std::size_t i = 0; i < g.size(); ++i) got[i] = from_bf16(g[i]);
  }
  std::vector<double> av(qa.size()), wv(w.codes.size());
  for (std::size_t i = 0; i < qa.size(); ++i) av[i] = format::e4m3_to_f32(qa[i]);
  for (std::size_t i = 0; i < w.codes.size(); ++i) wv[i] = format::e4m3_to_f32(w.codes[i]);
  // Tolerance, per element: the output's rounding (bf16: 2^-9 of the value;
  // asked 2^-8) and the tensor cores' partial sums, which keep fewer bits
  // than float32 between cuBLASLt's promotions (2^-12 of the sum of the
  // terms' magnitudes bounds it with room). The products of E4M3 values are
  // exact, and the bias is one more float add. A scale that is misapplied
  // or a code misread moves the result by far more. Fast accumulation keeps
  // the partial sums in the tensor cores all along k: 2^-8 of the magnitude.
  const double out_rel = c.f32_out ? 1e-6 : std::ldexp(1.0, -8);
  int bad = 0;
  double worst = 0.0;
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double sum = 0.0, magnitude = 0.0;
      const double* ar = av.data() + static_cast<std::size_t>(i) * ldq;
      const double* wr = wv.data() + static_cast<std::size_t>(j) * c.k;
      for (int kk = 0; kk < c.k; ++kk) {
        sum += ar[kk] * wr[kk];
        magnitude += std::fabs(ar[kk] * wr[kk]);
      }
      const double scale = static_cast<double>(sa[static_cast<std::size_t>(i)]) *
                           static_cast<double>(w.scales[static_cast<std::size_t>(j)]);
      const double bias_j =
          c.bias ? static_cast<double>(from_bf16(bias[static_cast<std::size_t>(j)])) : 0.0;
      const double want = sum * scale + bias_j;
      const double have = got[static_cast<std::size_t>(i) * c.n + j];
      const double allowed =
          out_rel * std::fabs(want) + std::ldexp(1.0, c.fast_accum ? -8 : -12) * magnitude * scale;
      const double err = std::fabs(have - want);
      worst = std::max(worst, err / (allowed > 0.0 ? allowed : 1.0));
      if (!(err <= allowed) && ++bad <= 10) {
        ADD_FAILURE() << "out[" << i << ", " << j << "] = " << have << " want " << want
                      << " (allowed " << allowed << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0);
  std::printf("fp8 gemm m=%d n=%d k=%d%s: worst error %.3f of the tolerance\n", c.m, c.n, c.k,
              c.fast_accum ? " fast" : "", worst);
}

// k and n as Llama 3 8B's projections have them (hidden 4096, q/k/v 6144
// rows, MLP 14336), n cut where the host reference would be slow; m = 9
// (just past the quantized GEMV), 64 (a decode batch), 512 (a prefill chunk).
INSTANTIATE_TEST_SUITE_P(
    Shapes, Fp8GemmTest,
    ::testing::Values(GemmCase{9, 6144, 4096, false, false}, GemmCase{9, 512, 4096, true, false},
                      GemmCase{64, 1024, 4096, false, false},
                      GemmCase{64, 256, 14336, false, false}, GemmCase{64, 512, 4096, false, true},
                      GemmCase{512, 256, 4096, true, false},
                      GemmCase{512, 128, 14336, false, false}, GemmCase{33, 96, 160, true, false},
                      GemmCase{64, 1024, 4096, false, false, true},
                      GemmCase{512, 128, 14336, false, false, true}),
    [](const auto& info) {
      const GemmCase& c = info.param;
      return fmt::format("m{}_n{}_k{}{}{}{}", c.m, c.n, c.k, c.bias ? "_bias" : "",
                         c.f32_out ? "_f32" : "", c.fast_accum ? "_fast" : "");
    });

TEST(Fp8GemmRunnerTest, SelfCheckPassesOnHopper) {
  CELLM_REQUIRE_GPU();
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  DeviceArray<std::byte> workspace(kWorkspace);
  auto runner = Fp8GemmRunner::create(kWorkspace);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  const Status status = runner->self_check(workspace.data(), nullptr);
  if (major < 9) {
    // Older GPUs may lack the scale mode; what they must not do is pass a
    // wrong product off as right.
    EXPECT_TRUE(status.is_ok() || status.code() == StatusCode::kNotSupported) << status.to_string();
  } else {
    EXPECT_TRUE(status.is_ok()) << status.to_string();
  }
}

// Host-side checks only: runs without a GPU.
TEST(Fp8GemmRunnerTest, RefusesBadArguments) {
  alignas(16) static std::uint8_t a[64 * 64], b[64 * 64];
  alignas(16) static float sa[64], sb[64];
  alignas(16) static bf16 out[64 * 64], bias[64];
  Fp8GemmArgs args;
  args.a = a;
  args.a_scales = sa;
  args.b = b;
  args.b_scales = sb;
  args.out = out;
  args.m = 16;
  args.n = 64;
  args.k = 48;
  args.lda = 48;
  args.ldb = 48;
  args.ldc = 64;
  EXPECT_TRUE(args.validate().is_ok()) << args.validate().to_string();
  args.k = args.lda = args.ldb = 40;  // not a multiple of 16
  EXPECT_EQ(args.validate().code(), StatusCode::kInvalidArgument);
  args.k = args.lda = args.ldb = 48;
  args.b_scales = nullptr;
  EXPECT_EQ(args.validate().code(), StatusCode::kInvalidArgument);
  args.b_scales = sb;
  args.bias = bias;
  args.out_dtype = DType::kF32;
  EXPECT_EQ(args.validate().code(), StatusCode::kNotSupported);
  args.out_dtype = DType::kBF16;
  args.b = b + 8;
  EXPECT_EQ(args.validate().code(), StatusCode::kInvalidArgument);
}

TEST(Fp8GemmRunnerTest, WarmShapeRunsInsideGraphCapture) {
  CELLM_REQUIRE_GPU();
  const int m = 64, n = 256, k = 512;
  std::mt19937 rng(11);
  const HostWeights act = random_weights(m, k, rng);
  const HostWeights w = random_weights(n, k, rng);
  DeviceArray<std::uint8_t> da(act.codes), dw(w.codes);
  DeviceArray<float> dsa(act.scales), dsw(w.scales);
  DeviceArray<bf16> eager(static_cast<std::size_t>(m) * n),
      graphed(static_cast<std::size_t>(m) * n);
  DeviceArray<std::byte> workspace(kWorkspace);
  auto runner = Fp8GemmRunner::create(kWorkspace);
  ASSERT_TRUE(runner.ok());
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  Fp8GemmArgs args;
  args.a = da.data();
  args.a_scales = dsa.data();
  args.b = dw.data();
  args.b_scales = dsw.data();
  args.out = eager.data();
  args.m = m;
  args.n = n;
  args.k = k;
  args.lda = k;
  args.ldb = k;
  args.ldc = n;
  ASSERT_TRUE(runner->run(args, workspace.data(), stream->get()).is_ok());
  args.out = graphed.data();
  GraphExec::begin_capture(stream->get());
  const Status captured = runner->run(args, workspace.data(), stream->get());
  auto graph = GraphExec::end_capture(stream->get());
  ASSERT_TRUE(captured.is_ok()) << captured.to_string();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  graph->launch(stream->get());
  stream->synchronize();
  EXPECT_EQ(runner->cached_plans(), 1u);
  const auto e = eager.download();
  const auto g = graphed.download();
  for (int i = 0; i < m * n; ++i) {
    ASSERT_EQ(std::bit_cast<std::uint16_t>(e[static_cast<std::size_t>(i)]),
              std::bit_cast<std::uint16_t>(g[static_cast<std::size_t>(i)]))
        << i;
  }
}

}  // namespace
}  // namespace cellm::cuda
