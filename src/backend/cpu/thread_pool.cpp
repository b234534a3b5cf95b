#include "backend/cpu/thread_pool.h"

#include <algorithm>

#include <omp.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CELLM_PAUSE() _mm_pause()
#else
#define CELLM_PAUSE() std::this_thread::yield()
#endif

namespace cellm::cpu {
namespace {

// About 20-50 microseconds of polling before sleeping.
constexpr int kSpins = 20000;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  const int n = size();
  if (n == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n);
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpins) {
      CELLM_PAUSE();
    } else {
      const int left = pending_.load(std::memory_order_acquire);
      if (left != 0) pending_.wait(left, std::memory_order_acquire);
    }
  }
}

void ThreadPool::worker(int index) {
  // The reference ops these tasks call (attention) open OpenMP regions: one
  // thread each here, the pool provides the parallelism.
  omp_set_num_threads(1);
  std::uint64_t seen = 0;
  for (;;) {
    std::uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen; ++spin) {
      if (spin < kSpins) {
        CELLM_PAUSE();
      } else {
        generation_.wait(g, std::memory_order_acquire);
      }
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    (*job_)(index, static_cast<int>(workers_.size()) + 1);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace cellm::cpu
