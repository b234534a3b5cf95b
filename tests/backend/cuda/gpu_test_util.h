// Shared helpers of the CUDA op tests: device detection (tests skip cleanly
// without a device), host<->device copies, bf16 random data and the
// normalised error used to compare kernels with float64 CPU references.
//
// Thread-safety: test-only helpers; call from the test thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_types.h"
#include "backend/cuda/resources.h"
#include "core/dtype.h"

namespace cellm::cuda::testing {

inline bool gpu_available() {
  static const bool available = [] {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return count > 0;
  }();
  return available;
}

#define CELLM_REQUIRE_GPU()                             \
  do {                                                  \
    if (!::cellm::cuda::testing::gpu_available()) {     \
      GTEST_SKIP() << "no CUDA device on this machine"; \
    }                                                   \
  } while (false)

// A device copy of a host vector; download() reads it back.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host) { assign(host); }
  explicit DeviceArray(std::size_t count) {
    auto buffer = DeviceBuffer<T>::allocate(count);
    EXPECT_TRUE(buffer.ok()) << buffer.status().to_string();
    buffer_ = std::move(*buffer);
  }
  void assign(const std::vector<T>& host) {
    if (buffer_.size() != host.size()) {
      auto buffer = DeviceBuffer<T>::allocate(host.size());
      EXPECT_TRUE(buffer.ok()) << buffer.status().to_string();
      buffer_ = std::move(*buffer);
    }
    if (!host.empty()) {
      CELLM_CUDA_CHECK(
          cudaMemcpy(buffer_.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
  }
  std::vector<T> download() const {
    std::vector<T> host(buffer_.size());
    CELLM_CUDA_CHECK(cudaDeviceSynchronize());
    if (!host.empty()) {
      CELLM_CUDA_CHECK(
          cudaMemcpy(host.data(), buffer_.data(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return host;
  }
  // Fills every byte with 0xff: as bf16 that is NaN, so an element a kernel
  // forgot to write fails the comparison.
  void poison() {
    CELLM_CUDA_CHECK(cudaMemset(buffer_.data(), 0xff, buffer_.bytes()));
    CELLM_CUDA_CHECK(cudaDeviceSynchronize());  // tests also use non-blocking streams
  }
  T* data() const { return buffer_.data(); }
  std::size_t size() const { return buffer_.size(); }

 private:
  DeviceBuffer<T> buffer_;
};

inline bf16 to_bf16(float value) {
  return std::bit_cast<bf16>(f32_to_bf16(value));
}
inline float from_bf16(bf16 value) {
  return bf16_to_f32(std::bit_cast<std::uint16_t>(value));
}

// bf16 values drawn uniformly from [lo, hi), and their exact float values.
inline std::vector<bf16> random_bf16(std::size_t count, std::mt19937& rng, float lo = -1.0f,
                                     float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<bf16> out(count);
  for (auto& v : out) v = to_bf16(dist(rng));
  return out;
}

inline std::vector<float> to_float(const std::vector<bf16>& values) {
  std::vector<float> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = from_bf16(values[i]);
  return out;
}

// sum((out - ref)^2) / sum(ref^2); NaN in `out` gives +inf.
inline double nmse(const std::vector<float>& out, const std::vector<double>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double err = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    const double d = static_cast<double>(out[i]) - ref[i];
    err += d * d;
    norm += ref[i] * ref[i];
  }
  return norm > 0.0 ? err / norm : err;
}

// bf16 storage gives ~2^-9 relative error per element: NMSE around 1e-5.
inline constexpr double kBf16Nmse = 1e-4;

}  // namespace cellm::cuda::testing
