#include "server/admission.h"

#include <algorithm>
#include <chrono>

namespace cellm::server {

struct AdmissionQueue::State {
  mutable std::mutex mu;
  std::condition_variable cv;
  std::int32_t capacity = 0;
  std::int32_t max_waiting = 0;
  std::int32_t used = 0;
  std::int32_t running = 0;
  bool closed = false;
  std::uint64_t next_id = 0;
  std::deque<std::uint64_t> waiting;  // ids in arrival order
};

AdmissionQueue::Ticket::Ticket(Ticket&& other) noexcept
    : state_(std::move(other.state_)), cost_(other.cost_) {
  other.cost_ = 0;
}

AdmissionQueue::Ticket& AdmissionQueue::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    cost_ = other.cost_;
    other.cost_ = 0;
  }
  return *this;
}

void AdmissionQueue::Ticket::release() {
  if (state_ == nullptr) return;
  {
    std::lock_guard lock(state_->mu);
    state_->used -= cost_;
    state_->running -= 1;
  }
  state_->cv.notify_all();
  state_.reset();
  cost_ = 0;
}

AdmissionQueue::AdmissionQueue(std::int32_t capacity, std::int32_t max_waiting)
    : state_(std::make_shared<State>()) {
  state_->capacity = std::max<std::int32_t>(capacity, 1);
  state_->max_waiting = std::max<std::int32_t>(max_waiting, 0);
}

Result<AdmissionQueue::Ticket> AdmissionQueue::acquire(std::int32_t cost,
                                                       const std::function<bool()>& abandoned) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (s.closed) return unavailable("the server is shutting down");
  if (cost <= 0 || cost > s.capacity) {
    return invalid_argument(
        "the request needs {} concurrent sequences but the server runs at most {}", cost,
        s.capacity);
  }
  // Fast path: room now and nobody queued ahead.
  if (s.waiting.empty() && s.used + cost <= s.capacity) {
    s.used += cost;
    s.running += 1;
    return Ticket(state_, cost);
  }
  if (static_cast<std::int32_t>(s.waiting.size()) >= s.max_waiting) {
    return out_of_resources(
        "the server is at capacity ({} sequences running, {} requests waiting); "
        "retry later",
        s.used, s.waiting.size());
  }
  const std::uint64_t id = s.next_id++;
  s.waiting.push_back(id);
  auto leave = [&] {
    s.waiting.erase(std::find(s.waiting.begin(), s.waiting.end(), id));
    // The next waiter may fit now that this one no longer blocks the head.
    s.cv.notify_all();
  };
  while (true) {
    if (s.closed) {
      leave();
      return unavailable("the server is shutting down");
    }
    if (s.waiting.front() == id && s.used + cost <= s.capacity) {
      s.waiting.pop_front();
      s.used += cost;
      s.running += 1;
      s.cv.notify_all();
      return Ticket(state_, cost);
    }
    if (abandoned) {
      lock.unlock();
      const bool gone = abandoned();
      lock.lock();
      if (gone) {
        leave();
        return cancelled("the client went away while the request was queued");
      }
    }
    s.cv.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void AdmissionQueue::close() {
  {
    std::lock_guard lock(state_->mu);
    state_->closed = true;
  }
  state_->cv.notify_all();
}

std::int32_t AdmissionQueue::capacity() const {
  std::lock_guard lock(state_->mu);
  return state_->capacity;
}

std::int32_t AdmissionQueue::running_requests() const {
  std::lock_guard lock(state_->mu);
  return state_->running;
}

std::int32_t AdmissionQueue::running_sequences() const {
  std::lock_guard lock(state_->mu);
  return state_->used;
}

std::int32_t AdmissionQueue::waiting_requests() const {
  std::lock_guard lock(state_->mu);
  return static_cast<std::int32_t>(state_->waiting.size());
}

}  // namespace cellm::server
