// MaskWorkers: the threads that compute constrained generations' next token
// masks while the engine thread runs the step that needs them (the sampler
// settles each mask right before it draws). A job is claimed exactly once,
// by a worker or by whoever settles it first (MaskJob::try_run), so a job
// nobody has reached yet never makes a reader wait: the reader runs it. Each
// job writes only its own generation's mask, and a mask is a function of the
// grammar state alone, so results do not depend on which thread ran them.
//
// Thread-safety: submit() from any thread; the destructor joins the workers
// (jobs still queued are left to their readers' settle()).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace cellm::detail {

class MaskJob {
 public:
  virtual ~MaskJob() = default;
  // Runs the job when nobody has claimed it yet; false when it was claimed
  // (or is not pending any more).
  virtual bool try_run() = 0;
};

class MaskWorkers {
 public:
  // `threads` >= 1.
  explicit MaskWorkers(std::int32_t threads);
  ~MaskWorkers();
  MaskWorkers(const MaskWorkers&) = delete;
  MaskWorkers& operator=(const MaskWorkers&) = delete;

  void submit(std::shared_ptr<MaskJob> job);
  // Takes the oldest queued job, if any, and runs it here unless it was
  // claimed already: what a reader does instead of waiting for a worker that
  // is busy with the mask it needs. False when the queue was empty.
  bool help_one();
  std::int32_t threads() const { return static_cast<std::int32_t>(threads_.size()); }

  // The thread count RunnerOptions::kMaskThreadsAuto stands for here.
  static std::int32_t auto_threads();

 private:
  void run_();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<MaskJob>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace cellm::detail
