#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"
#include "sampling/penalties.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace cellm::sampling {
namespace {

// Reused per thread so a 262k-entry row does not allocate on every draw.
struct Scratch {
  std::vector<float> probs;
  std::vector<std::int32_t> order;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Ranks: descending probability, ties to the lower id (what a stable
// descending sort of the id-ordered row yields).
struct RankBefore {
  const float* p;
  bool operator()(std::int32_t a, std::int32_t b) const {
    return p[a] > p[b] || (p[a] == p[b] && a < b);
  }
};

// argmax_row without suppressed ids, in two passes over the row: its largest
// non-NaN value, then the first index holding it (none: every entry is NaN,
// and index 0 is the answer). That is the one-pass scan's answer (the first
// maximal non-NaN entry), but neither pass carries a dependency from one
// entry to the next, so both run four lanes at a time. A host-sampled
// speculative step takes one argmax a drafted row: a 262,144-token row
// scanned an entry at a time cost 0.2-0.4 ms, several times the two passes.
std::int64_t first_max(std::span<const float> x) {
  const std::size_t n = x.size();
  float best = -std::numeric_limits<float>::infinity();
  std::size_t i = 0;
#if defined(__SSE2__)
  // _mm_max_ps(v, acc) is `v > acc ? v : acc` per lane: a NaN never replaces
  // the accumulator, as in the scalar loop below.
  __m128 acc[4] = {_mm_set1_ps(best), _mm_set1_ps(best), _mm_set1_ps(best), _mm_set1_ps(best)};
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 4; ++k) acc[k] = _mm_max_ps(_mm_loadu_ps(&x[i + 4 * k]), acc[k]);
  }
  alignas(16) float lanes[16];
  for (int k = 0; k < 4; ++k) _mm_store_ps(lanes + 4 * k, acc[k]);
  for (float v : lanes) best = v > best ? v : best;
#endif
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  std::size_t j = 0;
#if defined(__SSE2__)
  const __m128 target = _mm_set1_ps(best);
  for (; j + 4 <= n; j += 4) {
    const int hits = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(&x[j]), target));
    if (hits != 0)
      return static_cast<std::int64_t>(j) + std::countr_zero(static_cast<unsigned>(hits));
  }
#endif
  for (; j < n; ++j) {
    if (x[j] == best) return static_cast<std::int64_t>(j);
  }
  return 0;
}

bool listed(std::span<const Token> ids, std::size_t i) {
  for (Token t : ids) {
    if (t == i) return true;
  }
  return false;
}

// The first kept rank whose kept cumulative mass exceeds coin * kept mass;
// when rounding leaves none, the last kept rank with nonzero probability (a
// zero-probability rank may be a suppressed id).
std::int64_t pick_kept(const float* p, std::span<const std::int32_t> kept, float coin) {
  double mass = 0.0;
  for (std::int32_t id : kept) mass += p[id];
  const double target = static_cast<double>(coin) * mass;
  double cum = 0.0;
  std::int32_t last_live = kept.front();
  for (std::int32_t id : kept) {
    cum += p[id];
    if (target < cum) return id;
    if (p[id] > 0.0f) last_live = id;
  }
  return last_live;
}

std::int64_t sample_top_k(const float* p, std::int64_t vocab, int top_k, float coin,
                          std::vector<std::int32_t>& order) {
  order.resize(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  const auto kth = order.begin() + top_k;
  std::nth_element(order.begin(), kth, order.end(), RankBefore{p});
  std::sort(order.begin(), kth, RankBefore{p});
  return pick_kept(p, std::span(order.data(), static_cast<std::size_t>(top_k)), coin);
}

// Sorts only as many ranks as the nucleus needs: each round partitions the
// next chunk of the unsorted tail to the front and sorts it, which yields the
// same prefix a full stable sort would.
std::int64_t sample_top_p(const float* p, std::int64_t vocab, float top_p, float coin,
                          std::vector<std::int32_t>& order) {
  order.resize(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::size_t sorted = 0;
  std::size_t chunk = 256;
  double preceding = 0.0;
  const std::size_t n = order.size();
  while (true) {
    const std::size_t end = std::min(n, sorted + chunk);
    if (end < n) {
      std::nth_element(order.begin() + static_cast<std::ptrdiff_t>(sorted),
                       order.begin() + static_cast<std::ptrdiff_t>(end), order.end(),
                       RankBefore{p});
    }
    std::sort(order.begin() + static_cast<std::ptrdiff_t>(sorted),
              order.begin() + static_cast<std::ptrdiff_t>(end), RankBefore{p});
    for (std::size_t r = sorted; r < end; ++r) {
      if (preceding > static_cast<double>(top_p)) {
        return pick_kept(p, std::span(order.data(), r), coin);
      }
      preceding += p[order[r]];
    }
    if (end == n) return pick_kept(p, std::span(order.data(), n), coin);
    sorted = end;
    chunk *= 4;
  }
}

std::int64_t sample_in_token_order(const float* p, std::int64_t vocab, float coin) {
  double cum = 0.0;
  const double c = coin;
  std::int64_t last_live = vocab - 1;
  for (std::int64_t i = 0; i < vocab; ++i) {
    cum += p[i];
    if (cum > c) return i;
    if (p[i] > 0.0f) last_live = i;
  }
  return last_live;
}

bool float_like(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

Status check_logits(const Tensor& logits) {
  if (logits.device() != Device::kCpu) {
    return invalid_argument("logits {} are not on the host", logits.describe());
  }
  if (logits.rank() != 2 || logits.dim(1) <= 0) {
    return invalid_argument("logits {} must be [rows, vocab] with vocab > 0", logits.describe());
  }
  if (!float_like(logits.dtype())) {
    return invalid_argument("logits {} must be f32, f16 or bf16", logits.describe());
  }
  if (logits.dim(1) > std::numeric_limits<std::int32_t>::max()) {
    return invalid_argument("logits {} have a vocabulary past int32", logits.describe());
  }
  if (logits.numel() > 0 && logits.data() == nullptr) {
    return invalid_argument("logits {} have no data", logits.describe());
  }
  return Status::ok();
}

// top_k travels as a float; anything outside (0, V) (NaN included) disables it.
int top_k_from_param(float value, std::int64_t vocab) {
  if (!(value >= 1.0f) || value >= static_cast<float>(vocab)) return 0;
  return static_cast<int>(value);
}

}  // namespace

std::int64_t argmax_row(std::span<const float> logits, std::span<const Token> suppressed) {
  CELLM_CHECK(!logits.empty(), "argmax of an empty row");
  if (suppressed.empty()) return first_max(logits);
  std::size_t best = 0;
  while (best < logits.size() && listed(suppressed, best)) ++best;
  // Every id suppressed: nothing to skip to, so the list is ignored.
  if (best == logits.size()) return argmax_row(logits, {});
  for (std::size_t i = best + 1; i < logits.size(); ++i) {
    if ((logits[i] > logits[best] || (std::isnan(logits[best]) && !std::isnan(logits[i]))) &&
        !listed(suppressed, i)) {
      best = i;
    }
  }
  return static_cast<std::int64_t>(best);
}

std::int64_t sample_row(std::span<const float> logits, float temperature, float top_p, int top_k,
                        float coin, std::span<const Token> suppressed) {
  CELLM_CHECK(!logits.empty(), "sampling an empty row");
  if (!(temperature > 0.0f)) return argmax_row(logits, suppressed);
  const auto vocab = static_cast<std::int64_t>(logits.size());
  Scratch& s = scratch();
  s.probs.resize(logits.size());
  float* p = s.probs.data();
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < logits.size(); ++i) {
    // NaN logits get zero probability.
    p[i] = std::isnan(logits[i]) ? kNegInf : logits[i] / temperature;
  }
  for (Token id : suppressed) {
    if (id < logits.size()) p[id] = kNegInf;
  }
  float max_z = kNegInf;
  for (std::size_t i = 0; i < logits.size(); ++i) max_z = std::max(max_z, p[i]);
  if (!std::isfinite(max_z)) return argmax_row(logits, suppressed);
  double sum = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp(p[i] - max_z);
    sum += p[i];
  }
  for (std::size_t i = 0; i < logits.size(); ++i) {
    p[i] = static_cast<float>(static_cast<double>(p[i]) / sum);
  }
  if (top_k > 0 && top_k < vocab) return sample_top_k(p, vocab, top_k, coin, s.order);
  if (top_p > 0.0f && top_p < 1.0f) return sample_top_p(p, vocab, top_p, coin, s.order);
  return sample_in_token_order(p, vocab, coin);
}

Status check_policy(const SamplingParams& params, std::int64_t vocab) {
  if (params.suppressed_count > kMaxSuppressedTokens) {
    return invalid_argument("sampling policy suppresses {} tokens; at most {} can be suppressed",
                            params.suppressed_count, kMaxSuppressedTokens);
  }
  CELLM_RETURN_IF_ERROR(check_adjustments(params, vocab));
  if (params.logprobs < -1 || params.logprobs > kMaxTopLogprobs) {
    return invalid_argument(
        "sampling policy asks for {} top logprobs; the range is 0 to {} (-1: "
        "none)",
        params.logprobs, kMaxTopLogprobs);
  }
  std::int64_t in_vocab = 0;
  const std::span<const Token> ids = params.suppressed_tokens();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const bool repeat = std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i),
                                  ids[i]) != ids.begin() + static_cast<std::ptrdiff_t>(i);
    if (!repeat && vocab > 0 && ids[i] < static_cast<Token>(vocab)) ++in_vocab;
  }
  if (vocab > 0 && in_vocab >= vocab) {
    return invalid_argument(
        "sampling policy suppresses every one of the {} tokens of the vocabulary; nothing could "
        "be sampled (lower min_tokens or drop stop tokens)",
        vocab);
  }
  return Status::ok();
}

Sampler::Sampler(std::int64_t vocab_size, const SamplingParams& params, std::uint64_t seed)
    : vocab_size_(vocab_size), params_(params), rng_(seed) {}

std::optional<std::int64_t> Sampler::sample(std::span<const float> logits) {
  if (vocab_size_ <= 0 || static_cast<std::int64_t>(logits.size()) != vocab_size_) {
    return std::nullopt;
  }
  if (greedy()) return argmax_row(logits, params_.suppressed_tokens());
  const float coin = rng_.next_f32();
  return sample_row(logits, params_.temperature, params_.top_p, params_.top_k, coin,
                    params_.suppressed_tokens());
}

std::optional<std::int64_t> Sampler::sample(std::span<const std::uint16_t> logits, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF16) return std::nullopt;
  std::vector<float> row(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) {
    row[i] = dtype == DType::kBF16 ? bf16_to_f32(logits[i]) : f16_to_f32(logits[i]);
  }
  return sample(std::span<const float>(row));
}

void row_to_f32(const Tensor& logits, std::int64_t row, std::vector<float>& out) {
  const auto vocab = static_cast<std::size_t>(logits.dim(1));
  out.resize(vocab);
  const std::size_t base = static_cast<std::size_t>(row) * vocab;
  switch (logits.dtype()) {
    case DType::kF32: {
      const float* src = logits.data_as<float>() + base;
      std::copy(src, src + vocab, out.begin());
      return;
    }
    case DType::kBF16: {
      const std::uint16_t* src = logits.data_as<std::uint16_t>() + base;
      for (std::size_t i = 0; i < vocab; ++i) out[i] = bf16_to_f32(src[i]);
      return;
    }
    case DType::kF16: {
      const std::uint16_t* src = logits.data_as<std::uint16_t>() + base;
      for (std::size_t i = 0; i < vocab; ++i) out[i] = f16_to_f32(src[i]);
      return;
    }
    case DType::kI32:
    case DType::kI64:
    case DType::kU8:
    case DType::kF8E4M3: break;
  }
  CELLM_CHECK(false, "row_to_f32 of {} logits", dtype_name(logits.dtype()));
}

Result<std::vector<std::int64_t>> sample_rows(const Tensor& logits, const Tensor& params,
                                              const Tensor* suppressed) {
  CELLM_RETURN_IF_ERROR(check_logits(logits));
  const std::int64_t rows = logits.dim(0);
  if (params.device() != Device::kCpu || params.dtype() != DType::kF32 || params.rank() != 2 ||
      params.dim(0) != rows || params.dim(1) != kNumParams) {
    return invalid_argument("sampler params {} must be host f32[{}, {}] for logits {}",
                            params.describe(), rows, kNumParams, logits.describe());
  }
  constexpr auto kSlots = static_cast<std::int64_t>(kMaxSuppressedTokens);
  if (suppressed != nullptr &&
      (suppressed->device() != Device::kCpu || suppressed->dtype() != DType::kI64 ||
       suppressed->rank() != 2 || suppressed->dim(0) != rows || suppressed->dim(1) != kSlots ||
       (rows > 0 && suppressed->data() == nullptr))) {
    return invalid_argument("suppressed ids {} must be host i64[{}, {}] for logits {}",
                            suppressed->describe(), rows, kSlots, logits.describe());
  }
  const std::int64_t vocab = logits.dim(1);
  std::vector<std::int64_t> tokens(static_cast<std::size_t>(rows));
  std::vector<float> row;
  std::vector<Token> banned;
  const float* prm = params.data_as<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* q = prm + r * kNumParams;
    const float coin = q[kParamCoin];
    if (!(coin >= 0.0f && coin < 1.0f) && q[kParamTemperature] > 0.0f) {
      return invalid_argument("sampler params row {}: coin {} is outside [0, 1)", r, coin);
    }
    banned.clear();
    if (suppressed != nullptr) {
      for (std::int64_t id : suppressed->span<const std::int64_t>().subspan(
               static_cast<std::size_t>(r * kSlots), static_cast<std::size_t>(kSlots))) {
        if (id >= 0) banned.push_back(static_cast<Token>(id));
      }
    }
    const int top_k = top_k_from_param(q[kParamTopK], vocab);
    if (logits.dtype() == DType::kF32) {
      const float* src = logits.data_as<float>() + r * vocab;
      tokens[static_cast<std::size_t>(r)] =
          sample_row(std::span(src, static_cast<std::size_t>(vocab)), q[kParamTemperature],
                     q[kParamTopP], top_k, coin, banned);
    } else {
      row_to_f32(logits, r, row);
      tokens[static_cast<std::size_t>(r)] =
          sample_row(row, q[kParamTemperature], q[kParamTopP], top_k, coin, banned);
    }
  }
  return tokens;
}

Result<std::vector<std::int64_t>> argmax_rows(const Tensor& logits) {
  CELLM_RETURN_IF_ERROR(check_logits(logits));
  const std::int64_t rows = logits.dim(0);
  const std::int64_t vocab = logits.dim(1);
  std::vector<std::int64_t> tokens(static_cast<std::size_t>(rows));
  std::vector<float> row;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (logits.dtype() == DType::kF32) {
      const float* src = logits.data_as<float>() + r * vocab;
      tokens[static_cast<std::size_t>(r)] =
          argmax_row(std::span(src, static_cast<std::size_t>(vocab)));
    } else {
      row_to_f32(logits, r, row);
      tokens[static_cast<std::size_t>(r)] = argmax_row(row);
    }
  }
  return tokens;
}

}  // namespace cellm::sampling
