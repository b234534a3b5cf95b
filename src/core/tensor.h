// Tensor: a dtype, a shape (row-major, contiguous) and a pointer to the data,
// on the host or on a device, optionally owning its storage.
//
// A Tensor built with Tensor::empty() owns a host allocation (64-byte
// aligned); one built with Tensor::view() borrows memory that must outlive it.
// Copying a Tensor shares the storage (like a shared_ptr); clone() copies the
// bytes. Device tensors are created by a backend and only viewed elsewhere.
//
// Thread-safety: a Tensor is a value; concurrent reads are safe, concurrent
// writes to shared storage are the caller's problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace cellm {

enum class Device : std::uint8_t { kCpu, kCuda };

using Shape = std::vector<std::int64_t>;

std::int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[2, 3]"

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled host tensor.
  static Tensor empty(DType dtype, Shape shape);
  // A borrowed view of `data`, which must outlive every copy of the view.
  static Tensor view(void* data, DType dtype, Shape shape, Device device = Device::kCpu);
  static Tensor view(const void* data, DType dtype, Shape shape, Device device = Device::kCpu) {
    return view(const_cast<void*>(data), dtype, std::move(shape), device);
  }
  // A view sharing `owner` for lifetime purposes.
  static Tensor view_owned(void* data, DType dtype, Shape shape, Device device,
                           std::shared_ptr<void> owner);

  bool defined() const { return data_ != nullptr || numel() == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const {
    CELLM_CHECK(i >= 0 && i < rank(), "dim {} of a rank-{} tensor", i, rank());
    return shape_[static_cast<std::size_t>(i)];
  }
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }

  void* data() { return data_; }
  const void* data() const { return data_; }

  // Typed access; checks that T matches the dtype's size and the tensor is on the host.
  template <typename T>
  T* data_as() {
    CELLM_CHECK(sizeof(T) == dtype_size(dtype_), "element size mismatch for {}",
                dtype_name(dtype_));
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data_as() const {
    CELLM_CHECK(sizeof(T) == dtype_size(dtype_), "element size mismatch for {}",
                dtype_name(dtype_));
    return static_cast<const T*>(data_);
  }
  template <typename T>
  std::span<T> span() {
    CELLM_CHECK(device_ == Device::kCpu, "span() of a device tensor");
    return {data_as<T>(), static_cast<std::size_t>(numel())};
  }
  template <typename T>
  std::span<const T> span() const {
    CELLM_CHECK(device_ == Device::kCpu, "span() of a device tensor");
    return {data_as<T>(), static_cast<std::size_t>(numel())};
  }

  // Same storage, new shape of the same element count.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the outermost dimension, sharing storage.
  Tensor slice_rows(std::int64_t begin, std::int64_t end) const;
  // A host copy that owns its bytes.
  Tensor clone() const;
  // "bf16[4, 8]".
  std::string describe() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  Shape shape_;
  std::shared_ptr<void> owner_;
};

// Element i of a float-like host tensor (f32, f16, bf16) as float.
float element_as_f32(const Tensor& t, std::int64_t i);

}  // namespace cellm
