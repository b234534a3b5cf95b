// Scheduler: decides which queued tasks form the next batch. Bookkeeping
// only: it never runs callbacks or executors.
//
// Thread-safety: every method may be called from any thread; calls are
// bounded and never block on work.
#pragma once

#include <cstddef>
#include <vector>

#include "cellm/types.h"

namespace cellm {

class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // All or nothing. Task ids must be unique among queued tasks (and within
  // `tasks`); an id is free for reuse once dispatched or cancelled.
  virtual bool submit(std::vector<Task> tasks) = 0;
  // A hint: whether get_work() would return something now.
  virtual bool has_work() const = 0;
  // The next batch. The caller owns the returned tasks. A session appears more
  // than once only as consecutive prefill chunks, at most one producing output.
  virtual std::vector<Task> get_work() = 0;
  // Removes and returns the session's queued tasks, marked cancelled.
  virtual std::vector<Task> cancel(SessionId session) = 0;
  // Removes and returns every queued task (shutdown).
  virtual std::vector<Task> clear() = 0;
  // The widest prefill chunk accepted (never zero); wider chunks are refused.
  virtual std::size_t max_prefill_chunk_size() const = 0;
};

}  // namespace cellm
