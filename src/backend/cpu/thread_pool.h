// ThreadPool: the fast CPU program's workers. run(fn) calls fn(i, n) once on
// each of the n threads (the caller is thread 0) and returns when all are
// done: one barrier per call, nothing else shared. Idle workers spin briefly
// (a decode step issues a few hundred calls a millisecond apart) and then
// sleep on an atomic wait, so a loaded machine is not burdened by spinning
// threads — OpenMP's default spin policy made 2 threads 50x slower than 1
// when other processes held the cores.
//
// Thread-safety: run() must be called by one thread at a time (the owner);
// the pool is not reentrant (fn must not call run()).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace cellm::cpu {

class ThreadPool {
 public:
  // `threads` >= 1 in all, the caller included.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(i, n) for every i in [0, n), n = size(); returns when all are done.
  // Every thread takes part in every call (a task with nothing to do returns).
  void run(const std::function<void(int, int)>& fn);

 private:
  void worker(int index);

  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace cellm::cpu
