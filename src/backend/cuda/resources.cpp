#include "backend/cuda/resources.h"

#include "backend/cuda/cuda_check.h"
#include "core/log.h"

namespace cellm::cuda {
namespace detail {

void DeviceFree::operator()(void* ptr) const noexcept {
  const cudaError_t error = cudaFree(ptr);
  if (error != cudaSuccess) {
    CELLM_LOG_ERROR("cuda: cudaFree failed: {}", cudaGetErrorString(error));
  }
}

void PinnedFree::operator()(void* ptr) const noexcept {
  const cudaError_t error = cudaFreeHost(ptr);
  if (error != cudaSuccess) {
    CELLM_LOG_ERROR("cuda: cudaFreeHost failed: {}", cudaGetErrorString(error));
  }
}

Result<void*> device_alloc(std::size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t error = cudaMalloc(&ptr, bytes);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    return out_of_resources("cuda: cannot allocate {} bytes of device memory: {}", bytes,
                            cudaGetErrorString(error));
  }
  return ptr;
}

Result<void*> pinned_alloc(std::size_t bytes) {
  void* ptr = nullptr;
  const cudaError_t error = cudaMallocHost(&ptr, bytes);
  if (error != cudaSuccess) {
    cudaGetLastError();
    return out_of_resources("cuda: cannot allocate {} bytes of pinned host memory: {}", bytes,
                            cudaGetErrorString(error));
  }
  return ptr;
}

}  // namespace detail

int current_device() {
  int device = -1;
  CELLM_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

Result<Stream> Stream::create() {
  cudaStream_t raw = nullptr;
  const cudaError_t error = cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking);
  if (error != cudaSuccess) {
    return unavailable("cuda: cannot create a stream: {}", cudaGetErrorString(error));
  }
  Stream stream;
  stream.stream_ = std::unique_ptr<CUstream_st, Deleter>(raw, Deleter{true});
  stream.device_ = current_device();
  return stream;
}

Stream Stream::borrow(cudaStream_t raw) {
  Stream stream;
  stream.stream_ = std::unique_ptr<CUstream_st, Deleter>(raw, Deleter{false});
  stream.device_ = current_device();
  return stream;
}

void Stream::synchronize() const {
  CELLM_CUDA_CHECK(cudaStreamSynchronize(get()));
}

void Stream::Deleter::operator()(cudaStream_t stream) const noexcept {
  if (!owns) {
    return;
  }
  const cudaError_t error = cudaStreamDestroy(stream);
  if (error != cudaSuccess) {
    CELLM_LOG_ERROR("cuda: cudaStreamDestroy failed: {}", cudaGetErrorString(error));
  }
}

Result<Event> Event::create(bool timing) {
  cudaEvent_t raw = nullptr;
  const cudaError_t error =
      cudaEventCreateWithFlags(&raw, timing ? cudaEventDefault : cudaEventDisableTiming);
  if (error != cudaSuccess) {
    return unavailable("cuda: cannot create an event: {}", cudaGetErrorString(error));
  }
  Event event;
  event.event_.reset(raw);
  event.device_ = current_device();
  return event;
}

void Event::record(cudaStream_t stream) const {
  CELLM_CUDA_CHECK(cudaEventRecord(get(), stream));
}
void Event::synchronize() const {
  CELLM_CUDA_CHECK(cudaEventSynchronize(get()));
}

float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.0f;
  CELLM_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

void Event::Deleter::operator()(cudaEvent_t event) const noexcept {
  const cudaError_t error = cudaEventDestroy(event);
  if (error != cudaSuccess) {
    CELLM_LOG_ERROR("cuda: cudaEventDestroy failed: {}", cudaGetErrorString(error));
  }
}

void GraphExec::begin_capture(cudaStream_t stream) {
  CELLM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
}

Result<GraphExec> GraphExec::end_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t end_error = cudaStreamEndCapture(stream, &graph);
  if (end_error != cudaSuccess) {
    cudaGetLastError();
    return internal_error(
        "cuda: graph capture failed: {} (something in the captured region "
        "allocated, synchronised or used another stream)",
        cudaGetErrorString(end_error));
  }
  cudaGraphExec_t raw = nullptr;
  const cudaError_t inst_error = cudaGraphInstantiate(&raw, graph, 0);
  const cudaError_t destroy_error = cudaGraphDestroy(graph);
  if (inst_error != cudaSuccess) {
    cudaGetLastError();
    return internal_error("cuda: graph instantiation failed: {}", cudaGetErrorString(inst_error));
  }
  CELLM_CUDA_CHECK(destroy_error);
  GraphExec exec;
  exec.exec_.reset(raw);
  exec.device_ = current_device();
  return exec;
}

void GraphExec::launch(cudaStream_t stream) const {
  CELLM_CUDA_CHECK(cudaGraphLaunch(exec_.get(), stream));
}

void GraphExec::Deleter::operator()(cudaGraphExec_t exec) const noexcept {
  const cudaError_t error = cudaGraphExecDestroy(exec);
  if (error != cudaSuccess) {
    CELLM_LOG_ERROR("cuda: cudaGraphExecDestroy failed: {}", cudaGetErrorString(error));
  }
}

}  // namespace cellm::cuda
