#include "engine/mask_workers.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace cellm::detail {

MaskWorkers::MaskWorkers(std::int32_t threads) {
  CELLM_CHECK(threads >= 1, "mask workers need at least one thread, got {}", threads);
  threads_.reserve(static_cast<std::size_t>(threads));
  for (std::int32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run_(); });
}

MaskWorkers::~MaskWorkers() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void MaskWorkers::submit(std::shared_ptr<MaskJob> job) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
}

bool MaskWorkers::help_one() {
  std::shared_ptr<MaskJob> job;
  {
    std::lock_guard lock(mu_);
    if (queue_.empty()) return false;
    job = std::move(queue_.front());
    queue_.pop_front();
  }
  job->try_run();
  return true;
}

std::int32_t MaskWorkers::auto_threads() {
  const auto hw = static_cast<std::int32_t>(std::thread::hardware_concurrency());
  return std::clamp(hw / 4, 1, 4);
}

void MaskWorkers::run_() {
  for (;;) {
    std::shared_ptr<MaskJob> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    // A reader may have claimed it first; then there is nothing to do.
    job->try_run();
  }
}

}  // namespace cellm::detail
