#include <algorithm>

#include "backend/cuda/device_utils.cuh"
#include "backend/cuda/kernels/bulk_copy.cuh"
#include "backend/cuda/kernels/decode_stream.cuh"
#include "backend/cuda/kernels/decode_stream_attention.cuh"
#include "backend/cuda/launch.h"

namespace cellm::cuda {
namespace decode_stream {
namespace {

// A block is kWarps consumer warps and one producer warp (the last). Nine
// warps put three on one of the SM's four register-file quarters, which caps
// a thread at 168 registers (launch bounds of one block per SM).
constexpr int kThreads = kConsumers + 32;
// A piece is what one warp multiplies in one step: 16 bytes per lane, 256
// columns of one weight row (rows are whole pieces: k % 256 == 0).
constexpr int kPieceBytes = 512;
constexpr int kPieceShift = 8;  // log2 of the columns of a piece
// A stage holds as many whole rows of a matrix as fit in kStageBytes (one
// row of 14336 columns is 28 KiB), so a row never spans two stages.
constexpr int kStageBytes = 32 * 1024;
constexpr int kMaxStages = 7;
constexpr int kMinStages = 3;  // fewer would stall the stream at every phase barrier
constexpr int kHeaderBytes = 512;  // ring barriers, norm sums
constexpr int kMaxPieceRounds = 8;  // pieces of a row per warp: k <= 8 * 8 * 256

// The warps that share one row: the fewest (a power of two) that keep a
// warp's pieces of a row at eight or fewer, so its inputs fit in registers.
// The other warps take other rows of the stage, so every warp reduces about
// one row per stage.
__host__ __device__ __forceinline__ int team_size(int pieces) {
  int t = 1;
  while (t < kWarps && t * kMaxPieceRounds < pieces) t *= 2;
  return t;
}
constexpr int kPhases = 5;          // q/k/v, attention, o, gate/up, down

// The matrices of a layer in stream order; gate and up are two row ranges
// of one matrix, so a block holds the gate and the up row of its columns.
enum Matrix : int { kQkv = 0, kO, kGate, kUp, kDown, kMatrices };

// A block's share of one matrix: whole rows, contiguous in memory.
struct Segment {
  const unsigned char* src;
  int k;
  int row0;  // the block's local index of the first row (gate rows, then up rows)
  int rows;
};

__device__ __forceinline__ int share(int n, int b, int grid) {
  return static_cast<int>(static_cast<long long>(n) * b / grid);
}

__device__ __forceinline__ Segment segment(const DecodeStreamParams& p, const DecodeStreamLayer& lw,
                                           int m) {
  const int b = blockIdx.x;
  const int grid = gridDim.x;
  const int q_dim = p.num_heads * p.head_dim;
  const int qkv_dim = q_dim + 2 * p.num_kv_heads * p.head_dim;
  int n = p.hidden;
  int k = p.hidden;
  const bf16* w = lw.o;
  std::int64_t row_offset = 0;
  int row0 = 0;
  switch (m) {
    case kQkv:
      n = qkv_dim;
      w = lw.qkv;
      break;
    case kO:
      k = q_dim;
      break;
    case kGate:
    case kUp:
      n = p.inter;
      w = lw.gate_up;
      if (m == kUp) {
        row_offset = p.inter;
        row0 = share(n, b + 1, grid) - share(n, b, grid);
      }
      break;
    default:
      k = p.inter;
      w = lw.down;
      break;
  }
  const int r0 = share(n, b, grid);
  const int r1 = share(n, b + 1, grid);
  Segment s;
  s.src = reinterpret_cast<const unsigned char*>(w + (row_offset + r0) * k);
  s.k = k;
  s.row0 = row0;
  s.rows = r1 - r0;
  return s;
}

struct Shared {
  std::uint64_t* full;   // [stages]: a stage's bytes have landed
  std::uint64_t* empty;  // [stages]: every consumer warp is done with it
  float* norm_sums;      // [kWarps]
  float* region;         // row partials [rows][kWarps], or the attention scratch
  unsigned char* ring;   // [stages][kStageBytes]
  int stages;
};

__device__ __forceinline__ Shared carve(unsigned char* smem, const DecodeStreamParams& p) {
  Shared s;
  s.full = reinterpret_cast<std::uint64_t*>(smem);
  s.empty = s.full + kMaxStages;
  s.norm_sums = reinterpret_cast<float*>(s.empty + kMaxStages);
  s.region = reinterpret_cast<float*>(smem + kHeaderBytes);
  s.stages = p.stages;
  s.ring = smem + p.smem_bytes - p.stages * kStageBytes;
  return s;
}

// A position in the weight stream: stage `r / per_stage` of matrix m of
// layer l (the order the consumers read them).
struct Cursor {
  int l = 0;
  int m = 0;
  int r = 0;
  Segment s{};
  unsigned row_bytes = 0;
  int per_stage = 0;
  bool done = false;

  __device__ __forceinline__ void load(const DecodeStreamParams& p) {
    s = segment(p, p.layers[l], m);
    row_bytes = static_cast<unsigned>(s.k) * sizeof(bf16);
    per_stage = kStageBytes / static_cast<int>(row_bytes);
  }
  // Skips matrices of which this block has no rows.
  __device__ __forceinline__ void settle(const DecodeStreamParams& p) {
    while (!done && r >= s.rows) {
      r = 0;
      if (++m == kMatrices) {
        m = 0;
        done = ++l == p.num_layers;
      }
      if (!done) load(p);
    }
  }
  __device__ __forceinline__ void start(const DecodeStreamParams& p) {
    load(p);
    settle(p);
  }
  __device__ __forceinline__ void next(const DecodeStreamParams& p) {
    r += per_stage;
    settle(p);
  }
  __device__ __forceinline__ const unsigned char* src() const { return s.src + r * row_bytes; }
  __device__ __forceinline__ unsigned bytes() const {
    return static_cast<unsigned>(min(per_stage, s.rows - r)) * row_bytes;
  }
};

// The producer: one lane walks every stage of every matrix of every layer
// in the order the consumers read them, and refills a slot as soon as the
// consumers release it. It never waits on the computation. (Also asking L2
// for the stages past the ring, with cp.async.bulk.prefetch, measured slower:
// 1B 1.31 and 1.51 ms/step at 4 and 10 stages ahead against 1.13 without.)
__device__ __forceinline__ void produce(const DecodeStreamParams& p, const Shared& sh) {
  const std::uint64_t policy = l2_evict_first_policy();
  Cursor cur;
  cur.start(p);
  for (unsigned seq = 0; !cur.done; ++seq, cur.next(p)) {
    const unsigned slot = seq % sh.stages;
    const unsigned use = seq / sh.stages;
    if (use > 0) mbar_wait(&sh.empty[slot], (use - 1) & 1u);
    const unsigned bytes = cur.bytes();
    mbar_expect_bytes(&sh.full[slot], bytes);
    bulk_copy_to_shared(sh.ring + slot * kStageBytes, cur.src(), bytes, &sh.full[slot], policy);
  }
}

// A consumer warp's inputs of one matrix: the 8 columns its lane multiplies
// in each of its pieces of a row (member + T j for a team of T warps), as
// floats.
template <int R>
struct Inputs {
  float x[R][8];
};

// Loads `in` (bf16, k columns, written earlier in this launch: read through
// L2) and, with a norm weight, returns this block's 1 / rms of it (the first
// team's sums of squares meet in shared memory in a fixed order) and folds
// the weight into the inputs; the 1 / rms is applied to the finished sums.
template <int R>
__device__ __forceinline__ float load_inputs(Inputs<R>& in, const bf16* src, int k,
                                             const bf16* norm_weight, const DecodeStreamParams& p,
                                             const Shared& sh) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int pieces = k >> kPieceShift;
  const int team = team_size(pieces);
  const int member = warp & (team - 1);
  float squares = 0.0f;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int piece = member + team * j;
    if (piece < pieces) {
      unpack8(__ldcg(reinterpret_cast<const uint4*>(src) + piece * 32 + lane), in.x[j]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) in.x[j][e] = 0.0f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) squares = fmaf(in.x[j][e], in.x[j][e], squares);
  }
  if (norm_weight == nullptr) return 1.0f;
  squares = warp_sum(squares);
  if (lane == 0 && warp < team) sh.norm_sums[warp] = squares;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int piece = member + team * j;
    if (piece < pieces) {
      float g[8];
      unpack8(__ldg(reinterpret_cast<const uint4*>(norm_weight) + piece * 32 + lane), g);
#pragma unroll
      for (int e = 0; e < 8; ++e) in.x[j][e] *= g[e] + p.norm_weight_offset;
    }
  }
  consumers_sync();
  float total = 0.0f;
  for (int w = 0; w < team; ++w) total += sh.norm_sums[w];
  return rsqrtf(total / static_cast<float>(k) + p.norm_eps);
}

// Multiplies one segment, stage by stage as the producer lands them, into
// per-row, per-member sums: region[(row0 + row) * kWarps + member]. The
// warps form teams of T (team_size); a team takes every (8 / T)-th row of a
// stage and its members the pieces member, member + T, ... of that row, so
// inputs stay in registers, a warp reduces one row at a time in uniform
// control flow, and each row's sum has a fixed order. (Splitting every row
// over all eight warps made each warp reduce every row, and those shuffles
// outnumbered the products.)
template <int R>
__device__ __forceinline__ void consume(const Segment& s, const Inputs<R>& in, const Shared& sh,
                                        unsigned& seq) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int pieces = s.k >> kPieceShift;
  const int team = team_size(pieces);
  const int member = warp & (team - 1);
  const int teams = kWarps / team;
  const int row_bytes = s.k * static_cast<int>(sizeof(bf16));
  const int per_stage = kStageBytes / row_bytes;
  for (int r0 = 0; r0 < s.rows; r0 += per_stage, ++seq) {
    const unsigned slot = seq % sh.stages;
    mbar_wait(&sh.full[slot], (seq / sh.stages) & 1u);
    const int rows = min(per_stage, s.rows - r0);
    const unsigned char* stage = sh.ring + slot * kStageBytes + lane * 16;
    for (int r = warp / team; r < rows; r += teams) {
      const unsigned char* row = stage + r * row_bytes;
      float even = 0.0f;
      float odd = 0.0f;
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int piece = member + team * j;
        if (piece < pieces) {
          float w[8];
          unpack8(*reinterpret_cast<const uint4*>(row + piece * kPieceBytes), w);
#pragma unroll
          for (int e = 0; e < 8; e += 2) {
            even = fmaf(in.x[j][e], w[e], even);
            odd = fmaf(in.x[j][e + 1], w[e + 1], odd);
          }
        }
      }
      const float sum = warp_sum(even + odd);
      if (lane == 0) sh.region[(s.row0 + r0 + r) * kWarps + member] = sum;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&sh.empty[slot]);
  }
}

// A finished row's sum: its team members' parts in member order.
__device__ __forceinline__ float row_sum(const Shared& sh, int local_row, int k) {
  const int team = team_size(k >> kPieceShift);
  float sum = 0.0f;
  for (int w = 0; w < team; ++w) sum += sh.region[local_row * kWarps + w];
  return sum;
}

// Loads the inputs and multiplies the block's segments of matrices
// [first, last] (gate and up share inputs). Returns the 1 / rms (or 1).
// Called from one place in the kernel, so it exists once per R.
template <int R>
__device__ __forceinline__ float project(const DecodeStreamParams& p, const DecodeStreamLayer& lw,
                                      int first, int last, const bf16* src, int k,
                                      const bf16* norm_weight, const Shared sh, unsigned& seq) {
  Inputs<R> in;
  const float inv_rms = load_inputs<R>(in, src, k, norm_weight, p, sh);
  for (int m = first; m <= last; ++m) consume<R>(segment(p, lw, m), in, sh, seq);
  return inv_rms;
}

__device__ __forceinline__ float project_any(const DecodeStreamParams& p,
                                             const DecodeStreamLayer& lw, int first, int last,
                                             const bf16* src, int k, const bf16* norm_weight,
                                             const Shared& sh, unsigned& seq) {
  const int pieces = k >> kPieceShift;
  const int team = team_size(pieces);
  if ((pieces + team - 1) / team <= 4) {
    return project<4>(p, lw, first, last, src, k, norm_weight, sh, seq);
  }
  return project<kMaxPieceRounds>(p, lw, first, last, src, k, norm_weight, sh, seq);
}

// Grid-wide phase barrier over sync[0], which counts block arrivals. Every
// block arrives once per phase, and waits for phase n's arrivals before it
// arrives at phase n + 1, so `grid * phase` arrivals mean phase `phase`
// is done everywhere. The last arrival of the launch zeroes the counter.
__device__ __forceinline__ void arrive(const DecodeStreamParams& p) {
  __threadfence();
  consumers_sync();
  if (threadIdx.x == 0) {
    const unsigned total = static_cast<unsigned>(gridDim.x) * kPhases * p.num_layers;
    const unsigned before = atomic_add_acq_rel(p.sync, 1u);
    if (before + 1 == total) atomicExch(p.sync, 0u);
  }
}

__device__ __forceinline__ void wait_for(const DecodeStreamParams& p, int phase) {
  if (threadIdx.x == 0) {
    const unsigned target = static_cast<unsigned>(gridDim.x) * static_cast<unsigned>(phase);
    while (load_acquire(p.sync) < target) {
    }
  }
  consumers_sync();
}

template <int E, int G>
__device__ __noinline__ void attention_phase(const DecodeStreamParams& p, int layer, int phase,
                                             int pos, int slot, int cell, const Shared sh) {
  const Unit u = unit_of_block(pos, p.num_kv_heads);
  KeyBatch<E> batch;
  // Earlier steps' keys do not depend on this step: request them first.
  if (u.active) prefetch_keys<E>(p, layer, u.g, u.begin, u.end, pos, slot, batch);
  wait_for(p, phase);
  if (u.active) attention_unit<E, G>(p, layer, u, pos, slot, cell, sh.region, batch);
  arrive(p);
}

__global__ void __launch_bounds__(kThreads, 1)
    decode_stream_kernel(const __grid_constant__ DecodeStreamParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const Shared sh = carve(smem, p);
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < sh.stages; ++i) {
      mbar_init(&sh.full[i], 1);
      mbar_init(&sh.empty[i], kWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (tid >= kConsumers) {
    // Weights only: the producer starts before the previous kernel is done.
    if (tid == kConsumers) produce(p, sh);
    return;
  }
  griddep_wait();
  const int pos = *p.position;
  const int slot = *p.slot;
  const int cell = *p.cell;
  const int q_dim = p.num_heads * p.head_dim;
  const int qkv_dim = q_dim + 2 * p.num_kv_heads * p.head_dim;
  const bool wide_group = p.num_heads > 4 * p.num_kv_heads;
  unsigned seq = 0;
  int phase = 0;
  for (int l = 0; l < p.num_layers; ++l) {
    const DecodeStreamLayer& lw = p.layers[l];
    for (int step = 0; step < kPhases; ++step, ++phase) {
      if (step == 1) {  // attention (it waits for the q/k/v itself, after its prefetch)
        if (p.head_dim == 64) {
          if (wide_group) {
            attention_phase<2, kMaxGroup>(p, l, phase, pos, slot, cell, sh);
          } else {
            attention_phase<2, 4>(p, l, phase, pos, slot, cell, sh);
          }
        } else if (wide_group) {
          attention_phase<4, kMaxGroup>(p, l, phase, pos, slot, cell, sh);
        } else {
          attention_phase<4, 4>(p, l, phase, pos, slot, cell, sh);
        }
        continue;
      }
      if (phase > 0) wait_for(p, phase);
      // The projection of this phase: its input, norm and matrices.
      const bf16* src = p.x;
      int k = p.hidden;
      const bf16* norm = nullptr;
      int first = kQkv;
      int last = kQkv;
      int n = qkv_dim;
      if (step == 0) {
        norm = lw.attn_norm;
      } else if (step == 2) {
        src = p.attn;
        k = q_dim;
        first = last = kO;
        n = p.hidden;
      } else if (step == 3) {
        norm = lw.mlp_norm;
        first = kGate;
        last = kUp;
        n = p.inter;
      } else {
        src = p.gu;
        k = p.inter;
        first = last = kDown;
        n = p.hidden;
      }
      const float inv_rms = project_any(p, lw, first, last, src, k, norm, sh, seq);
      consumers_sync();
      const int r0 = share(n, blockIdx.x, gridDim.x);
      const int rows = share(n, blockIdx.x + 1, gridDim.x) - r0;
      for (int t = tid; t < rows; t += kConsumers) {
        const float sum = row_sum(sh, t, k) * inv_rms;
        if (step == 0) {
          const float bias = lw.qkv_bias != nullptr ? __bfloat162float(lw.qkv_bias[r0 + t]) : 0.0f;
          p.qkv[r0 + t] = __float2bfloat16_rn(sum + bias);
        } else if (step == 3) {
          const float g = round_bf16(sum);
          const float up = round_bf16(row_sum(sh, rows + t, k) * inv_rms);
          p.gu[r0 + t] = __float2bfloat16_rn((p.gelu_tanh ? gelu_tanh(g) : silu(g)) * up);
        } else {  // o and down add into the residual stream
          bf16* out = p.x + r0 + t;
          *out = __float2bfloat16_rn(__bfloat162float(__ldcg(out)) + round_bf16(sum));
        }
      }
      arrive(p);
    }
  }
}

}  // namespace
}  // namespace decode_stream

const char* decode_stream_unsupported(std::int32_t hidden, std::int32_t q_dim, std::int32_t inter,
                                      std::int32_t num_heads, std::int32_t num_kv_heads,
                                      std::int32_t head_dim) {
  using namespace decode_stream;
  if (head_dim != 64 && head_dim != 128) return "head_dim is not 64 or 128";
  if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0 ||
      num_heads / num_kv_heads > kMaxGroup) {
    return "more than 8 q heads per kv head";
  }
  // Whole pieces per row, at most kMaxPieceRounds of them per warp of a full
  // team (their inputs live in registers). The lower bound of four pieces
  // is what the GPU tests have covered (see decode_stream_gpu_test.cpp).
  constexpr int kPieceColumns = 1 << kPieceShift;
  constexpr int kMaxColumns = kWarps * kMaxPieceRounds * kPieceColumns;
  for (const std::int32_t k : {hidden, q_dim, inter}) {
    if (k < 4 * kPieceColumns || k % kPieceColumns != 0 || k > kMaxColumns) {
      return "hidden, q and intermediate sizes must be multiples of 256 from 1024 to 16384";
    }
  }
  return "";
}

std::size_t decode_stream_partials_floats(std::int32_t num_heads, std::int32_t head_dim) {
  return static_cast<std::size_t>(num_heads) * decode_stream::kMaxSplits *
         static_cast<std::size_t>(head_dim + 2);
}

std::size_t decode_stream_sync_words(std::int32_t num_kv_heads) {
  return 1 + static_cast<std::size_t>(num_kv_heads);
}

DecodeStreamLayout decode_stream_layout(std::int32_t hidden, std::int32_t q_dim,
                                        std::int32_t inter, std::int32_t num_heads,
                                        std::int32_t num_kv_heads, std::int32_t head_dim,
                                        std::int32_t grid, std::int32_t smem_limit) {
  using namespace decode_stream;
  if (grid <= 0 || num_kv_heads <= 0 || num_heads % num_kv_heads != 0) return {};
  const auto per_block = [&](std::int32_t n) { return (n + grid - 1) / grid; };
  const std::int32_t qkv_dim = q_dim + 2 * num_kv_heads * head_dim;
  const std::int32_t rows =
      std::max({per_block(qkv_dim), per_block(hidden), 2 * per_block(inter)});
  const std::int32_t partial_bytes = rows * kWarps * 4;
  const std::int32_t attention_bytes =
      attention_scratch_floats(num_heads / num_kv_heads, head_dim) * 4;
  const std::int32_t region = (std::max(partial_bytes, attention_bytes) + 127) / 128 * 128;
  const std::int32_t fixed = kHeaderBytes + region;
  const std::int32_t stages = std::min(kMaxStages, (smem_limit - fixed) / kStageBytes);
  if (stages < kMinStages) return {};
  return DecodeStreamLayout{fixed + stages * kStageBytes, stages};
}

int decode_stream_blocks_per_sm(std::int32_t smem_bytes) {
  using namespace decode_stream;
  ensure_dynamic_smem(reinterpret_cast<const void*>(decode_stream_kernel),
                      static_cast<std::size_t>(smem_bytes));
  int per_sm = 0;
  const cudaError_t error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, decode_stream_kernel, kThreads, static_cast<std::size_t>(smem_bytes));
  if (error != cudaSuccess) {
    cudaGetLastError();
    return -static_cast<int>(error);
  }
  return per_sm;
}

void launch_decode_stream(const DecodeStreamParams& params, cudaStream_t stream) {
  using namespace decode_stream;
  LaunchConfig config{dim3(static_cast<unsigned>(params.grid)), dim3(kThreads),
                      static_cast<std::size_t>(params.smem_bytes), stream};
  config.pdl = params.pdl;
  launch(decode_stream_kernel, config, params);
}

}  // namespace cellm::cuda
