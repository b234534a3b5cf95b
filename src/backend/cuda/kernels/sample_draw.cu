// The device draw (sample.cuh's `sample`): the row's softmax, its top-k or
// top-p set by radix select on the bits of p, and the token the coin lands
// on. Every pass over the row recomputes p (expf and two IEEE divisions a
// logit), so a pass is bound by one SM's arithmetic when one block draws a
// row: on the H200 a 128K-id top-p draw took 0.87 ms that way, longer than
// the 1B model's whole decode step. Two things shorten it (H200, 128K ids,
// N(0, 3^2) logits at T = 0.8, one row: top-p 0.95 0.87 ms -> 145 us on one
// block, 67 us on a cluster; top-k 40 0.83 ms -> 107 and 46 us):
// - A row is drawn by a team of blocks (sample_team.cuh), a cluster of
//   kClusterBlocks where the device has clusters and the step's rows fit the
//   SMs, one block elsewhere.
// - Top-k and top-p passes run over candidates in shared memory instead of
//   the row. The softmax sum also counts the tokens by how far x / T lies
//   below its maximum, which tells how far down the kept set can reach; a
//   cheap pass then copies every token whose logit clears that point, in id
//   order, with its p, and the selection runs over those. Where they would
//   not fit, or the kept set turns out to reach below them (it does not when
//   the counts are right; the check costs nothing), the draw runs over the
//   row as before. Both give the same token (sample_select.cuh).
// The integer sums are exact, so only Z, a float summed block by block, can
// differ between one block and a cluster (in its last bits; see sample.cuh).
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/kernel_trace.cuh"
#include "backend/cuda/kernels/sample.cuh"
#include "backend/cuda/kernels/sample_common.cuh"
#include "backend/cuda/kernels/sample_select.cuh"
#include "backend/cuda/kernels/sample_team.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace {

CELLM_TRACE_TABLE(draw_trace);
// The draw's phases in the timeline (kernel_trace.cuh).
enum Phase : int {
  kArgmaxDone = trace::kFirstPhaseMark,
  kSummed,
  kGuessed,
  kCompacted,
  kDrawn,
};
static_assert(kDrawn < trace::kExitMark);

constexpr int kClusterBlocks = kSampleClusterBlocks;  // the portable cluster size
// Candidates a block may hold (8 bytes each; a cluster gathers its blocks'
// in its first block): enough for the kept sets of all but nearly flat rows
// (N(0, 3^2) logits at T = 0.8 over 128K ids: ~1,700 candidates for top-p
// 0.95, where the kept set is ~1,100).
constexpr int kMaxCandidates = 16384;
// Shared memory the kernel keeps for itself besides the candidates (the
// warps' guess bins are 16 KB).
constexpr int kStaticSmemReserve = 32768;
// The guess's bins: x / T below its maximum, a quarter apart (the mass of a
// bin is then known within a factor of 1.28 from its count).
constexpr int kGuessBins = 128;
constexpr float kBinWidth = 0.25f;

// The largest id whose probability is nonzero (-1 when none).
template <int kC>
__device__ int last_live(const Team<kC>& team, const Softmax& sm, int* slot) {
  if (threadIdx.x == 0) *slot = -1;
  __syncthreads();
  int last = -1;
  for (int i = team.begin + static_cast<int>(threadIdx.x); i < team.end; i += kThreads) {
    if (sm.prob(i) > 0.0f) last = i;
  }
  if (last >= 0) atomicMax(slot, last);
  __syncthreads();
  const int block_last = *slot;
  __syncthreads();
  return team.max_index(block_last);
}

// Tokens, in id order, whose cumulative fixed-point mass is <= `coin`: the
// id of the first token past the coin (vocab when none is).
template <int kC>
__device__ u64 count_within_coin(const Team<kC>& team, const Softmax& sm, u64 coin, u64* scratch) {
  const WarpSpan span = warp_span(team.begin, team.end);
  const int lane = static_cast<int>(threadIdx.x & 31);
  u64 mass = 0;
  for (int i = span.begin + lane; i < span.end; i += 32) mass += fixed(sm.prob(i));
  mass = warp_sum(mass);
  u64 block_mass = 0;
  u64 running = warps_before_u64(mass, scratch, &block_mass);
  running += team.before(block_mass);
  // Cumulative mass never falls: warps wholly within the coin count every
  // id, those past it none, and the one warp where it crosses walks its ids.
  u64 count = 0;
  if (running + mass <= coin) {
    count = static_cast<u64>(span.end - span.begin);
  } else if (running <= coin) {
    for (int base = span.begin; base < span.end; base += 32) {
      const int i = base + lane;
      u64 inclusive = i < span.end ? fixed(sm.prob(i)) : 0;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const u64 n = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += n;
      }
      const unsigned within =
          __ballot_sync(0xffffffffu, i < span.end && running + inclusive <= coin);
      count += static_cast<u64>(__popc(within));
      if (within != __ballot_sync(0xffffffffu, i < span.end)) break;  // crossed here
      running += __shfl_sync(0xffffffffu, inclusive, 31);
    }
  }
  return team.sum(block_sum(lane == 0 ? count : 0, scratch));
}

// The guess's bin of a token whose x / T is y: how far y lies below the
// maximum, in steps of kBinWidth; the last bin takes everything further down
// (and NaN). Also the candidates' test, so it must stay one expression.
__device__ __forceinline__ int guess_bin(float y, float max_scaled) {
  const float below = __fsub_rn(max_scaled, y);  // >= 0
  return below < kGuessBins * kBinWidth ? static_cast<int>(below * (1.0f / kBinWidth))
                                        : kGuessBins - 1;
}

// Per warp, its span's tokens per guess bin (shared memory).
using WarpBins = unsigned[kWarps][kGuessBins];

// Z, the team's sum of exp(x / T - max) in a fixed tree, each warp over a
// contiguous span. With `bin` the same pass counts each warp's tokens per
// guess bin: one shared atomic a token into the warp's own bins (the
// lanes of a warp contend only where they share a bin; summing per bin
// within the warp first cost the H200 100 us a 128K row, the whole pass 45).
template <int kC>
__device__ float softmax_sum(const Team<kC>& team, const Softmax& sm, bool bin, WarpBins& bins,
                             float* scratch) {
  if (bin) {
    for (int j = threadIdx.x; j < kWarps * kGuessBins; j += kThreads) bins[0][j] = 0;
    __syncthreads();
  }
  const WarpSpan span = warp_span(team.begin, team.end);
  unsigned* mine = bins[threadIdx.x >> 5];
  float partial = 0.0f;
  for (int i = span.begin + static_cast<int>(threadIdx.x & 31); i < span.end; i += 32) {
    const float y = __fdiv_rn(sm.logit(i), sm.temperature);
    partial += expf(__fsub_rn(y, sm.max_scaled));  // as Softmax::unnormalized
    if (bin) atomicAdd(&mine[guess_bin(y, sm.max_scaled)], 1u);
  }
  return team.sum_f32(block_sum(partial, scratch));
}

// The guess: the first bin (from the maximum down) by which the team's bins
// hold k tokens, or more than `fraction` of the row's exp(x / T - max),
// both sums counting each token at its bin's middle value (within a factor
// of 1.13 of the truth), then one bin more: for what the mass estimate
// misses, and so that the kept set's last token never lies within rounding
// of the candidates' floor (a row whose k-th token sat at its bin's bottom
// fell back to the row draw; on the H200, 256 rows of top-k 40 took 978 us
// for it, against 428 for top-p). The last bin, which reaches down to every
// token, when none crosses (a nearly flat row). Warp 0 of every block walks
// the same sums.
template <int kC>
__device__ int guess_edge(const WarpBins& bins, SelectShared& sh, bool by_count, u64 k,
                          double fraction) {
  static_assert(kGuessBins == 4 * 32, "warp 0 walks four bins a lane");
  __syncthreads();
  if (threadIdx.x < kGuessBins) {  // the block's bins, published to the team
    unsigned total = 0;
    for (int w = 0; w < kWarps; ++w) total += bins[w][threadIdx.x];
    sh.count[threadIdx.x] = total;
  }
  __syncthreads();
  team_barrier<kC>();  // every block's bins are complete
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    unsigned count[4] = {0, 0, 0, 0};
#pragma unroll 1
    for (int r = 0; r < kC; ++r) {
      const unsigned* block_bins = sh.count;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      if constexpr (kC > 1) {
        block_bins = cooperative_groups::this_cluster().map_shared_rank(sh.count, r);
      }
#endif
#pragma unroll
      for (int j = 0; j < 4; ++j) count[j] += block_bins[4 * lane + j];
    }
    u64 chunk_count = 0;
    double chunk_mass = 0.0;
    double middle[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int d = 4 * lane + j;
      middle[j] = d == kGuessBins - 1 ? 0.0 : exp(-(static_cast<double>(d) + 0.5) * kBinWidth);
      chunk_count += count[j];
      chunk_mass += count[j] * middle[j];
    }
    u64 incl_count = chunk_count;
    double incl_mass = chunk_mass;
    warp_inclusive_scan(incl_count, incl_mass);
    const double mass = fraction * __shfl_sync(0xffffffffu, incl_mass, 31);
    const unsigned crossing =
        __ballot_sync(0xffffffffu, by_count ? incl_count >= k : incl_mass > mass);
    if (crossing == 0) {
      if (lane == 0) sh.digit = kGuessBins - 1;
    } else if (lane == __ffs(crossing) - 1) {
      u64 acc_count = incl_count - chunk_count;
      double acc_mass = incl_mass - chunk_mass;
      int edge = 4 * lane + 3;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        acc_count += count[j];
        acc_mass += count[j] * middle[j];
        if (by_count ? acc_count >= k : acc_mass > mass) {
          edge = min(4 * lane + j + 1, kGuessBins - 1);
          break;
        }
      }
      sh.digit = edge;
    }
  }
  team_barrier<kC>();  // every block has read the others' bins
  __syncthreads();
  return sh.digit;
}

// Where each block keeps its candidates (dynamic shared memory).
struct CandidateSpace {
  int* ids;
  unsigned* values;  // bits of p
  int capacity;
};

// Copies the block's tokens in guess bins <= edge, in id order, with their
// p, to ids/values from 0: each warp's count is its bins' sum, so it writes
// its span after the warps before it in one pass, and only the candidates'
// p is computed. Returns the block's count; writes nothing when that
// exceeds `room`.
__device__ int compact(const Softmax& sm, int begin, int end, const WarpBins& bins, int edge,
                       int* ids, unsigned* values, int room, u64* scratch) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  u64 mine = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) mine += 4 * lane + j <= edge ? bins[warp][4 * lane + j] : 0;
  const u64 count = warp_sum(mine);
  u64 block_count = 0;
  const u64 before = warps_before_u64(count, scratch, &block_count);
  if (block_count > static_cast<u64>(room)) return static_cast<int>(block_count);
  const WarpSpan span = warp_span(begin, end);
  const unsigned lower = (1u << lane) - 1u;
  int at = static_cast<int>(before);
  const int stop = static_cast<int>(before + count);
  for (int base = span.begin; base < span.end && at < stop; base += 32) {
    const int i = base + lane;
    const bool hit =
        i < span.end && guess_bin(__fdiv_rn(sm.logit(i), sm.temperature), sm.max_scaled) <= edge;
    const unsigned hits = __ballot_sync(0xffffffffu, hit);
    if (hit) {
      const int k = at + __popc(hits & lower);
      ids[k] = i;
      values[k] = __float_as_uint(sm.prob(i));
    }
    at += __popc(hits);
  }
  __syncthreads();  // the candidates are visible
  return static_cast<int>(block_count);
}

// The top-k or top-p draw over candidates, once softmax_sum has binned the
// row: kUndecided when the set would not fit or cannot decide the draw.
// A team gathers its blocks' candidates in its first block, which draws
// alone: a radix pass over a few thousand tokens in one block's shared
// memory costs less than the team's barriers and remote reads (H200: the
// team's 8 passes took 133 us).
template <int kC>
__device__ int draw_candidates(const Team<kC>& team, const Softmax& sm, const CandidateSpace& space,
                               const WarpBins& bins, bool use_top_k, float top_k, float top_p,
                               float coin, SelectShared& sel, u64* scratch, int* found_index,
                               int trace_slot) {
  // Top-p asks for a margin over top_p: the bins only estimate the mass.
  const int edge = guess_edge<kC>(bins, sel, use_top_k, static_cast<u64>(ceilf(top_k)),
                                  static_cast<double>(top_p) * (1.0 + 1.0 / 1024.0));
  // A token left out lies at least (edge + 1) bins below the maximum, so (the
  // division by Z rounding monotonically, expf and the subtractions within a
  // few ulps) its p is below `outside`. The last bin leaves out no token.
  const float at_floor = edge == kGuessBins - 1
                             ? 0.0f
                             : expf(-static_cast<float>(edge + 1) * kBinWidth) * (1.0f + 0x1p-10f);
  const unsigned outside = __float_as_uint(__fdiv_ru(at_floor, sm.sum));
  trace::mark(draw_trace, trace_slot, kGuessed);
  const int n = compact(sm, team.begin, team.end, bins, edge, space.ids, space.values,
                        space.capacity, scratch);
  int total = n;
  if constexpr (kC > 1) {
    // Each block's count, in rank order: where its candidates go in the
    // first block's buffer.
    u64 counts[kC];
    team.each(static_cast<u64>(n), [&](int j, u64 v) { counts[j] = v; });
    u64 sum = 0;
    for (int j = 0; j < kC; ++j) sum += counts[j];
    if (sum > static_cast<u64>(space.capacity)) return kUndecided;
    total = static_cast<int>(sum);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (team.rank == 0) {
      namespace cg = cooperative_groups;
      cg::cluster_group cluster = cg::this_cluster();
      int at = static_cast<int>(counts[0]);
      for (int r = 1; r < kC; ++r) {
        const int* ids = cluster.map_shared_rank(space.ids, r);
        const unsigned* values = cluster.map_shared_rank(space.values, r);
        for (int j = threadIdx.x; j < static_cast<int>(counts[r]); j += kThreads) {
          space.ids[at + j] = ids[j];
          space.values[at + j] = values[j];
        }
        at += static_cast<int>(counts[r]);
      }
    }
#endif
    team_barrier<kC>();  // the first block has read every block's candidates
  } else if (n > space.capacity) {
    return kUndecided;
  }
  trace::mark(draw_trace, trace_slot, kCompacted);
  int token = kUndecided;
  if (team.rank == 0) {
    __syncthreads();  // the gathered candidates are visible
    const Team<1> alone{0, 0, total, team.box};
    const CandidateSource candidates{space.ids, space.values, 0, total, outside};
    token = draw_kept(alone, candidates, use_top_k, top_k, top_p, coin, sm.vocab, sel, scratch,
                      found_index);
  }
  if constexpr (kC > 1) token = static_cast<int>(team.max_of(static_cast<u64>(token + 2))) - 2;
  return token;
}

// A team of kC blocks per row: blockIdx.x is the row, blockIdx.z the rank.
// `capacity` candidates fit in each block's dynamic shared memory (0: every
// pass runs over the row). Every return below is taken by every thread of
// the team.
template <int kC>
__global__ void __launch_bounds__(kThreads, 1)
    sample_kernel(const __grid_constant__ SampleParams p, int capacity) {
  const trace::BlockScope traced(draw_trace, trace::slot_of(p));
  // No programmatic wait: the launch itself waits for the logits.
  trace::mark(draw_trace, trace::slot_of(p), trace::kWaitMark);
  __shared__ ArgMax argmax_scratch[kWarps];
  __shared__ float f32_scratch[kWarps];
  __shared__ u64 u64_scratch[kWarps];
  __shared__ SelectShared select_shared;
  __shared__ WarpBins warp_bins;
  __shared__ int found_index;
  __shared__ Banned banned;
  __shared__ u64 box;
  extern __shared__ __align__(16) unsigned char candidate_smem[];

  const int r = static_cast<int>(blockIdx.x);
  const int vocab = p.vocab;
  const int rank = kC == 1 ? 0 : static_cast<int>(blockIdx.z);
  const int chunk = (vocab + kC - 1) / kC;
  const int begin = min(vocab, rank * chunk);
  const Team<kC> team{rank, begin, min(vocab, begin + chunk), &box};
  const bool lead = rank == 0 && threadIdx.x == 0;  // writes the row's token
  load_banned(p, r, banned);
  const float* row = p.logits + static_cast<std::int64_t>(r) * p.logits_stride;
  const float temperature = p.params[r * kSampleParamsPerRow + 0];
  const float top_p = p.params[r * kSampleParamsPerRow + 1];
  const float top_k = p.params[r * kSampleParamsPerRow + 2];
  const float coin = p.params[r * kSampleParamsPerRow + 3];

  ArgMax greedy =
      team.argmax(block_argmax(row, team.begin, team.end, vocab, banned, argmax_scratch));
  if (greedy.index >= vocab) greedy.index = first_candidate(vocab, banned);
  trace::mark(draw_trace, trace::slot_of(p), kArgmaxDone);
  if (lead && p.drawn_from_candidates != nullptr) p.drawn_from_candidates[r] = 0;
  if (!(temperature > 0.0f) || greedy.value == -INFINITY || isnan(greedy.value)) {
    if (lead) p.out[r] = greedy.index;
    return;
  }
  const bool use_top_k = top_k > 0.0f && top_k < static_cast<float>(vocab);
  const bool use_top_p = !use_top_k && top_p > 0.0f && top_p < 1.0f;
  const bool guess = capacity > 0 && (use_top_k || use_top_p);
  Softmax sm{row, &banned, vocab, temperature, __fdiv_rn(greedy.value, temperature), 0.0f};
  SelectShared& sel = select_shared;
  sm.sum = softmax_sum(team, sm, guess, warp_bins, f32_scratch);
  trace::mark(draw_trace, trace::slot_of(p), kSummed);

  if (!use_top_k && !use_top_p) {
    // Token order: count the tokens whose cumulative mass is <= coin.
    const u64 coin_fixed = __double2ull_rz(static_cast<double>(coin) * kFixedOne);
    const u64 total = count_within_coin(team, sm, coin_fixed, u64_scratch);
    if (total < static_cast<u64>(vocab)) {
      if (lead) p.out[r] = static_cast<int>(total);
      return;
    }
    // Rounding left no id past the coin: the last one that can be drawn.
    const int last = last_live(team, sm, &found_index);
    if (lead) p.out[r] = last >= 0 ? last : vocab - 1;
    return;
  }

  int index = kUndecided;
  if (guess && isfinite(sm.sum) && sm.sum > 0.0f) {
    const CandidateSpace space{reinterpret_cast<int*>(candidate_smem),
                               reinterpret_cast<unsigned*>(candidate_smem) + capacity, capacity};
    index = draw_candidates(team, sm, space, warp_bins, use_top_k, top_k, top_p, coin, sel,
                            u64_scratch, &found_index, trace::slot_of(p));
  }
  if (lead && p.drawn_from_candidates != nullptr) p.drawn_from_candidates[r] = index != kUndecided;
  if (index == kUndecided) {
    const RowSource whole{&sm, team.begin, team.end};
    index = draw_kept(team, whole, use_top_k, top_k, top_p, coin, vocab, sel, u64_scratch,
                      &found_index);
  }
  trace::mark(draw_trace, trace::slot_of(p), kDrawn);
  if (lead) p.out[r] = index >= 0 ? index : greedy.index;
}

// Candidates per block that the device's shared memory holds (0: none).
int candidate_capacity() {
  const int fit = (max_smem_per_block_optin() - kStaticSmemReserve) / 8;
  return fit >= 1024 ? std::min(fit, kMaxCandidates) : 0;
}

}  // namespace

void launch_sample(const SampleParams& requested, cudaStream_t stream) {
  SampleParams params = requested;
  const bool cluster = params.cluster && cluster_launch_supported();
  const int capacity = params.candidates ? candidate_capacity() : 0;
  trace::assign_slot(params, draw_trace, [&] {
    return "sample/draw rows=" + std::to_string(params.rows) +
           " blocks=" + std::to_string(cluster ? kClusterBlocks : 1);
  });
  const std::size_t smem = static_cast<std::size_t>(capacity) * 8;
  if (cluster) {
    launch(sample_kernel<kClusterBlocks>,
           LaunchConfig{dim3(params.rows, 1, kClusterBlocks), dim3(kThreads), smem, stream, false,
                        kClusterBlocks},
           params, capacity);
  } else {
    launch(sample_kernel<1>, LaunchConfig{dim3(params.rows), dim3(kThreads), smem, stream}, params,
           capacity);
  }
}

}  // namespace cellm::cuda
