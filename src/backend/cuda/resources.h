// Move-only RAII owners of CUDA resources: device and pinned buffers,
// streams, events and instantiated graphs. Each records the device it was
// created on; destructors release without throwing (a failed release is
// logged, never fatal, so unwinding stays safe).
//
// Thread-safety: objects are not synchronised; one owner at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include <cuda_runtime.h>

#include "cellm/status.h"

namespace cellm::cuda {

namespace detail {
struct DeviceFree {
  void operator()(void* ptr) const noexcept;
};
struct PinnedFree {
  void operator()(void* ptr) const noexcept;
};
Result<void*> device_alloc(std::size_t bytes);
Result<void*> pinned_alloc(std::size_t bytes);
}  // namespace detail

int current_device();

// `count` elements of T in device memory (cudaMalloc; never during capture).
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> allocate(std::size_t count) {
    DeviceBuffer buffer;
    if (count == 0) {
      return buffer;
    }
    CELLM_ASSIGN_OR_RETURN(void* raw, detail::device_alloc(count * sizeof(T)));
    buffer.ptr_.reset(raw);
    buffer.count_ = count;
    buffer.device_ = current_device();
    return buffer;
  }

  T* data() const { return static_cast<T*>(ptr_.get()); }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  int device() const { return device_; }
  bool empty() const { return count_ == 0; }

 private:
  std::unique_ptr<void, detail::DeviceFree> ptr_;
  std::size_t count_ = 0;
  int device_ = -1;
};

// Page-locked host memory, so async copies really are asynchronous.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  static Result<PinnedBuffer> allocate(std::size_t count) {
    PinnedBuffer buffer;
    if (count == 0) {
      return buffer;
    }
    CELLM_ASSIGN_OR_RETURN(void* raw, detail::pinned_alloc(count * sizeof(T)));
    buffer.ptr_.reset(raw);
    buffer.count_ = count;
    buffer.device_ = current_device();
    return buffer;
  }

  T* data() const { return static_cast<T*>(ptr_.get()); }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  std::span<T> span() const { return {data(), count_}; }
  int device() const { return device_; }

 private:
  std::unique_ptr<void, detail::PinnedFree> ptr_;
  std::size_t count_ = 0;
  int device_ = -1;
};

// A stream, owned (created non-blocking) or borrowed (owns() == false).
class Stream {
 public:
  Stream() = default;
  static Result<Stream> create();
  static Stream borrow(cudaStream_t stream);

  cudaStream_t get() const { return stream_.get(); }
  bool owns() const { return stream_.get_deleter().owns; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  struct Deleter {
    bool owns = true;
    void operator()(cudaStream_t stream) const noexcept;
  };
  std::unique_ptr<CUstream_st, Deleter> stream_{nullptr, Deleter{}};
  int device_ = -1;
};

class Event {
 public:
  Event() = default;
  // Timing events are for benchmarks; the step loop uses timing-free ones.
  static Result<Event> create(bool timing = false);

  cudaEvent_t get() const { return event_.get(); }
  void record(cudaStream_t stream) const;
  void synchronize() const;
  // Milliseconds between two recorded timing events.
  static float elapsed_ms(const Event& start, const Event& stop);

 private:
  struct Deleter {
    void operator()(cudaEvent_t event) const noexcept;
  };
  std::unique_ptr<CUevent_st, Deleter> event_;
  int device_ = -1;
};

// An instantiated graph captured from a stream.
class GraphExec {
 public:
  GraphExec() = default;
  // Ends the capture begun with begin_capture() on `stream` and instantiates it.
  static Result<GraphExec> end_capture(cudaStream_t stream);
  static void begin_capture(cudaStream_t stream);

  bool valid() const { return exec_ != nullptr; }
  void launch(cudaStream_t stream) const;

 private:
  struct Deleter {
    void operator()(cudaGraphExec_t exec) const noexcept;
  };
  std::unique_ptr<CUgraphExec_st, Deleter> exec_;
  int device_ = -1;
};

}  // namespace cellm::cuda
