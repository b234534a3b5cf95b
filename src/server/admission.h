// AdmissionQueue: how many sequences may generate at once, and a bounded FIFO
// of requests waiting for room. A request that finds the queue full is
// refused at once (HTTP 429) rather than piling up threads.
//
// Thread-safety: every method may be called from any thread. acquire() blocks
// the calling thread while it waits; a Ticket may be released on any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "cellm/status.h"

namespace cellm::server {

class AdmissionQueue {
  struct State;

 public:
  // Holds `cost` sequences until destroyed (or release()d).
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { release(); }
    void release();
    bool held() const { return state_ != nullptr; }

   private:
    friend class AdmissionQueue;
    Ticket(std::shared_ptr<State> state, std::int32_t cost)
        : state_(std::move(state)), cost_(cost) {}
    std::shared_ptr<State> state_;
    std::int32_t cost_ = 0;
  };

  // capacity: sequences at once (> 0); max_waiting: queued requests (>= 0).
  AdmissionQueue(std::int32_t capacity, std::int32_t max_waiting);

  // Waits in FIFO order until `cost` sequences are free. Refusals:
  // InvalidArgument when cost exceeds the capacity, OutOfResources when the
  // wait queue is full, Unavailable after close(), Cancelled once
  // `abandoned` (polled while waiting) returns true.
  Result<Ticket> acquire(std::int32_t cost, const std::function<bool()>& abandoned = {});

  // Refuses every later acquire and wakes the waiters with Unavailable.
  void close();

  std::int32_t capacity() const;
  std::int32_t running_requests() const;
  std::int32_t running_sequences() const;
  std::int32_t waiting_requests() const;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace cellm::server
