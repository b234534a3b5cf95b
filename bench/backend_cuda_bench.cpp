// A/B microbenchmarks of the CUDA kernel variants in the decode shapes of
// Llama-3.2-1B and Llama-3.1-8B (the GEMVs' also in Gemma 3 270M's), so one
// GPU run can decide the defaults of kernel_choice.h (the attention kernels' are in
// backend_cuda_bench_attention.cpp). Each family times the established
// kernel (variant 0) and the new one on the same buffers with CUDA events
// (manual time, per launch), and reports `bytes` moved per launch and the
// achieved rate (`bytes_per_second`) against the ~4.3 TB/s copy roofline.
// Buffers are cycled over several copies ("layers") past the 50 MB L2, as a
// forward pass reads each layer's weights and KV once.
// The device sampler is timed on the logits of a Llama-3 vocabulary.
// Run: backend_cuda_bench --benchmark_filter=Decode --benchmark_counters_tabular=true
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/gemv_mma.cuh"
#include "backend/cuda/kernels/kv_scatter.cuh"
#include "backend/cuda/kernels/rope.cuh"
#include "backend/cuda/kernels/rope_scatter.cuh"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/resources.h"
#include "backend_cuda_bench_util.h"
#include "core/check.h"

namespace cellm::cuda {
namespace {

using bench::copies_for;
using bench::filled;
using bench::have_gpu;
using bench::time_launches;
using bench::uploaded;

// ---- rope + KV scatter: args {variant (0 = rope then kv_scatter, 1 = fused),
// head_dim, heads, kv_heads, batch} ----
void BM_RopeScatter(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const bool fused = state.range(0) == 1;
  const auto hd = static_cast<std::int32_t>(state.range(1));
  const auto heads = static_cast<std::int32_t>(state.range(2));
  const auto kv_heads = static_cast<std::int32_t>(state.range(3));
  const auto batch = static_cast<std::int32_t>(state.range(4));
  const std::int64_t stride = static_cast<std::int64_t>(heads + 2 * kv_heads) * hd;
  const std::int32_t max_cells = batch + 1;
  auto qkv = filled<bf16>(static_cast<std::size_t>(batch) * stride, 0x3c);
  auto k_pool = filled<bf16>(static_cast<std::size_t>(max_cells) * kv_heads * hd, 0);
  auto v_pool = filled<bf16>(static_cast<std::size_t>(max_cells) * kv_heads * hd, 0);
  std::vector<std::int32_t> host(static_cast<std::size_t>(batch));
  for (std::int32_t t = 0; t < batch; ++t) host[static_cast<std::size_t>(t)] = t + 1;
  auto cells = uploaded(host);
  for (std::int32_t t = 0; t < batch; ++t) host[static_cast<std::size_t>(t)] = 1000 + 7 * t;
  auto positions = uploaded(host);
  auto inv_freq = filled<float>(static_cast<std::size_t>(hd / 2), 0x38);  // ~4e-5
  bf16* q = qkv.data();
  bf16* k = q + static_cast<std::int64_t>(heads) * hd;
  bf16* v = k + static_cast<std::int64_t>(kv_heads) * hd;

  RopeParams rope{q,  k, positions.data(), inv_freq.data(), stride, stride, batch, heads, kv_heads,
                  hd, hd};
  KvScatterParams sc;
  sc.k = k;
  sc.v = v;
  sc.k_pool = k_pool.data();
  sc.v_pool = v_pool.data();
  sc.cells = cells.data();
  sc.k_stride = stride;
  sc.v_stride = stride;
  sc.num_tokens = batch;
  sc.num_kv_heads = kv_heads;
  sc.head_dim = hd;
  sc.max_cells = max_cells;
  RopeScatterParams rs;
  rs.q = q;
  rs.k = k;
  rs.v = v;
  rs.k_pool = k_pool.data();
  rs.v_pool = v_pool.data();
  rs.cells = cells.data();
  rs.positions = positions.data();
  rs.inv_freq = inv_freq.data();
  rs.q_stride = stride;
  rs.k_stride = stride;
  rs.v_stride = stride;
  rs.num_tokens = batch;
  rs.num_heads = heads;
  rs.num_kv_heads = kv_heads;
  rs.head_dim = hd;
  rs.rotary_dim = hd;
  rs.max_cells = max_cells;
  const Status valid = fused ? rs.validate() : rope.validate();
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
    return;
  }
  // q and k read and written, v read, k and v written to the pool.
  const double bytes = static_cast<double>(batch) * hd * sizeof(bf16) *
                       (2.0 * heads + 4.0 * kv_heads + 2.0 * kv_heads);
  time_launches(state, bytes, [&](int) {
    if (fused) {
      launch_rope_scatter(rs, nullptr);
    } else {
      launch_rope(rope, nullptr);
      launch_kv_scatter(sc, nullptr);
    }
  });
}

void rope_scatter_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"fused", "hd", "heads", "kv", "batch"});
  for (const int hd : {64, 128}) {
    for (const int batch : {1, 8, 64, 256}) {
      for (const int fused : {0, 1}) b->Args({fused, hd, 32, 8, batch});
    }
  }
}
BENCHMARK(BM_RopeScatter)->Apply(rope_scatter_args)->UseManualTime();

// ---- linear layers at decode widths: args {variant (0 = cuBLASLt, 1 = GEMV,
// 2 = GEMV launched with programmatic dependent launch, so each launch
// streams its first weights while the one before it finishes, as in the
// forward's chain; 3 = as 2 with the RMSNorm prologue of q/k/v, gate/up and
// lm_head; 4 = as 2 on tensor cores, all m rows in one mma column each;
// 5 = as 3 on tensor cores), m, n, k, f32 output}. Variants 4 and 5 skip
// with an error where the rows do not fit the tensor-core kernel's shared
// memory (the forward then runs the call on CUDA cores: variant 2 or 3). ----
void BM_DecodeGemm(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const bool gemv = state.range(0) >= 1;
  const auto m = static_cast<std::int32_t>(state.range(1));
  const auto n = static_cast<std::int32_t>(state.range(2));
  const auto k = static_cast<std::int32_t>(state.range(3));
  const bool f32 = state.range(4) == 1;
  const std::size_t weight_elems = static_cast<std::size_t>(n) * k;
  const int copies = copies_for(weight_elems * sizeof(bf16));
  std::vector<DeviceBuffer<bf16>> weights;
  for (int i = 0; i < copies; ++i) weights.push_back(filled<bf16>(weight_elems, 0x3c));
  auto a = filled<bf16>(static_cast<std::size_t>(m) * k, 0x3c);
  auto out = filled<float>(static_cast<std::size_t>(m) * n, 0);  // big enough for either type
  auto workspace = filled<std::byte>(GemmRunner::kDefaultWorkspaceBytes, 0);
  auto runner = GemmRunner::create(GemmRunner::kDefaultWorkspaceBytes);
  CELLM_CHECK(runner.ok(), "{}", runner.status().to_string());
  GemvParams g = gemv_dense(a.data(), weights[0].data(), out.data(), m, n, k);
  g.out_f32 = f32;
  g.pdl = state.range(0) >= 2;
  auto norm_weight = filled<bf16>(static_cast<std::size_t>(k), 0x3c);
  if (state.range(0) == 3 || state.range(0) == 5) {
    g.prologue = GemvPrologue::kRmsNorm;
    g.norm_weight = norm_weight.data();
  }
  g.tensor_cores = state.range(0) >= 4;
  const Status valid = g.validate();
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
    return;
  }
  if (g.tensor_cores && !gemv_uses_tensor_cores(g)) {
    state.SkipWithError("the rows do not fit the tensor-core GEMV (CUDA cores run it)");
    return;
  }
  GemmArgs args;
  args.a = a.data();
  args.out = out.data();
  args.m = m;
  args.n = n;
  args.k = k;
  args.lda = k;
  args.ldb = k;
  args.ldc = n;
  args.out_dtype = f32 ? DType::kF32 : DType::kBF16;
  const double bytes = static_cast<double>(weight_elems) * sizeof(bf16);
  time_launches(state, bytes, [&](int i) {
    const bf16* w = weights[static_cast<std::size_t>(i % copies)].data();
    if (gemv) {
      g.w = w;
      launch_gemv(g, nullptr);
    } else {
      args.b = w;
      const Status status = runner->run(args, workspace.data(), nullptr);
      CELLM_CHECK(status.is_ok(), "{}", status.to_string());
    }
  });
}

void decode_gemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"gemv", "m", "n", "k", "f32"});
  struct Shape {
    int n, k, f32;
  };
  // Llama-3.2-1B, Llama-3.1-8B, then Gemma 3 270M (its lm_head left out:
  // a 262144-row vocabulary): qkv, o, gate_up, down, lm_head.
  const Shape shapes[] = {{3072, 2048, 0},   {2048, 2048, 0},   {16384, 2048, 0}, {2048, 8192, 0},
                          {128256, 2048, 1}, {6144, 4096, 0},   {4096, 4096, 0},  {28672, 4096, 0},
                          {4096, 14336, 0},  {128256, 4096, 1}, {1536, 640, 0},   {640, 1024, 0},
                          {4096, 640, 0},    {640, 2048, 0}};
  for (const Shape& s : shapes) {
    for (const int m : {1, 2, 4, 8}) {
      for (const int gemv : {0, 1, 2, 3, 4, 5}) {
        if (gemv == 1 && m > 1) continue;  // the chain's launches are pdl
        b->Args({gemv, m, s.n, s.k, s.f32});
      }
    }
  }
}
BENCHMARK(BM_DecodeGemm)->Apply(decode_gemm_args)->UseManualTime();

// ---- the device sampler on [rows, 128256] logits drawn from N(0, 3^2)
// (top-p 0.95 then keeps ~1,200 ids): args {policy (0 = argmax on one block
// per row, 1 = argmax split over blocks, 2 = temperature 0.8 over the whole
// vocabulary, 3 = and top-p 0.95, 4 = and top-k 40), rows, cluster (draws: a
// cluster of blocks per row), candidates (top-k/top-p over candidate sets)}.
// The logits stay in L2 as a step's do. ----
void BM_Sample(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const auto policy = static_cast<int>(state.range(0));
  const auto rows = static_cast<std::int32_t>(state.range(1));
  const bool cluster = state.range(2) == 1;
  const bool candidates = state.range(3) == 1;
  constexpr std::int32_t kVocab = 128256;
  std::vector<float> host(static_cast<std::size_t>(rows) * kVocab);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (float& x : host) x = dist(rng);
  std::vector<float> params;
  for (std::int32_t r = 0; r < rows; ++r) {
    const float top_p = policy == 3 ? 0.95f : 0.0f;
    const float top_k = policy == 4 ? 40.0f : 0.0f;
    params.insert(params.end(), {0.8f, top_p, top_k, 0.37f});
  }
  auto logits = uploaded(host);
  auto params_d = uploaded(params);
  auto out = filled<std::int32_t>(static_cast<std::size_t>(rows), 0);
  auto partials = filled<std::int64_t>(argmax_partials_bytes(rows) / sizeof(std::int64_t), 0);
  auto counters = filled<std::int32_t>(static_cast<std::size_t>(rows), 0);
  SampleParams p;
  p.logits = logits.data();
  p.params = params_d.data();
  p.out = out.data();
  p.logits_stride = kVocab;
  p.rows = rows;
  p.vocab = kVocab;
  p.cluster = cluster;
  p.candidates = candidates;
  if (policy == 1) {
    p.argmax_partials = partials.data();
    p.argmax_counters = counters.data();
  }
  time_launches(state, static_cast<double>(host.size() * sizeof(float)), [&](int) {
    if (policy <= 1) {
      launch_sample_argmax(p, nullptr);
    } else {
      launch_sample(p, nullptr);
    }
  });
}

void sample_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"policy", "rows", "cluster", "candidates"});
  for (const int rows : {1, 8, 64, 256}) {
    for (int policy = 0; policy <= 4; ++policy) {
      for (const int cluster : {0, 1}) {
        if (cluster == 1 && policy < 2) continue;
        b->Args({policy, rows, cluster, 1});
        if (policy >= 3) b->Args({policy, rows, cluster, 0});
      }
    }
  }
}
BENCHMARK(BM_Sample)->Apply(sample_args)->UseManualTime();

}  // namespace
}  // namespace cellm::cuda
