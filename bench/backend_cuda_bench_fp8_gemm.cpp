// Wide steps (prefill chunks, batched decode) over an FP8 projection in the
// shapes of Llama-3.1-8B (q/k/v, o, gate/up, down) at m = 64 and 512, three
// ways: path 0, the FP8 path of CudaForward::project_wide (the input rows
// quantized per token, kernels/quantize_fp8.cuh, then one cuBLASLt FP8 GEMM
// with per-row scales, gemm_fp8.h); path 1, the dequantize path it replaces
// (the E4M3 rows dequantized into a 64 MiB bf16 scratch chunk by chunk, one
// bf16 GEMM per chunk); path 2, a plain bf16 cuBLASLt GEMM over bf16 weights
// (what a bf16 model runs); path 3, path 0 with cuBLASLt's fast
// accumulation (Fp8GemmArgs::fast_accum). Each launch is the whole projection; weights are
// cycled through enough copies to start cold in L2. `flops_per_second` is
// 2 m n k per launch.
// Run: backend_cuda_bench --benchmark_filter=WideFp8 --benchmark_counters_tabular=true
#include <algorithm>
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_fp8.h"
#include "backend/cuda/kernels/qgemv.cuh"
#include "backend/cuda/kernels/quantize_fp8.cuh"
#include "backend_cuda_bench_util.h"
#include "cellm/status.h"
#include "core/check.h"

namespace cellm::cuda::bench {
namespace {

constexpr std::size_t kScratchBytes = std::size_t{64} << 20;  // CudaForward::kQuantScratchBytes

void BM_WideFp8Gemm(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const int path = static_cast<int>(state.range(0));
  const auto m = static_cast<std::int32_t>(state.range(1));
  const auto n = static_cast<std::int32_t>(state.range(2));
  const auto k = static_cast<std::int32_t>(state.range(3));
  const std::size_t elems = static_cast<std::size_t>(n) * k;
  const std::size_t weight_bytes = path == 2 ? elems * sizeof(bf16) : elems;
  const int copies = copies_for(weight_bytes);
  // 0x3c: E4M3 1.5 and bf16 ~0.0115, so every path multiplies finite values.
  std::vector<DeviceBuffer<std::uint8_t>> weights;
  for (int i = 0; i < copies; ++i) weights.push_back(filled<std::uint8_t>(weight_bytes, 0x3c));
  auto weight_scales = filled<float>(static_cast<std::size_t>(n), 0x3c);
  auto a = filled<bf16>(static_cast<std::size_t>(m) * k, 0x3c);
  auto out = filled<bf16>(static_cast<std::size_t>(m) * n, 0);
  auto a_fp8 = filled<std::uint8_t>(static_cast<std::size_t>(m) * k, 0);
  auto a_scales = filled<float>(static_cast<std::size_t>(m), 0);
  auto scratch = filled<bf16>(kScratchBytes / sizeof(bf16), 0);
  auto workspace = filled<std::byte>(GemmRunner::kDefaultWorkspaceBytes, 0);
  auto bf16_gemm = GemmRunner::create(GemmRunner::kDefaultWorkspaceBytes);
  CELLM_CHECK(bf16_gemm.ok(), "{}", bf16_gemm.status().to_string());
  auto fp8_gemm = Fp8GemmRunner::create(GemmRunner::kDefaultWorkspaceBytes);
  CELLM_CHECK(fp8_gemm.ok(), "{}", fp8_gemm.status().to_string());

  QuantizeFp8Params q;
  q.a = a.data();
  q.lda = k;
  q.m = m;
  q.k = k;
  q.out = a_fp8.data();
  q.ldo = k;
  q.scales = a_scales.data();
  Fp8GemmArgs f;
  f.a = a_fp8.data();
  f.a_scales = a_scales.data();
  f.b_scales = weight_scales.data();
  f.out = out.data();
  f.m = m;
  f.n = n;
  f.k = k;
  f.lda = k;
  f.ldb = k;
  f.ldc = n;
  GemmArgs g;
  g.a = a.data();
  g.m = m;
  g.k = k;
  g.lda = k;
  g.ldb = k;
  g.ldc = n;
  const std::int64_t chunk_rows = std::max<std::int64_t>(
      64, static_cast<std::int64_t>(kScratchBytes / sizeof(bf16)) / k / 64 * 64);
  Status valid = q.validate();
  if (valid.is_ok()) {
    f.b = weights[0].data();
    valid = f.validate();
  }
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
    return;
  }
  time_launches(state, static_cast<double>(weight_bytes), [&](int i) {
    const std::uint8_t* w = weights[static_cast<std::size_t>(i % copies)].data();
    Status status = Status::ok();
    if (path == 0 || path == 3) {
      launch_quantize_fp8(q, nullptr);
      f.fast_accum = path == 3;
      f.b = w;
      status = fp8_gemm->run(f, workspace.data(), nullptr);
    } else if (path == 1) {
      for (std::int64_t r0 = 0; r0 < n && status.is_ok(); r0 += chunk_rows) {
        const std::int64_t rows = std::min<std::int64_t>(chunk_rows, n - r0);
        DequantParams d;
        d.w = w + r0 * k;
        d.type = QuantType::kF8_E4M3;
        d.rows = rows;
        d.cols = k;
        d.ldw_bytes = k;
        d.out = scratch.data();
        d.ldo = k;
        d.scales = {weight_scales.data() + r0, k, 1};
        launch_dequantize(d, nullptr);
        g.b = scratch.data();
        g.out = out.data() + r0;
        g.n = rows;
        status = bf16_gemm->run(g, workspace.data(), nullptr);
      }
    } else {
      g.b = reinterpret_cast<const bf16*>(w);
      g.out = out.data();
      g.n = n;
      status = bf16_gemm->run(g, workspace.data(), nullptr);
    }
    CELLM_CHECK(status.is_ok(), "{}", status.to_string());
  });
  state.counters["flops_per_second"] = benchmark::Counter(
      2.0 * m * static_cast<double>(n) * k, benchmark::Counter::kIsIterationInvariantRate);
}

void wide_fp8_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"path", "m", "n", "k"});
  struct Shape {
    int n, k;
  };
  // Llama-3.1-8B: q/k/v, o, gate/up, down.
  const Shape shapes[] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}};
  for (const Shape& s : shapes) {
    for (const int m : {64, 512}) {
      for (const int path : {0, 3, 1, 2}) b->Args({path, m, s.n, s.k});
    }
  }
}
BENCHMARK(BM_WideFp8Gemm)->Apply(wide_fp8_args)->UseManualTime();

}  // namespace
}  // namespace cellm::cuda::bench
