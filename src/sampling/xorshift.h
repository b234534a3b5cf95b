// Xorshift64Star: the per-session uniform generator whose draws ("coins")
// drive both the host sampler and the device sampler, so one seed yields the
// same tokens on either path (batching_spec §2.4, §4.7).
//
// Thread-safety: a plain value; one owner advances it.
#pragma once

#include <cstdint>

namespace cellm::sampling {

// One splitmix64 output for `x`; used to spread a user seed over all 64 bits.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class Xorshift64Star {
 public:
  // The state is splitmix64(seed); xorshift needs a nonzero state, so the one
  // seed that mixes to zero falls back to the golden-ratio constant.
  explicit constexpr Xorshift64Star(std::uint64_t seed) : state_(seed_state(seed)) {}

  static constexpr std::uint64_t seed_state(std::uint64_t seed) {
    const std::uint64_t s = splitmix64(seed);
    return s != 0 ? s : 0x9E3779B97F4A7C15ull;
  }

  // The top 32 bits of state * 0x2545F4914F6CDD1D after one xorshift round.
  constexpr std::uint32_t next_u32() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return static_cast<std::uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
  }

  // Uniform in [0, 1) on a 2^-24 grid: exactly representable as float32.
  constexpr float next_f32() { return static_cast<float>(next_u32() >> 8) / 16777216.0f; }

  constexpr std::uint64_t state() const { return state_; }

 private:
  std::uint64_t state_;
};

}  // namespace cellm::sampling
