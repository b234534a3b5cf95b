// The draw's selection (sample_draw.cu): the row's probabilities, the radix
// select on their bits that finds the top-k or top-p set and the token the
// coin lands on, and the id-order walk that picks among tokens of equal p.
// Each runs over a Source: the team's whole slice of the row (p recomputed
// from the logits on every pass), or the candidates a block compacted into
// shared memory (every token whose logit clears some value, in id order,
// with its p). A selection whose value lies above the largest p a token
// left out can have is the same over the set as over the row, so the two
// sources give the same token.
// Included by sample_draw.cu only.
//
// Thread-safety: device helpers; every function must be called by every
// thread of every block of the team it is given (they hold barriers).
#pragma once

#include "backend/cuda/kernels/sample_common.cuh"
#include "backend/cuda/kernels/sample_team.cuh"

namespace cellm::cuda {
namespace {

constexpr double kFixedOne = 4503599627370496.0;  // 2^52: the masses' fixed point
// A draw whose candidate set cannot decide it (fewer than k tokens, not
// more than top_p of the mass, or a kept set that a token left out could
// join) reports this and is drawn again over the row.
constexpr int kUndecided = -2;

// The row's probabilities, recomputed bit-identically wherever needed.
// Suppressed ids read as -inf, so their probability is exactly 0.
struct Softmax {
  const float* row;
  const Banned* banned;
  int vocab;
  float temperature;
  float max_scaled;  // max of x / T
  float sum;         // Z

  __device__ __forceinline__ float logit(int i) const {
    return banned->has(i) ? -INFINITY : row[i];
  }
  // exp(x / T - max), before the division by Z.
  __device__ __forceinline__ float unnormalized(int i) const {
    return expf(__fsub_rn(__fdiv_rn(logit(i), temperature), max_scaled));
  }
  __device__ __forceinline__ float prob(int i) const { return __fdiv_rn(unnormalized(i), sum); }
};

__device__ __forceinline__ u64 fixed(float p) {
  return __double2ull_rz(static_cast<double>(p) * kFixedOne);
}

// The team's slice of the row.
struct RowSource {
  static constexpr bool kWholeRow = true;
  const Softmax* sm;
  int begin;
  int end;
  __device__ __forceinline__ unsigned bits(int k) const { return __float_as_uint(sm->prob(k)); }
  __device__ __forceinline__ int id(int k) const { return k; }
};

// Candidates in one block's shared memory: ids[k] has p of bits values[k],
// k in [0, end), in id order. No token left out has p above `outside`
// (bits).
struct CandidateSource {
  static constexpr bool kWholeRow = false;
  const int* ids;
  const unsigned* values;
  int begin;
  int end;
  unsigned outside;
  __device__ __forceinline__ unsigned bits(int k) const { return values[k]; }
  __device__ __forceinline__ int id(int k) const { return ids[k]; }
};

struct SelectShared {
  unsigned count[256];  // this block's bins
  u64 mass[256];
  unsigned team_count[256];  // the team's, summed by warp 0
  int digit;
  u64 above_count;
  u64 above_mass;
  bool found;
};

struct Selection {
  bool found;
  unsigned bits;    // the selected value of p, as bits
  u64 above_count;  // eligible tokens with p above it
  u64 above_mass;   // and their fixed-point mass
  u64 tie_count;    // eligible tokens with exactly this p
};

// Empty bins and no weight above them yet; the barrier makes both visible.
__device__ __forceinline__ void clear_bins(SelectShared& sh) {
  for (int d = threadIdx.x; d < 256; d += kThreads) {
    sh.count[d] = 0;
    sh.mass[d] = 0;
  }
  if (threadIdx.x == 0) {
    sh.above_count = 0;
    sh.above_mass = 0;
    sh.found = true;
  }
  __syncthreads();
}

// Adds one token of weight m to bin d (d < 0: none) for every lane of the
// warp; every lane must call it. Most tokens of a row share a few digits
// (the top byte of p is its exponent), so the lanes of a warp that fall in
// one bin add up their count and mass first and one of them updates the bin:
// one shared atomic per bin and warp instead of up to 32 on one address
// (H200, 128K ids: a top-p draw 1.06 -> 0.88 ms on one block).
__device__ __forceinline__ void bin_add(SelectShared& sh, int d, u64 m) {
  const unsigned peers = __match_any_sync(0xffffffffu, d);
  if (d >= 0) {
    // m <= 2^52: three 20-bit pieces, each summed exactly over <= 32 lanes.
    const unsigned lo = __reduce_add_sync(peers, static_cast<unsigned>(m & 0xfffffu));
    const unsigned mid = __reduce_add_sync(peers, static_cast<unsigned>((m >> 20) & 0xfffffu));
    const unsigned hi = __reduce_add_sync(peers, static_cast<unsigned>(m >> 40));
    if ((threadIdx.x & 31) == static_cast<unsigned>(__ffs(peers) - 1)) {
      atomicAdd(&sh.count[d], static_cast<unsigned>(__popc(peers)));
      atomicAdd(&sh.mass[d], static_cast<u64>(lo) + (static_cast<u64>(mid) << 20) +
                                 (static_cast<u64>(hi) << 40));
    }
  }
}

// Inclusive sums of a count and a mass over the warp's lanes.
template <class Mass>
__device__ __forceinline__ void warp_inclusive_scan(u64& count, Mass& mass) {
  const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const u64 c = __shfl_up_sync(0xffffffffu, count, offset);
    const Mass m = __shfl_up_sync(0xffffffffu, mass, offset);
    if (lane >= offset) {
      count += c;
      mass += m;
    }
  }
}

// Warp 0 of every block sums the team's bins (lane l: bins 255 - 8l - j for
// j < 8, into `count` and `mass`) and leaves the sums of counts in
// sh.team_count.
template <int kC>
__device__ __forceinline__ void team_bins(SelectShared& sh, int lane, unsigned (&count)[8],
                                          u64 (&mass)[8]) {
  const int top = 255 - lane * 8;  // bins top - j, j < 8
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    count[j] = 0;
    mass[j] = 0;
  }
  if constexpr (kC == 1) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      count[j] = sh.count[top - j];
      mass[j] = sh.mass[top - j];
    }
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    // One rank at a time: its eight bins are requested together, and the
    // addresses stay few enough for the 64 registers of a 1024-thread block.
#pragma unroll 1
    for (int r = 0; r < kC; ++r) {
      const unsigned* counts = cluster.map_shared_rank(sh.count, r);
      const u64* masses = cluster.map_shared_rank(sh.mass, r);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        count[j] += counts[top - j];
        mass[j] += masses[top - j];
      }
    }
#endif
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) sh.team_count[top - j] = count[j];
}

// Once every block has binned its tokens: the largest digit d such that the
// weight (count or mass) above the bins already chosen (sh.above_*) plus that
// of the team's bins >= d exceeds `target`. Leaves it in sh.digit, the
// weight of the bins above it added to sh.above_*, and sh.found false (digit
// 0) when even every bin does not exceed it. Every block finds the same.
template <int kC>
__device__ void find_crossing(SelectShared& sh, bool by_mass, u64 target) {
  __syncthreads();
  team_barrier<kC>();  // every block's bins are complete
  if (threadIdx.x < 32) {
    // Lane l owns bins 255 - 8l .. 248 - 8l; the lanes scan their chunk totals.
    const int lane = threadIdx.x;
    unsigned count[8];  // a bin counts at most the vocabulary
    u64 mass[8];
    team_bins<kC>(sh, lane, count, mass);
    u64 chunk_count = 0;
    u64 chunk_mass = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      chunk_count += count[j];
      chunk_mass += mass[j];
    }
    u64 incl_count = chunk_count;
    u64 incl_mass = chunk_mass;
    warp_inclusive_scan(incl_count, incl_mass);
    const bool found_so_far = sh.found;
    const u64 above_count = sh.above_count;
    const u64 above_mass = sh.above_mass;
    // Every lane has read them before one lane rewrites them below
    // (racecheck flagged the read/write pair without this).
    __syncwarp();
    const u64 reach = (by_mass ? above_mass + incl_mass : above_count + incl_count);
    const unsigned crossing = __ballot_sync(0xffffffffu, found_so_far && reach > target);
    if (crossing == 0) {
      if (lane == 0) {
        sh.found = false;
        sh.digit = 0;
      }
    } else if (lane == __ffs(crossing) - 1) {
      u64 acc_count = above_count + incl_count - chunk_count;
      u64 acc_mass = above_mass + incl_mass - chunk_mass;
      int chosen = 255 - lane * 8 - 7;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const u64 weight = by_mass ? mass[j] : static_cast<u64>(count[j]);
        if ((by_mass ? acc_mass : acc_count) + weight > target) {
          chosen = 255 - lane * 8 - j;
          break;
        }
        acc_count += count[j];
        acc_mass += mass[j];
      }
      sh.above_count = acc_count;
      sh.above_mass = acc_mass;
      sh.digit = chosen;
    }
  }
  team_barrier<kC>();  // every block has read the others' bins
  __syncthreads();
}

// Radix select over the bits of p (non-negative floats order like their
// bits): the largest v such that the weight (count or fixed mass) of the
// source's eligible tokens with p >= v exceeds `target`. Eligible: bits >
// floor_bits, or every token when has_floor is false.
template <int kC, class Source>
__device__ Selection radix_select(const Source& src, bool by_mass, u64 target, bool has_floor,
                                  unsigned floor_bits, SelectShared& sh) {
  unsigned prefix = 0;
  unsigned mask = 0;
  __syncthreads();  // the bins may still be read
  clear_bins(sh);
  for (int shift = 24; shift >= 0; shift -= 8) {
    // Every lane runs the same number of rounds so bin_add sees all its lanes.
    for (int base = src.begin; base < src.end; base += kThreads) {
      const int k = base + static_cast<int>(threadIdx.x);
      int d = -1;
      u64 m = 0;
      if (k < src.end) {
        const unsigned bits = src.bits(k);
        if (!((has_floor && bits <= floor_bits) || (bits & mask) != prefix)) {
          d = static_cast<int>((bits >> shift) & 255);
          m = fixed(__uint_as_float(bits));
        }
      }
      bin_add(sh, d, m);
    }
    find_crossing<kC>(sh, by_mass, target);
    prefix |= static_cast<unsigned>(sh.digit) << shift;
    mask |= 255u << shift;
    if (shift > 0) {
      for (int d = threadIdx.x; d < 256; d += kThreads) {
        sh.count[d] = 0;
        sh.mass[d] = 0;
      }
      __syncthreads();
    }
  }
  Selection result;
  result.found = sh.found;
  result.bits = prefix;
  result.above_count = sh.above_count;
  result.above_mass = sh.above_mass;
  result.tie_count = sh.team_count[sh.digit];
  __syncthreads();
  return result;
}

// Warp w's share of a block's range for the id-order walks below: a
// contiguous span, read 32 entries at a time so every load is coalesced (a
// span per thread made each warp load touch 32 lines).
struct WarpSpan {
  int begin;
  int end;
};
__device__ __forceinline__ WarpSpan warp_span(int begin, int end) {
  const int span = (end - begin + kWarps - 1) / kWarps;
  const int first = min(end, begin + static_cast<int>(threadIdx.x >> 5) * span);
  return {first, min(end, first + span)};
}

// Sum of `value` over the warps before this one, and over all of them in
// `total`; `value` must be the same on all lanes of a warp.
__device__ u64 warps_before_u64(u64 value, u64* scratch, u64* total) {
  const int warp = static_cast<int>(threadIdx.x >> 5);
  __syncthreads();  // scratch may still be read
  if ((threadIdx.x & 31) == 0) scratch[warp] = value;
  __syncthreads();
  u64 before = 0;
  u64 all = 0;
  for (int w = 0; w < kWarps; ++w) {
    before += w < warp ? scratch[w] : 0;
    all += scratch[w];
  }
  __syncthreads();  // scratch may be reused
  *total = all;
  return before;
}

// The id of the j-th token (0-based, id order) of the source whose p has
// exactly `bits`; -1 when there is none.
template <int kC, class Source>
__device__ int nth_with_bits(const Team<kC>& team, const Source& src, unsigned bits, u64 j,
                             u64* scratch, int* result) {
  const WarpSpan span = warp_span(src.begin, src.end);
  const int lane = static_cast<int>(threadIdx.x & 31);
  u64 count = 0;
  for (int base = span.begin; base < span.end; base += 32) {
    const int k = base + lane;
    const bool hit = k < span.end && src.bits(k) == bits;
    count += static_cast<u64>(__popc(__ballot_sync(0xffffffffu, hit)));
  }
  if (threadIdx.x == 0) *result = -1;
  u64 block_count = 0;
  u64 seen = warps_before_u64(count, scratch, &block_count);
  seen += team.before(block_count);
  if (j >= seen && j < seen + count) {
    // This warp holds it: walk its span again until the j-th match.
    for (int base = span.begin; base < span.end; base += 32) {
      const int k = base + lane;
      const bool hit = k < span.end && src.bits(k) == bits;
      const unsigned hits = __ballot_sync(0xffffffffu, hit);
      const auto n = static_cast<u64>(__popc(hits));
      if (j < seen + n) {
        // The (j - seen)-th set lane of `hits`.
        unsigned rest = hits;
        for (u64 i = seen; i < j; ++i) rest &= rest - 1;
        if (lane == __ffs(rest) - 1) *result = src.id(k);
        break;
      }
      seen += n;
    }
  }
  __syncthreads();
  const int found = *result;
  __syncthreads();
  return team.max_index(found);
}

// The top-k (use_top_k) or top-p draw from `src`: the row, or candidates
// that hold every token whose p is above their `outside`. The kept set is every token with p above
// a selected value plus the first tokens (id order) with p equal to it; the coin picks the first
// kept rank whose cumulative mass exceeds coin * kept mass. Returns the token's id, -1 when no
// token carries the chosen bits, or kUndecided when candidates hold fewer than k tokens, not more
// than top_p of the mass (the whole row then keeps every token), or a kept set that a token left
// out could join.
template <int kC, class Source>
__device__ int draw_kept(const Team<kC>& team, const Source& src, bool use_top_k, float top_k,
                         float top_p, float coin, int vocab, SelectShared& sel, u64* scratch,
                         int* found_index) {
  Selection kept;
  u64 kept_ties = 0;
  if (use_top_k) {
    const u64 k = static_cast<u64>(ceilf(top_k));
    kept = radix_select<kC>(src, /*by_mass=*/false, k - 1, false, 0, sel);
    if constexpr (!Source::kWholeRow) {
      if (!kept.found) return kUndecided;
    }
    kept_ties = k - kept.above_count;
  } else {
    const u64 target = __double2ull_rz(static_cast<double>(top_p) * kFixedOne);
    kept = radix_select<kC>(src, /*by_mass=*/true, target, false, 0, sel);
    if (kept.found) {
      // Tied token n precedes with mass above + n * w; kept while <= top_p.
      const u64 w = fixed(__uint_as_float(kept.bits));
      kept_ties = w == 0 ? kept.tie_count : min(kept.tie_count, (target - kept.above_mass) / w + 1);
    } else if constexpr (Source::kWholeRow) {
      // Rounding left the whole row within top_p: keep everything.
      kept = radix_select<kC>(src, /*by_mass=*/false, static_cast<u64>(vocab) - 1, false, 0, sel);
      kept_ties = kept.tie_count;
    } else {
      return kUndecided;
    }
  }
  if constexpr (!Source::kWholeRow) {
    // The kept set, and every rank the coin can pick, lies above the
    // selected value: the candidates hold all of it only when no token left
    // out can reach that value.
    if (kept.bits <= src.outside) return kUndecided;
  }
  const u64 tie_weight = fixed(__uint_as_float(kept.bits));
  const u64 kept_mass = kept.above_mass + kept_ties * tie_weight;
  const u64 u = __double2ull_rz(static_cast<double>(coin) * static_cast<double>(kept_mass));

  // The first kept rank whose cumulative mass exceeds u.
  unsigned chosen_bits = kept.bits;
  u64 nth = 0;
  bool in_kept_ties = true;
  if (kept.above_mass > u) {
    const Selection above = radix_select<kC>(src, /*by_mass=*/true, u, true, kept.bits, sel);
    if (above.found) {
      const u64 w = fixed(__uint_as_float(above.bits));
      chosen_bits = above.bits;
      nth = w == 0 ? 0 : min(above.tie_count - 1, (u - above.above_mass) / w);
      in_kept_ties = false;
    }
  }
  if (in_kept_ties) {
    const u64 last = kept_ties > 0 ? kept_ties - 1 : 0;
    nth = (tie_weight == 0 || u < kept.above_mass) ? last
                                                   : min(last, (u - kept.above_mass) / tie_weight);
  }
  return nth_with_bits(team, src, chosen_bits, nth, scratch, found_index);
}

}  // namespace
}  // namespace cellm::cuda
