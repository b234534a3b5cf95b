// cuBLASLt GEMM wrapper against a float64 CPU product: bf16 and f32 outputs,
// bias, accumulation into the output, odd row counts, column-slice operands,
// autotuned plans (the timing runs must leave the output of one plain run),
// plan caching, refusals, and a replay inside a captured graph.
#include "backend/cuda/gemm.h"

#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::DeviceArray;
using testing::kBf16Nmse;
using testing::nmse;
using testing::random_bf16;
using testing::to_float;

struct GemmCase {
  int m, n, k;
  bool f32_out;
  bool bias;
  bool accumulate;
  bool autotune = false;  // timed candidates instead of the heuristic's first
  int candidates = kDefaultAutotuneCandidates;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesReference) {
  CELLM_REQUIRE_GPU();
  const GemmCase c = GetParam();
  std::mt19937 rng(c.m * 7 + c.n * 3 + c.k);
  const int lda = c.k + 8;  // a column slice of a wider buffer
  const auto a = random_bf16(static_cast<std::size_t>(c.m) * lda, rng);
  const auto b = random_bf16(static_cast<std::size_t>(c.n) * c.k, rng);
  const auto bias = random_bf16(c.n, rng);
  const auto init = random_bf16(static_cast<std::size_t>(c.m) * c.n, rng);
  DeviceArray<bf16> da(a), db(b), dbias(bias), dout16(init);
  std::vector<float> init_f32 = to_float(init);
  DeviceArray<float> dout32(init_f32);
  DeviceArray<std::byte> workspace(GemmRunner::kDefaultWorkspaceBytes);
  auto runner = GemmRunner::create(GemmRunner::kDefaultWorkspaceBytes);
  ASSERT_TRUE(runner.ok()) << runner.status().to_string();
  GemmArgs args{.a = da.data(),
                .b = db.data(),
                .out = c.f32_out ? static_cast<void*>(dout32.data()) : dout16.data(),
                .bias = c.bias ? dbias.data() : nullptr,
                .m = c.m,
                .n = c.n,
                .k = c.k,
                .lda = lda,
                .ldb = c.k,
                .ldc = c.n,
                .out_dtype = c.f32_out ? DType::kF32 : DType::kBF16,
                .accumulate = c.accumulate,
                .autotune = c.autotune,
                .autotune_candidates = c.candidates};
  const Status status = runner->run(args, workspace.data(), nullptr);
  ASSERT_TRUE(status.is_ok()) << status.to_string();
  EXPECT_EQ(runner->cached_plans(), 1u);

  const auto af = to_float(a);
  const auto bf = to_float(b);
  const auto biasf = to_float(bias);
  std::vector<double> ref(static_cast<std::size_t>(c.m) * c.n);
  for (int i = 0; i < c.m; ++i) {
    for (int j = 0; j < c.n; ++j) {
      double sum = c.bias ? biasf[j] : 0.0;
      if (c.accumulate) sum += init_f32[static_cast<std::size_t>(i) * c.n + j];
      for (int kk = 0; kk < c.k; ++kk) {
        sum += double(af[static_cast<std::size_t>(i) * lda + kk]) *
               bf[static_cast<std::size_t>(j) * c.k + kk];
      }
      ref[static_cast<std::size_t>(i) * c.n + j] = sum;
    }
  }
  const auto got = c.f32_out ? dout32.download() : to_float(dout16.download());
  EXPECT_LT(nmse(got, ref), c.f32_out ? 1e-6 : kBf16Nmse);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTest,
    ::testing::Values(
        GemmCase{1, 64, 64, false, false, false}, GemmCase{3, 384, 64, true, false, false},
        GemmCase{111, 576, 1536, false, true, false}, GemmCase{17, 2048, 576, false, false, true},
        GemmCase{256, 1024, 4096, true, false, true}, GemmCase{989, 264, 128, false, true, true},
        GemmCase{1, 4096, 2048, false, false, false, true},
        GemmCase{64, 3072, 2048, false, true, false, true},
        GemmCase{8, 32000, 512, true, false, false, true},
        // every candidate cuBLASLt offers, up to the most
        GemmCase{240, 4096, 1024, false, false, false, true, kMaxAutotuneCandidates},
        // accumulating plans are never timed
        GemmCase{4, 512, 256, false, false, true, true}),
    [](const auto& info) {
      const GemmCase& c = info.param;
      return fmt::format("m{}_n{}_k{}{}{}{}{}", c.m, c.n, c.k, c.f32_out ? "_f32" : "_bf16",
                         c.bias ? "_bias" : "", c.accumulate ? "_acc" : "",
                         c.autotune ? fmt::format("_tuned{}", c.candidates) : "");
    });

TEST(GemmRunnerTest, RefusesBadArgsAndCachesPlansPerShape) {
  CELLM_REQUIRE_GPU();
  auto runner = GemmRunner::create(1 << 20);
  ASSERT_TRUE(runner.ok());
  DeviceArray<bf16> a(64 * 64), b(64 * 64), out(64 * 64);
  DeviceArray<std::byte> workspace(1 << 20);
  GemmArgs args{.a = a.data(),
                .b = b.data(),
                .out = out.data(),
                .m = 64,
                .n = 64,
                .k = 64,
                .lda = 64,
                .ldb = 64,
                .ldc = 64};
  GemmArgs bad = args;
  bad.lda = 60;  // < k
  EXPECT_EQ(runner->run(bad, workspace.data(), nullptr).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.bias = a.data();
  bad.out_dtype = DType::kF32;  // a bias needs bf16 output
  EXPECT_EQ(runner->run(bad, workspace.data(), nullptr).code(), StatusCode::kNotSupported);
  bad = args;
  bad.out_dtype = DType::kF16;
  EXPECT_EQ(runner->run(bad, workspace.data(), nullptr).code(), StatusCode::kNotSupported);
  for (const int candidates : {0, kMaxAutotuneCandidates + 1}) {
    bad = args;
    bad.autotune_candidates = candidates;
    EXPECT_EQ(runner->run(bad, workspace.data(), nullptr).code(), StatusCode::kInvalidArgument)
        << candidates;
  }
  EXPECT_EQ(runner->run(args, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(runner->cached_plans(), 0u);
  ASSERT_TRUE(runner->run(args, workspace.data(), nullptr).is_ok());
  ASSERT_TRUE(runner->run(args, workspace.data(), nullptr).is_ok());
  args.m = 32;
  ASSERT_TRUE(runner->run(args, workspace.data(), nullptr).is_ok());
  EXPECT_EQ(runner->cached_plans(), 2u);
}

// An autotune cannot time anything while a stream is being captured (no
// synchronisation is allowed): a cold shape then takes the heuristic's
// algorithm and the capture stays valid.
TEST(GemmRunnerTest, AutotuneDuringCaptureFallsBackToTheHeuristic) {
  CELLM_REQUIRE_GPU();
  const int m = 4, n = 256, k = 512;
  std::mt19937 rng(5);
  DeviceArray<bf16> da(random_bf16(m * k, rng)), db(random_bf16(n * k, rng)), out(m * n);
  DeviceArray<std::byte> workspace(GemmRunner::kDefaultWorkspaceBytes);
  auto runner = GemmRunner::create(GemmRunner::kDefaultWorkspaceBytes);
  ASSERT_TRUE(runner.ok());
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  GemmArgs args{.a = da.data(),
                .b = db.data(),
                .out = out.data(),
                .m = m,
                .n = n,
                .k = k,
                .lda = k,
                .ldb = k,
                .ldc = n,
                .autotune = true};
  GraphExec::begin_capture(stream->get());
  const Status captured = runner->run(args, workspace.data(), stream->get());
  auto graph = GraphExec::end_capture(stream->get());
  ASSERT_TRUE(captured.is_ok()) << captured.to_string();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  graph->launch(stream->get());
  stream->synchronize();
  EXPECT_EQ(runner->cached_plans(), 1u);
}

TEST(GemmRunnerTest, WarmShapeRunsInsideGraphCapture) {
  CELLM_REQUIRE_GPU();
  const int m = 8, n = 128, k = 256;
  std::mt19937 rng(9);
  const auto a = random_bf16(m * k, rng);
  const auto b = random_bf16(n * k, rng);
  DeviceArray<bf16> da(a), db(b), eager(m * n), graphed(m * n);
  DeviceArray<std::byte> workspace(1 << 22);
  auto runner = GemmRunner::create(1 << 22);
  ASSERT_TRUE(runner.ok());
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  GemmArgs args{.a = da.data(),
                .b = db.data(),
                .out = eager.data(),
                .m = m,
                .n = n,
                .k = k,
                .lda = k,
                .ldb = k,
                .ldc = n};
  ASSERT_TRUE(runner->run(args, workspace.data(), stream->get()).is_ok());
  args.out = graphed.data();
  GraphExec::begin_capture(stream->get());
  const Status captured = runner->run(args, workspace.data(), stream->get());
  auto graph = GraphExec::end_capture(stream->get());
  ASSERT_TRUE(captured.is_ok()) << captured.to_string();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  graph->launch(stream->get());
  stream->synchronize();
  const auto e = eager.download();
  const auto g = graphed.download();
  for (int i = 0; i < m * n; ++i) {
    ASSERT_EQ(std::bit_cast<std::uint16_t>(e[i]), std::bit_cast<std::uint16_t>(g[i])) << i;
  }
}

}  // namespace
}  // namespace cellm::cuda
