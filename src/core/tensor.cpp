#include "core/tensor.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace cellm {

std::int64_t shape_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    CELLM_CHECK(d >= 0, "negative dimension in {}", shape_string(shape));
    n *= d;
  }
  return n;
}

std::string shape_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  const std::size_t bytes = t.nbytes();
  const std::size_t padded = (bytes + 63) / 64 * 64;
  void* p = padded == 0 ? nullptr : std::aligned_alloc(64, padded);
  CELLM_CHECK(padded == 0 || p != nullptr, "out of host memory allocating {} bytes", padded);
  if (p != nullptr) std::memset(p, 0, padded);
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  return t;
}

Tensor Tensor::view(void* data, DType dtype, Shape shape, Device device) {
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.device_ = device;
  return t;
}

Tensor Tensor::view_owned(void* data, DType dtype, Shape shape, Device device,
                          std::shared_ptr<void> owner) {
  Tensor t = view(data, dtype, std::move(shape), device);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  CELLM_CHECK(shape_numel(shape) == numel(), "reshape {} to {}", shape_string(shape_),
              shape_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(std::int64_t begin, std::int64_t end) const {
  CELLM_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows [{}, {}) of {}",
              begin, end, describe());
  Tensor t = *this;
  const std::size_t row_bytes = shape_[0] == 0 ? 0 : nbytes() / static_cast<std::size_t>(shape_[0]);
  t.data_ = static_cast<char*>(data_) + static_cast<std::size_t>(begin) * row_bytes;
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::clone() const {
  CELLM_CHECK(device_ == Device::kCpu, "clone() of a device tensor");
  Tensor t = empty(dtype_, shape_);
  if (nbytes() > 0) std::memcpy(t.data_, data_, nbytes());
  return t;
}

std::string Tensor::describe() const {
  return fmt::format("{}{}{}", dtype_name(dtype_), shape_string(shape_),
                     device_ == Device::kCuda ? "@cuda" : "");
}

float element_as_f32(const Tensor& t, std::int64_t i) {
  CELLM_CHECK(t.device() == Device::kCpu && i >= 0 && i < t.numel(), "element {} of {}", i,
              t.describe());
  switch (t.dtype()) {
    case DType::kF32: return t.data_as<float>()[i];
    case DType::kF16: return f16_to_f32(t.data_as<std::uint16_t>()[i]);
    case DType::kBF16: return bf16_to_f32(t.data_as<std::uint16_t>()[i]);
    case DType::kI32: return static_cast<float>(t.data_as<std::int32_t>()[i]);
    case DType::kI64: return static_cast<float>(t.data_as<std::int64_t>()[i]);
    case DType::kU8: return static_cast<float>(t.data_as<std::uint8_t>()[i]);
    case DType::kF8E4M3: {
      // E4M3FN (format/fp8.h): bias 7, subnormals m/8 x 2^-6, S.1111.111 NaN.
      const std::uint8_t code = t.data_as<std::uint8_t>()[i];
      const int exp = (code >> 3) & 0xF;
      const int mant = code & 0x7;
      float mag =
          std::ldexp(static_cast<float>(exp == 0 ? mant : 8 + mant), (exp == 0 ? 1 : exp) - 10);
      if (exp == 0xF && mant == 0x7) mag = std::nanf("");
      return (code & 0x80) != 0 ? -mag : mag;
    }
  }
  return 0.0f;
}

}  // namespace cellm
