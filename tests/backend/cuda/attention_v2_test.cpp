// Decode attention v2 against the float64 reference, over the real shapes (head dims 64/128/256 and
// a generic 80, GQA groups 1..32, contexts 1..8192, windows, soft caps, batch 1..256, split
// counts 1..64), plus determinism, the merges (counter, cluster pull and
// push), the refill order and the packed layout giving the same bits, graph
// replay for a new mix, the counters left at zero, the split plan and the
// refusals (these last run without a GPU).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "backend/cuda/kernels/attention.cuh"
#include "backend/cuda/kernels/gemv.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/resources.h"
#include "cellm/status.h"
#include "decode_cases.h"
#include "decode_reference.h"
#include "gpu_test_util.h"

namespace cellm::cuda {
namespace {

using testing::as_double;
using testing::DecodeCase;
using testing::DecodeDevice;
using testing::DecodeScenario;
using testing::DeviceArray;
using testing::expect_empty_rows_zero;
using testing::kAttentionNmse;
using testing::nmse;
using testing::to_float;

// One v2 launch into a poisoned output, and what it wrote.
std::vector<bf16> launch_and_read(DecodeDevice& d, const AttentionParams& p) {
  d.out.poison();
  launch_attention_decode_v2(p, nullptr);
  return d.out.download();
}

class DecodeV2Test : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(DecodeV2Test, MatchesReference) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c = GetParam();
  const DecodeScenario s = testing::make_decode_scenario(c);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  DecodeDevice d(c, s);
  const AttentionParams p = d.params(c, s, scale);
  ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
  const auto ref = testing::decode_reference(c, s, scale);

  d.out.poison();
  launch_attention_decode_v2(p, nullptr);
  const auto v2 = to_float(d.out.download());

  EXPECT_LT(nmse(v2, ref), kAttentionNmse) << "v2 against the reference";
  expect_empty_rows_zero(c, s, v2, "v2");
  // Every launch that finishes leaves the split counters at zero.
  for (const std::int32_t counter : d.counters.download()) ASSERT_EQ(counter, 0);
}

// The same splits launched in clusters of 2, 4 and 8: tokens whose used
// splits fit in a cluster merge in distributed shared memory, the others
// through the counter as before; both orders of summation are the split
// order, so the outputs agree to far below the reference tolerance.
TEST_P(DecodeV2Test, ClusteredLaunchesMergeLikeTheCounterPath) {
  CELLM_REQUIRE_GPU();
  DecodeCase c = GetParam();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int base_splits = testing::make_decode_scenario(c).splits;
  if (base_splits < 2) GTEST_SKIP() << "one split: nothing to merge";
  for (const int cluster : {2, 4, 8}) {
    c.splits = std::min(kAttentionMaxSplits, (base_splits + cluster - 1) / cluster * cluster);
    const DecodeScenario s = testing::make_decode_scenario(c);
    DecodeDevice d(c, s);
    AttentionParams p = d.params(c, s, scale);
    ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
    d.out.poison();
    launch_attention_decode_v2(p, nullptr);
    const auto counter_path = to_float(d.out.download());
    p.cluster = cluster;
    ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
    d.out.poison();
    launch_attention_decode_v2(p, nullptr);
    const auto clustered = to_float(d.out.download());
    EXPECT_LT(nmse(clustered, testing::decode_reference(c, s, scale)), kAttentionNmse)
        << "cluster " << cluster;
    EXPECT_LT(nmse(clustered, as_double(counter_path)), 1e-6) << "cluster " << cluster;
    expect_empty_rows_zero(c, s, clustered, "clustered");
    for (const std::int32_t counter : d.counters.download()) ASSERT_EQ(counter, 0);
  }
}

// Which keys a row reads before the programmatic-launch wait changes when it
// reads them, never what it computes: with fresh_from at the row's own key,
// several tiles back, 0 (every key waits) or past it (none waits), and with
// and without the step's cells, the outputs equal those of the launch that
// reads everything after the wait, bit for bit, clustered or not.
TEST_P(DecodeV2Test, SettledKeysReadBeforeTheWaitChangeNothing) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c = GetParam();
  const DecodeScenario s = testing::make_decode_scenario(c);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  DecodeDevice d(c, s);
  std::vector<std::int32_t> fresh(s.slots.size());
  std::vector<std::int32_t> cells(s.slots.size(), 0);
  for (std::size_t t = 0; t < s.slots.size(); ++t) {
    const int pos = s.positions[t];
    const int choice = static_cast<int>(t % 4);
    fresh[t] = choice == 0 ? pos : choice == 1 ? std::max(0, pos - 70) : choice == 2 ? 0 : pos + 1;
    if (s.slots[t] >= 0 && pos >= 0) {
      cells[t] = s.table[static_cast<std::size_t>(s.slots[t]) * s.table_stride +
                         static_cast<std::size_t>(pos)];
    }
  }
  DeviceArray<std::int32_t> fresh_d(fresh);
  DeviceArray<std::int32_t> cells_d(cells);
  for (const int cluster : {1, 8}) {
    AttentionParams p = d.params(c, s, scale);
    if (cluster > 1 && p.num_splits % cluster != 0) continue;
    p.cluster = cluster;
    p.pdl = true;
    ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
    const auto after_wait = launch_and_read(d, p);
    EXPECT_LT(nmse(to_float(after_wait), testing::decode_reference(c, s, scale)), kAttentionNmse);
    for (const bool with_cells : {false, true}) {
      p.fresh_from = fresh_d.data();
      p.cells = with_cells ? cells_d.data() : nullptr;
      const auto early = launch_and_read(d, p);
      ASSERT_EQ(0, std::memcmp(after_wait.data(), early.data(), early.size() * sizeof(bf16)))
          << "cluster " << cluster << (with_cells ? ", with cells" : ", table only");
    }
    for (const std::int32_t counter : d.counters.download()) ASSERT_EQ(counter, 0);
  }
}

// The packed layout (AttentionParams::pack_wide: unpadded, swizzled K/V
// tiles in two stages, the next tile requested before the wait) stores the
// same keys and sums them in the same order: launches give the same bits with
// it, clustered or not, with and without keys read before the wait (whose
// first iteration waits for every copy).
TEST(DecodeV2Test, PackedWideLaunchesGiveTheSameBits) {
  CELLM_REQUIRE_GPU();
  const DecodeCase cases[] = {
      // Llama-3.1-8B heads at batch 64, one split.
      DecodeCase{32, 8, 128, 64, 1, 600, 0, 0.0f, 1, 256, 41},
      // Batch 256, short contexts, heuristic splits.
      DecodeCase{8, 2, 128, 256, 1, 130, 0, 0.0f, 0, 256, 42},
      // Generic head dim 80 in the 128 bucket, soft cap, 8 splits.
      DecodeCase{8, 4, 80, 24, 1, 900, 0, 30.0f, 8, 64, 43},
      // Window, 16 splits over long histories.
      DecodeCase{8, 2, 128, 24, 2000, 3000, 100, 0.0f, 16, 128, 44},
  };
  for (const DecodeCase& c : cases) {
    const DecodeScenario s = testing::make_decode_scenario(c);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    DecodeDevice d(c, s);
    std::vector<std::int32_t> fresh(s.slots.size());
    for (std::size_t t = 0; t < s.slots.size(); ++t) {
      // Rows alternate between every key settled and the last 70 fresh.
      fresh[t] = t % 2 == 0 ? s.positions[t] : std::max(0, s.positions[t] - 70);
    }
    DeviceArray<std::int32_t> fresh_d(fresh);
    for (const int cluster : {1, 8}) {
      for (const bool early_keys : {false, true}) {
        AttentionParams p = d.params(c, s, scale);
        if (cluster > 1 && p.num_splits % cluster != 0) continue;
        p.cluster = cluster;
        p.pdl = true;
        if (early_keys) p.fresh_from = fresh_d.data();
        ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
        const auto padded = launch_and_read(d, p);
        p.pack_wide = PackWide::kAlways;
        ASSERT_TRUE(attention_decode_v2_packs(p)) << "seed " << c.seed;
        const auto packed = launch_and_read(d, p);
        const std::string where = fmt::format("seed {} cluster {} keys read before the wait {}",
                                              c.seed, cluster, early_keys);
        ASSERT_EQ(0, std::memcmp(padded.data(), packed.data(), padded.size() * sizeof(bf16)))
            << where;
        EXPECT_LT(nmse(to_float(packed), testing::decode_reference(c, s, scale)), kAttentionNmse)
            << where;
        for (const std::int32_t counter : d.counters.download()) ASSERT_EQ(counter, 0) << where;
      }
    }
  }
}

// Where packing is left to the waves it saves, a grid that runs in one wave
// at two blocks an SM stays padded, and one block more packs (three blocks an
// SM hold it in one wave). Only the grid is looked at: nothing launches.
TEST(DecodeV2Test, PacksWhereItSavesAWave) {
  CELLM_REQUIRE_GPU();
  AttentionParams p;
  p.num_heads = 1;
  p.num_kv_heads = 1;  // one block a row
  p.head_dim = 128;
  p.num_splits = 1;
  p.pack_wide = PackWide::kWhereItSavesAWave;
  const int padded_wave =
      multiprocessor_count() * blocks_per_sm_by_smem(attention_decode_v2_smem_bytes(128));
  ASSERT_GE(padded_wave, multiprocessor_count());
  for (const int rows : {1, padded_wave / 2, padded_wave}) {
    p.num_tokens = rows;
    EXPECT_FALSE(attention_decode_v2_packs(p)) << rows << " rows";
  }
  p.num_tokens = padded_wave + 1;
  EXPECT_TRUE(attention_decode_v2_packs(p)) << padded_wave + 1 << " rows";
  p.pack_wide = PackWide::kNever;
  EXPECT_FALSE(attention_decode_v2_packs(p));
  // 64-wide heads have no packed layout.
  p.pack_wide = PackWide::kAlways;
  EXPECT_TRUE(attention_decode_v2_packs(p));
  p.head_dim = 64;
  EXPECT_FALSE(attention_decode_v2_packs(p));
}

// Every token here fits in one cluster of 8 (at most 512 keys, 64 per split),
// so no block may touch the counters: with them preset to a value the
// counter path would never finish on, only the cluster merge can write the
// right output, and the counters must come back unchanged.
TEST(DecodeV2Test, ShortHistoriesMergeInTheClusterWithoutTheCounter) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c{32, 8, 128, 6, 65, 512, 0, 0.0f, 8, 64, 51};
  const DecodeScenario s = testing::make_decode_scenario(c);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  DecodeDevice d(c, s);
  AttentionParams p = d.params(c, s, scale);
  p.cluster = 8;
  ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
  const std::vector<std::int32_t> sentinel(d.counters.download().size(), 1000);
  d.counters.assign(sentinel);
  d.out.poison();
  launch_attention_decode_v2(p, nullptr);
  EXPECT_LT(nmse(to_float(d.out.download()), testing::decode_reference(c, s, scale)),
            kAttentionNmse);
  EXPECT_EQ(d.counters.download(), sentinel);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeV2Test,
                         ::testing::ValuesIn(testing::model_decode_cases(
                             11,
                             {
                                 // Group 4 at head dim 128, contexts 1..8192.
                                 DecodeCase{8, 2, 128, 5, 1, 8192, 0, 0.0f, 0, 256, 13},
                                 // Group 16 (one full block).
                                 DecodeCase{16, 1, 64, 4, 1, 700, 0, 0.0f, 8, 64, 16},
                                 // Generic head dim in the 128 bucket, group 2, soft cap.
                                 DecodeCase{8, 4, 80, 6, 1, 300, 0, 30.0f, 4, 64, 18},
                                 // Batch 256, short contexts.
                                 DecodeCase{8, 2, 128, 256, 1, 130, 0, 0.0f, 0, 256, 19},
                                 // The most splits with a window, one key minimum.
                                 DecodeCase{8, 2, 64, 7, 1, 3000, 100, 0.0f, 64, 1, 20},
                                 // Long history, small window, splits left unused past the window.
                                 DecodeCase{8, 2, 128, 4, 5000, 8192, 64, 0.0f, 32, 256, 21},
                                 // Context 1 only.
                                 DecodeCase{8, 2, 64, 4, 1, 1, 0, 0.0f, 4, 256, 23},
                             })),
                         [](const auto& info) { return testing::decode_case_name(info.param); });

TEST(DecodeV2Test, RepeatedLaunchesAreBitwiseEqual) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c{32, 8, 128, 3, 1, 4000, 0, 0.0f, 32, 64, 31};
  const DecodeScenario s = testing::make_decode_scenario(c);
  DecodeDevice d(c, s);
  const AttentionParams p = d.params(c, s, 0.088f);
  ASSERT_TRUE(p.validate_decode_v2().is_ok());
  launch_attention_decode_v2(p, nullptr);
  const auto first = d.out.download();
  for (int round = 0; round < 3; ++round) {
    const auto again = launch_and_read(d, p);
    ASSERT_EQ(0, std::memcmp(first.data(), again.data(), first.size() * sizeof(bf16)))
        << "round " << round;
  }
}

// One block an SM (AttentionParams::spread) changes where the blocks run,
// not what they compute: a batch-1 launch that fits the SMs gives the same
// bits with and without it, clustered or not; one too wide to fit ignores it.
TEST(DecodeV2Test, SpreadLaunchesGiveTheSameBits) {
  CELLM_REQUIRE_GPU();
  for (const int cluster : {1, 8}) {
    for (const int batch : {1, 64}) {
      const DecodeCase c{32, 8, 64, batch, 1, 700, 0, 0.0f, 8, 128, 61};
      const DecodeScenario s = testing::make_decode_scenario(c);
      DecodeDevice d(c, s);
      AttentionParams p = d.params(c, s, 0.125f);
      p.cluster = cluster;
      ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
      const auto packed = launch_and_read(d, p);
      p.spread = true;
      const auto spread = launch_and_read(d, p);
      ASSERT_EQ(0, std::memcmp(packed.data(), spread.data(), packed.size() * sizeof(bf16)))
          << "cluster " << cluster << " batch " << batch;
      EXPECT_LT(nmse(to_float(spread), testing::decode_reference(c, s, 0.125f)), kAttentionNmse);
      for (const std::int32_t counter : d.counters.download()) ASSERT_EQ(counter, 0);
    }
  }
}

// The push merge (the cluster's blocks store their partials into block 0,
// which merges them alone) adds the partials in the pull merge's order, so a
// launch gives the same bits either way: 64-wide heads in groups of 1, 4 and
// 16 at clusters of 2, 4 and 8, and an 80-wide head with a soft cap at the
// clusters whose slots fit beside its stages; histories whose used splits
// run from 1 to past the cluster (those take the counter). Each launch
// repeats, since a block leaving before its stores land, or block 0 merging
// before they do, would show as a changed bit.
TEST(DecodeV2Test, PushMergeGivesThePullMergesBits) {
  CELLM_REQUIRE_GPU();
  struct Case {
    DecodeCase c;
    bool always;  // pushes at every cluster size
  };
  const Case cases[] = {
      {DecodeCase{32, 8, 64, 2, 1, 700, 0, 0.0f, 8, 64, 71}, true},   // 1B heads, 128 blocks
      {DecodeCase{16, 1, 64, 3, 1, 520, 0, 0.0f, 8, 64, 73}, true},   // group 16
      {DecodeCase{8, 8, 64, 2, 1, 600, 0, 0.0f, 8, 64, 75}, true},    // MHA
      {DecodeCase{8, 4, 80, 3, 1, 300, 0, 30.0f, 8, 64, 74}, false},  // 128 bucket, soft cap
  };
  int pushed = 0;
  for (const auto& [c, always] : cases) {
    const DecodeScenario s = testing::make_decode_scenario(c);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    DecodeDevice d(c, s);
    for (const int cluster : {2, 4, 8}) {
      AttentionParams p = d.params(c, s, scale);
      p.cluster = cluster;
      p.spread = true;
      p.pdl = true;
      ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
      const std::string where =
          fmt::format("hd {} heads {}/{} cluster {}", c.head_dim, c.heads, c.kv_heads, cluster);
      const auto pulled = launch_and_read(d, p);
      EXPECT_LT(nmse(to_float(pulled), testing::decode_reference(c, s, scale)), kAttentionNmse)
          << where;
      p.push_merge = true;
      const bool pushes = attention_decode_v2_push_merges(p);
      if (always) {
        ASSERT_TRUE(pushes) << where << ": the launch would pull";
      }
      if (!pushes) continue;
      ++pushed;
      for (int round = 0; round < 3; ++round) {
        const auto pushed_out = launch_and_read(d, p);
        ASSERT_EQ(0, std::memcmp(pulled.data(), pushed_out.data(), pulled.size() * sizeof(bf16)))
            << where << " round " << round;
      }
      for (const std::int32_t counter : d.counters.download()) ASSERT_EQ(counter, 0) << where;
    }
  }
  EXPECT_GE(pushed, 10);  // the 80-wide head pushes at clusters of 2 at least
}

// Launches that the push merge would slow or cannot serve keep the pull: too
// wide for one block an SM, slots past the launch's shared memory (8B's
// 128-wide heads at a cluster of 8), one split, or not asked for.
TEST(DecodeV2Test, PushMergeOnlyWhereEveryBlockHasAnSmAndRoom) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c{32, 8, 64, 64, 1, 700, 0, 0.0f, 8, 64, 77};  // 4096 blocks
  const DecodeScenario s = testing::make_decode_scenario(c);
  DecodeDevice d(c, s);
  AttentionParams p = d.params(c, s, 0.125f);
  p.cluster = 8;
  p.spread = true;
  p.push_merge = true;
  EXPECT_FALSE(attention_decode_v2_push_merges(p));
  p.num_tokens = 1;
  EXPECT_TRUE(attention_decode_v2_push_merges(p));
  p.head_dim = 128;
  EXPECT_FALSE(attention_decode_v2_push_merges(p));
  p.head_dim = 64;
  p.cluster = 1;
  EXPECT_FALSE(attention_decode_v2_push_merges(p));
  p.cluster = 8;
  p.push_merge = false;
  EXPECT_FALSE(attention_decode_v2_push_merges(p));
}

// Letting the next kernel launch when the wait returns (early_next) must not
// let it read the output before it is stored: a pdl GEMV over a poisoned
// output gives the same bits as after a launch that lets it launch only
// once the outputs are stored, and the product of the output.
TEST(DecodeV2Test, EarlyNextKeepsTheNextKernelWaitingForTheOutput) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c{32, 8, 64, 1, 1, 700, 0, 0.0f, 8, 128, 61};
  const DecodeScenario s = testing::make_decode_scenario(c);
  DecodeDevice d(c, s);
  const int k = c.heads * c.head_dim;
  constexpr int kN = 512;
  std::mt19937 rng(7);
  const auto w = testing::random_bf16(static_cast<std::size_t>(kN) * k, rng, -0.05f, 0.05f);
  DeviceArray<bf16> dw(w);
  DeviceArray<bf16> product(kN);
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  std::vector<bf16> got[2];
  std::vector<bf16> attention;
  for (const bool early : {false, true}) {
    AttentionParams p = d.params(c, s, 0.125f);
    p.cluster = 8;
    p.spread = true;
    p.early_next = early;
    p.pdl = true;
    ASSERT_TRUE(p.validate_decode_v2().is_ok()) << p.validate_decode_v2().to_string();
    GemvParams g = gemv_dense(d.out.data(), dw.data(), product.data(), 1, kN, k);
    g.pdl = true;
    ASSERT_TRUE(g.validate().is_ok()) << g.validate().to_string();
    d.out.poison();
    product.poison();
    CELLM_CUDA_CHECK(cudaDeviceSynchronize());
    launch_attention_decode_v2(p, stream->get());
    launch_gemv(g, stream->get());
    stream->synchronize();
    got[early ? 1 : 0] = product.download();
    attention = d.out.download();
  }
  ASSERT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(bf16)));
  std::vector<double> want(kN, 0.0);
  for (int n = 0; n < kN; ++n) {
    for (int i = 0; i < k; ++i) {
      want[static_cast<std::size_t>(n)] +=
          static_cast<double>(testing::from_bf16(attention[static_cast<std::size_t>(i)])) *
          testing::from_bf16(w[static_cast<std::size_t>(n) * k + static_cast<std::size_t>(i)]);
    }
  }
  EXPECT_LT(nmse(to_float(got[1]), want), 1e-4);
  EXPECT_LT(nmse(to_float(attention), testing::decode_reference(c, s, 0.125f)), kAttentionNmse);
}

TEST(DecodeV2Test, CapturedGraphReplaysForANewMix) {
  CELLM_REQUIRE_GPU();
  const DecodeCase c{8, 2, 64, 6, 1, 900, 0, 0.0f, 8, 64, 41};
  DecodeScenario s = testing::make_decode_scenario(c);
  DecodeDevice d(c, s);
  auto stream = Stream::create();
  ASSERT_TRUE(stream.ok());
  const AttentionParams p = d.params(c, s, 0.125f);
  ASSERT_TRUE(p.validate_decode_v2().is_ok());
  launch_attention_decode_v2(p, stream->get());
  GraphExec::begin_capture(stream->get());
  launch_attention_decode_v2(p, stream->get());
  auto graph = GraphExec::end_capture(stream->get());
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();

  // Another mix in the same buffers: reversed tokens, shorter histories.
  std::reverse(s.slots.begin(), s.slots.end());
  std::reverse(s.positions.begin(), s.positions.end());
  for (auto& position : s.positions) position = position > 10 ? position / 2 : position;
  d.slots.assign(s.slots);
  d.positions.assign(s.positions);
  for (int replay = 0; replay < 2; ++replay) {
    d.out.poison();
    graph->launch(stream->get());
    stream->synchronize();
    EXPECT_LT(nmse(to_float(d.out.download()), testing::decode_reference(c, s, 0.125f)),
              kAttentionNmse)
        << "replay " << replay;
  }
  for (const std::int32_t counter : d.counters.download()) ASSERT_EQ(counter, 0);
}

// ---- host-only checks (no device needed) ----

TEST(DecodeSplitPlanTest, CoversEveryKeyOnceWithinTheLimits) {
  for (const std::int32_t min_keys : {1, 64, 100, 256}) {
    for (std::int32_t splits = 1; splits <= kAttentionMaxSplits; splits += 7) {
      for (std::int32_t length = 0; length <= 5000; length += 13) {
        const DecodeSplitPlan plan = decode_split_plan(length, splits, min_keys);
        if (length == 0) {
          EXPECT_EQ(plan.used, 0);
          continue;
        }
        ASSERT_GE(plan.used, 1);
        ASSERT_LE(plan.used, splits) << length << " keys, " << splits << " splits";
        ASSERT_EQ(plan.chunk % 64, 0);
        ASSERT_GE(plan.chunk, min_keys);
        // The used splits tile [0, length): none empty, none missing.
        ASSERT_LT(static_cast<std::int64_t>(plan.used - 1) * plan.chunk, length);
        ASSERT_GE(static_cast<std::int64_t>(plan.used) * plan.chunk, length);
      }
    }
  }
}

TEST(DecodeSplitPlanTest, ShortContextsUseFewSplits) {
  EXPECT_EQ(decode_split_plan(512, 33, 256).used, 2);
  EXPECT_EQ(decode_split_plan(1, 33, 256).used, 1);
  EXPECT_EQ(decode_split_plan(8192, 33, 256).used, 32);
  // Many splits asked for, one key minimum: 64-key chunks.
  EXPECT_EQ(decode_split_plan(640, 64, 1).used, 10);
}

TEST(DecodeSplitPlanTest, HostSplitCountFillsTheDeviceAndRespectsTheLength) {
  // Batch 1, 8 KV heads: about two blocks per multiprocessor.
  EXPECT_EQ(attention_decode_v2_splits(1, 32, 8, 131072, 132, 256), 33);
  // Wide batches need no splitting.
  EXPECT_EQ(attention_decode_v2_splits(64, 32, 8, 131072, 132, 256), 1);
  // ... unless more blocks per SM are asked for: 8 x 132 over 512 blocks.
  EXPECT_EQ(attention_decode_v2_splits(64, 32, 8, 131072, 132, 256, 8), 3);
  EXPECT_EQ(attention_decode_v2_splits(64, 32, 8, 131072, 132, 256, 2),
            attention_decode_v2_splits(64, 32, 8, 131072, 132, 256));
  // Clusters round the count up to a multiple, within the maximum.
  EXPECT_EQ(attention_decode_v2_splits(1, 32, 8, 131072, 132, 256, 2, 8), 40);
  EXPECT_EQ(attention_decode_v2_splits(1, 32, 8, 131072, 132, 256, 2, 4), 36);
  EXPECT_EQ(attention_decode_v2_splits(64, 32, 8, 131072, 132, 256, 2, 8), 1);
  EXPECT_EQ(attention_decode_v2_splits(1, 4, 1, 1 << 20, 132, 1, 2, 8), kAttentionMaxSplits);
  // Short tables bound the count.
  EXPECT_EQ(attention_decode_v2_splits(1, 32, 8, 300, 132, 256), 2);
  EXPECT_EQ(attention_decode_v2_splits(1, 4, 1, 1 << 20, 132, 1), kAttentionMaxSplits);
  EXPECT_EQ(attention_decode_v2_counters(10, 32, 8), 80u);
  EXPECT_EQ(attention_decode_v2_counters(10, 32, 1), 20u);  // two head groups of 16
}

TEST(DecodeV2ValidateTest, AcceptsAWellFormedCall) {
  EXPECT_TRUE(testing::unlaunched_decode_params().validate_decode_v2().is_ok())
      << testing::unlaunched_decode_params().validate_decode_v2().to_string();
}

TEST(DecodeV2ValidateTest, RefusesSplitsWithoutCounters) {
  AttentionParams p = testing::unlaunched_decode_params();
  p.counters = nullptr;
  const Status status = p.validate_decode_v2();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("counters"), std::string::npos) << status.to_string();
  EXPECT_TRUE(p.validate_decode().is_ok());  // v1 does not need them
  p.num_splits = 1;
  EXPECT_TRUE(p.validate_decode_v2().is_ok());  // one split merges nothing
}

TEST(DecodeV2ValidateTest, RefusesANonPositiveSplitMinimum) {
  AttentionParams p = testing::unlaunched_decode_params();
  p.split_min_keys = 0;
  const Status status = p.validate_decode_v2();
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("split_min_keys"), std::string::npos) << status.to_string();
}

TEST(DecodeV2ValidateTest, RefusesAClusterThatDoesNotDivideTheSplits) {
  AttentionParams p = testing::unlaunched_decode_params();  // 4 splits
  for (const int cluster : {2, 4}) {
    p.cluster = cluster;
    EXPECT_TRUE(p.validate_decode_v2().is_ok()) << cluster;
  }
  for (const int cluster : {0, 3, 8, 16}) {
    p.cluster = cluster;
    const Status status = p.validate_decode_v2();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << cluster;
    EXPECT_NE(status.message().find("cluster"), std::string::npos) << status.to_string();
  }
}

TEST(DecodeV2ValidateTest, RefusesWhatV1Refuses) {
  AttentionParams p = testing::unlaunched_decode_params();
  p.num_splits = kAttentionMaxSplits + 1;
  EXPECT_FALSE(p.validate_decode_v2().is_ok());
  p = testing::unlaunched_decode_params();
  p.head_dim = 60;
  EXPECT_FALSE(p.validate_decode_v2().is_ok());
  p = testing::unlaunched_decode_params();
  p.num_kv_heads = 3;
  EXPECT_FALSE(p.validate_decode_v2().is_ok());
}

TEST(DecodeV2ValidateTest, SharedMemoryFitsAHopperBlock) {
  for (const int hd : {64, 128, 256}) {
    EXPECT_GT(attention_decode_v2_smem_bytes(hd), 0u);
    EXPECT_LE(attention_decode_v2_smem_bytes(hd), 227u * 1024u) << hd;
  }
  EXPECT_EQ(attention_decode_v2_smem_bytes(300), 0u);
}

}  // namespace
}  // namespace cellm::cuda
