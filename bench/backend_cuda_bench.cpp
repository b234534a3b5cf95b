// A/B microbenchmarks of the CUDA kernel variants in the decode shapes of
// Llama-3.2-1B and Llama-3.1-8B, so one GPU run can decide the defaults of
// kernel_choice.h. Each family times the established kernel (variant 0 /
// attention v1) and the new one on the same buffers with CUDA events
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
#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/kernels/kv_scatter.cuh"
#include "backend/cuda/kernels/rope.cuh"
#include "backend/cuda/kernels/rope_scatter.cuh"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/resources.h"
#include "core/check.h"

namespace cellm::cuda {
namespace {

constexpr std::size_t kColdBytes = std::size_t{256} << 20;  // ~5x the H200's L2
constexpr int kLaunchesPerIteration = 20;

bool have_gpu(benchmark::State& state) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    state.SkipWithError("no CUDA device");
    return false;
  }
  return true;
}

template <typename T>
DeviceBuffer<T> filled(std::size_t count, int byte) {
  auto buffer = DeviceBuffer<T>::allocate(std::max<std::size_t>(count, 1));
  CELLM_CHECK(buffer.ok(), "{}", buffer.status().to_string());
  // 0x3c3c as bf16 is ~0.0115: finite, so no kernel takes a NaN path.
  CELLM_CUDA_CHECK(cudaMemset(buffer->data(), byte, buffer->bytes()));
  return std::move(buffer).value();
}

// How many copies of `bytes` keep a cycle through them out of L2.
int copies_for(std::size_t bytes) {
  return static_cast<int>(
      std::clamp<std::size_t>(kColdBytes / std::max<std::size_t>(bytes, 1), 1, 32));
}

// Times `launch(i)` for i = 0, 1, ... with events; reports per-launch time.
template <typename Launch>
void time_launches(benchmark::State& state, double bytes_per_launch, Launch&& launch) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CELLM_CUDA_CHECK(cudaEventCreate(&start));
  CELLM_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch(i);  // warm-up: plans, smem limits
  CELLM_CUDA_CHECK(cudaDeviceSynchronize());
  int next = 0;
  for (auto _ : state) {
    CELLM_CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (int i = 0; i < kLaunchesPerIteration; ++i) launch(next++);
    CELLM_CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CELLM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CELLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms / 1e3 / kLaunchesPerIteration);
  }
  state.counters["bytes"] = bytes_per_launch;
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes_per_launch, benchmark::Counter::kIsIterationInvariantRate);
  CELLM_CUDA_CHECK(cudaEventDestroy(start));
  CELLM_CUDA_CHECK(cudaEventDestroy(stop));
}

// ---- decode attention: args {variant (1 = v1, 2 = v2), head_dim, heads,
// kv_heads, batch, context, split_min_keys, cluster (v2)} ----
void BM_DecodeAttention(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const bool v2 = state.range(0) == 2;
  const auto hd = static_cast<std::int32_t>(state.range(1));
  const auto heads = static_cast<std::int32_t>(state.range(2));
  const auto kv_heads = static_cast<std::int32_t>(state.range(3));
  const auto batch = static_cast<std::int32_t>(state.range(4));
  const auto context = static_cast<std::int32_t>(state.range(5));
  const auto min_keys = static_cast<std::int32_t>(state.range(6));
  const auto cluster = static_cast<std::int32_t>(state.range(7));
  // The forward's tables are as long as the cache's max_seq_len.
  const std::int32_t stride = std::max(context, 32768);
  const std::int64_t cells = static_cast<std::int64_t>(batch) * context + 1;
  const std::size_t pool_elems = static_cast<std::size_t>(cells) * kv_heads * hd;
  const int layers = copies_for(2 * pool_elems * sizeof(bf16));
  std::vector<DeviceBuffer<bf16>> k_pools;
  std::vector<DeviceBuffer<bf16>> v_pools;
  for (int l = 0; l < layers; ++l) {
    k_pools.push_back(filled<bf16>(pool_elems, 0x3c));
    v_pools.push_back(filled<bf16>(pool_elems, 0x3c));
  }
  std::vector<std::int32_t> table(static_cast<std::size_t>(batch) * stride, -1);
  std::vector<std::int32_t> slots(static_cast<std::size_t>(batch));
  std::vector<std::int32_t> positions(static_cast<std::size_t>(batch), context - 1);
  for (std::int32_t t = 0; t < batch; ++t) {
    slots[static_cast<std::size_t>(t)] = t;
    for (std::int32_t p = 0; p < context; ++p) {
      table[static_cast<std::size_t>(t) * stride + p] = 1 + t * context + p;
    }
  }
  auto table_d = filled<std::int32_t>(table.size(), 0);
  auto slots_d = filled<std::int32_t>(slots.size(), 0);
  auto positions_d = filled<std::int32_t>(positions.size(), 0);
  CELLM_CUDA_CHECK(cudaMemcpy(table_d.data(), table.data(), table.size() * 4, cudaMemcpyDefault));
  CELLM_CUDA_CHECK(cudaMemcpy(slots_d.data(), slots.data(), slots.size() * 4, cudaMemcpyDefault));
  CELLM_CUDA_CHECK(
      cudaMemcpy(positions_d.data(), positions.data(), positions.size() * 4, cudaMemcpyDefault));
  const std::int64_t q_stride = static_cast<std::int64_t>(heads + 2 * kv_heads) * hd;
  auto q = filled<bf16>(static_cast<std::size_t>(batch) * q_stride, 0x3c);
  auto out = filled<bf16>(static_cast<std::size_t>(batch) * heads * hd, 0);
  const int sm = multiprocessor_count();
  const std::int32_t splits =
      v2 ? attention_decode_v2_splits(batch, heads, kv_heads, stride, sm, min_keys, 2, cluster)
         : attention_decode_splits(batch, heads, kv_heads, stride, sm);
  auto workspace =
      filled<float>(attention_decode_workspace_bytes(batch, heads, hd, splits) / sizeof(float), 0);
  auto counters = filled<std::int32_t>(attention_decode_v2_counters(batch, heads, kv_heads), 0);

  AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.cell_table = table_d.data();
  p.seq_slots = slots_d.data();
  p.positions = positions_d.data();
  p.q_stride = q_stride;
  p.out_stride = static_cast<std::int64_t>(heads) * hd;
  p.num_tokens = batch;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = hd;
  p.max_cells = static_cast<std::int32_t>(cells);
  p.max_seqs = batch;
  p.table_stride = stride;
  p.scale = 0.125f;
  p.num_splits = splits;
  p.workspace = workspace.data();
  p.split_min_keys = min_keys;
  p.counters = counters.data();
  p.cluster = splits % cluster == 0 ? cluster : 1;
  p.k_pool = k_pools[0].data();
  p.v_pool = v_pools[0].data();
  const Status valid = v2 ? p.validate_decode_v2() : p.validate_decode();
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
    return;
  }
  state.counters["splits"] = splits;
  time_launches(state, 2.0 * static_cast<double>(batch) * context * kv_heads * hd * sizeof(bf16),
                [&](int i) {
                  p.k_pool = k_pools[static_cast<std::size_t>(i % layers)].data();
                  p.v_pool = v_pools[static_cast<std::size_t>(i % layers)].data();
                  if (v2) {
                    launch_attention_decode_v2(p, nullptr);
                  } else {
                    launch_attention_decode(p, nullptr);
                  }
                });
}

void decode_attention_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"v", "hd", "heads", "kv", "batch", "ctx", "min_keys", "cluster"});
  struct Model {
    int hd, heads, kv;
  };
  for (const Model m : {Model{64, 32, 8}, Model{128, 32, 8}}) {
    for (const int batch : {1, 8, 64, 256}) {
      for (const int ctx : {128, 512, 2048, 8192}) {
        if (static_cast<std::int64_t>(batch) * ctx > 256 * 2048) continue;  // > ~2 GB per layer
        for (const int v : {1, 2}) b->Args({v, m.hd, m.heads, m.kv, batch, ctx, 256, 1});
      }
    }
    // Batch 1 as the forward runs it (128 keys per split at least), the
    // splits merged through the counter and in clusters of 8.
    for (const int ctx : {512, 2048, 8192}) {
      for (const int cluster : {1, 8}) b->Args({2, m.hd, m.heads, m.kv, 1, ctx, 128, cluster});
    }
  }
  // The split minimum at batch 1 (v2 only).
  for (const int min_keys : {64, 128, 512}) {
    for (const int ctx : {512, 8192}) b->Args({2, 128, 32, 8, 1, ctx, min_keys, 1});
  }
  b->Args({2, 128, 32, 8, 1, 512, 64, 8});
}
BENCHMARK(BM_DecodeAttention)->Apply(decode_attention_args)->UseManualTime();

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
  auto cells = filled<std::int32_t>(host.size(), 0);
  CELLM_CUDA_CHECK(cudaMemcpy(cells.data(), host.data(), host.size() * 4, cudaMemcpyDefault));
  for (std::int32_t t = 0; t < batch; ++t) host[static_cast<std::size_t>(t)] = 1000 + 7 * t;
  auto positions = filled<std::int32_t>(host.size(), 0);
  CELLM_CUDA_CHECK(cudaMemcpy(positions.data(), host.data(), host.size() * 4, cudaMemcpyDefault));
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
// lm_head), m, n, k, f32 output} ----
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
  if (state.range(0) == 3) {
    g.prologue = GemvPrologue::kRmsNorm;
    g.norm_weight = norm_weight.data();
  }
  const Status valid = g.validate();
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
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
  // Llama-3.2-1B then Llama-3.1-8B: qkv, o, gate_up, down, lm_head.
  const Shape shapes[] = {{3072, 2048, 0},   {2048, 2048, 0},  {16384, 2048, 0}, {2048, 8192, 0},
                          {128256, 2048, 1}, {6144, 4096, 0},  {4096, 4096, 0},  {28672, 4096, 0},
                          {4096, 14336, 0},  {128256, 4096, 1}};
  for (const Shape& s : shapes) {
    for (const int gemv : {0, 1, 2, 3}) b->Args({gemv, 1, s.n, s.k, s.f32});
    for (const int gemv : {0, 2}) b->Args({gemv, 2, s.n, s.k, s.f32});
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
  auto logits = filled<float>(host.size(), 0);
  auto params_d = filled<float>(params.size(), 0);
  auto out = filled<std::int32_t>(static_cast<std::size_t>(rows), 0);
  auto partials = filled<std::int64_t>(argmax_partials_bytes(rows) / sizeof(std::int64_t), 0);
  auto counters = filled<std::int32_t>(static_cast<std::size_t>(rows), 0);
  CELLM_CUDA_CHECK(
      cudaMemcpy(logits.data(), host.data(), host.size() * sizeof(float), cudaMemcpyDefault));
  CELLM_CUDA_CHECK(
      cudaMemcpy(params_d.data(), params.data(), params.size() * sizeof(float), cudaMemcpyDefault));
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
