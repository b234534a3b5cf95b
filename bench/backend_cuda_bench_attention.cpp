// Microbenchmarks of the attention kernels, part of backend_cuda_bench (see
// backend_cuda_bench.cpp): the decode kernels in the decode shapes of
// Llama-3.2-1B and Llama-3.1-8B, K/V cycled past L2 as a forward reads each
// layer's once, reported in bytes/s; and the prefill kernels over whole
// prompts, K/V left in L2 as the step's own rope + scatter leaves them,
// reported in FLOP/s of the causal scores and weighted sums. Both are small
// enough for Nsight Compute to replay quickly, unlike a forward of the 8B
// model (scripts/gpu-profile bench FILTER).
#include <algorithm>
#include <cstdint>
#include <vector>

#include <benchmark/benchmark.h>

#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/launch.h"
#include "backend_cuda_bench_util.h"

namespace cellm::cuda {
namespace {

using bench::copies_for;
using bench::filled;
using bench::have_gpu;
using bench::time_launches;
using bench::uploaded;

// The buffers and fields every attention launch here shares: Q (and the k/v
// columns beside it, as the q/k/v projection leaves them), the output, and
// the sequences' cell table, slots and positions, uploaded from the host.
struct AttentionSetup {
  DeviceBuffer<bf16> q;
  DeviceBuffer<bf16> out;
  DeviceBuffer<std::int32_t> table;
  DeviceBuffer<std::int32_t> slots;
  DeviceBuffer<std::int32_t> positions;
  AttentionParams params;
};

AttentionSetup setup_attention(std::int32_t tokens, std::int32_t heads, std::int32_t kv_heads,
                               std::int32_t hd, std::int32_t cells, std::int32_t seqs,
                               std::int32_t table_stride, const std::vector<std::int32_t>& table,
                               const std::vector<std::int32_t>& slots,
                               const std::vector<std::int32_t>& positions) {
  const std::int64_t q_stride = static_cast<std::int64_t>(heads + 2 * kv_heads) * hd;
  AttentionSetup a{filled<bf16>(static_cast<std::size_t>(tokens) * q_stride, 0x3c),
                   filled<bf16>(static_cast<std::size_t>(tokens) * heads * hd, 0),
                   uploaded(table),
                   uploaded(slots),
                   uploaded(positions),
                   {}};
  AttentionParams& p = a.params;
  p.q = a.q.data();
  p.out = a.out.data();
  p.cell_table = a.table.data();
  p.seq_slots = a.slots.data();
  p.positions = a.positions.data();
  p.q_stride = q_stride;
  p.out_stride = static_cast<std::int64_t>(heads) * hd;
  p.num_tokens = tokens;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = hd;
  p.max_cells = cells;
  p.max_seqs = seqs;
  p.table_stride = table_stride;
  p.scale = 0.125f;
  return a;
}

// ---- decode attention: args {variant (2 = v2, 3 = v2 packed always
// (AttentionParams::pack_wide); the first kernel, 1, is in git history),
// head_dim, heads, kv_heads, batch, context, split_min_keys, cluster} ----
void BM_DecodeAttention(benchmark::State& state) {
  if (!have_gpu(state)) return;
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
  AttentionSetup a = setup_attention(batch, heads, kv_heads, hd, static_cast<std::int32_t>(cells),
                                     batch, stride, table, slots, positions);
  const int sm = multiprocessor_count();
  const std::int32_t splits =
      attention_decode_v2_splits(batch, heads, kv_heads, stride, sm, min_keys, 2, cluster);
  auto workspace =
      filled<float>(attention_decode_workspace_bytes(batch, heads, hd, splits) / sizeof(float), 0);
  auto counters = filled<std::int32_t>(attention_decode_v2_counters(batch, heads, kv_heads), 0);

  AttentionParams& p = a.params;
  p.num_splits = splits;
  p.workspace = workspace.data();
  p.split_min_keys = min_keys;
  p.counters = counters.data();
  p.cluster = splits % cluster == 0 ? cluster : 1;
  p.k_pool = k_pools[0].data();
  p.v_pool = v_pools[0].data();
  p.pack_wide = state.range(0) == 3 ? PackWide::kAlways : PackWide::kNever;
  const Status valid = p.validate_decode_v2();
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
    return;
  }
  state.counters["splits"] = splits;
  time_launches(state, 2.0 * static_cast<double>(batch) * context * kv_heads * hd * sizeof(bf16),
                [&](int i) {
                  p.k_pool = k_pools[static_cast<std::size_t>(i % layers)].data();
                  p.v_pool = v_pools[static_cast<std::size_t>(i % layers)].data();
                  launch_attention_decode_v2(p, nullptr);
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
        b->Args({2, m.hd, m.heads, m.kv, batch, ctx, 256, 1});
        // Packing, for wide steps of 128-wide heads.
        if (batch >= 64 && m.hd == 128) b->Args({3, m.hd, m.heads, m.kv, batch, ctx, 256, 1});
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

// ---- prefill attention: args {variant (2 = v2; the first kernel, 1, is in
// git history), head_dim, heads, kv_heads, prompts, prompt length} ----
// One launch attends every row of `prompts` prompts of the same length, each
// its own sequence with its keys in consecutive cells, as a step of fresh
// prompts does (8 x 512: a serving step's prefill half).
void BM_PrefillAttention(benchmark::State& state) {
  if (!have_gpu(state)) return;
  const auto hd = static_cast<std::int32_t>(state.range(1));
  const auto heads = static_cast<std::int32_t>(state.range(2));
  const auto kv_heads = static_cast<std::int32_t>(state.range(3));
  const auto prompts = static_cast<std::int32_t>(state.range(4));
  const auto length = static_cast<std::int32_t>(state.range(5));
  const std::int32_t tokens = prompts * length;
  const std::int32_t cells = tokens + 1;
  const std::size_t pool_elems = static_cast<std::size_t>(cells) * kv_heads * hd;
  auto k_pool = filled<bf16>(pool_elems, 0x3c);
  auto v_pool = filled<bf16>(pool_elems, 0x3c);
  std::vector<std::int32_t> table(static_cast<std::size_t>(tokens));
  std::vector<std::int32_t> slots(static_cast<std::size_t>(tokens));
  std::vector<std::int32_t> positions(static_cast<std::size_t>(tokens));
  for (std::int32_t t = 0; t < tokens; ++t) {
    table[static_cast<std::size_t>(t)] = 1 + t;
    slots[static_cast<std::size_t>(t)] = t / length;
    positions[static_cast<std::size_t>(t)] = t % length;
  }
  AttentionSetup a =
      setup_attention(tokens, heads, kv_heads, hd, cells, prompts, length, table, slots, positions);
  AttentionParams& p = a.params;
  p.k_pool = k_pool.data();
  p.v_pool = v_pool.data();
  const Status valid = p.validate();
  if (!valid.is_ok()) {
    state.SkipWithError(valid.to_string().c_str());
    return;
  }
  // Q, K and V read once, the output written once (the floor, not what the
  // kernels move: they read K/V once per q head and row tile).
  const double bytes =
      static_cast<double>(tokens) * hd * sizeof(bf16) * (2.0 * heads + 2.0 * kv_heads);
  time_launches(state, bytes, [&](int) { launch_attention_prefill_v2(p, nullptr); });
  // Row r of a prompt scores r + 1 keys and sums as many values: 4 * hd FLOP
  // a key and head.
  const double keys = static_cast<double>(prompts) * length * (length + 1.0) / 2.0;
  const double flops = 4.0 * hd * heads * keys;
  state.counters["flops"] = flops;
  state.counters["flops_per_second"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

void prefill_attention_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"v", "hd", "heads", "kv", "prompts", "len"});
  struct Shape {
    int prompts, length;
  };
  for (const int hd : {64, 128}) {
    for (const Shape s : {Shape{1, 512}, Shape{8, 512}, Shape{1, 2048}, Shape{1, 4096}}) {
      b->Args({2, hd, 32, 8, s.prompts, s.length});
    }
  }
}
BENCHMARK(BM_PrefillAttention)->Apply(prefill_attention_args)->UseManualTime();

}  // namespace
}  // namespace cellm::cuda
