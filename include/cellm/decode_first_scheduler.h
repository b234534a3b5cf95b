// DecodeFirstScheduler: the default Scheduler. Every batch first takes queued
// decodes (FIFO, one per session, up to a cap), then fills the remaining token
// budget with prefill chunks, one chunk per session per round-robin pass.
//
// Thread-safety: all methods may be called from any thread (one mutex guards
// the queues and their memory pool); no call blocks on work or runs user code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cellm/scheduler.h"

namespace cellm {

class DecodeFirstScheduler final : public Scheduler {
 public:
  // Null when a limit is zero, when the decode cap leaves no room for prefill
  // (max_decode_sequences >= max_batch_tokens), or when a full prefill chunk
  // would not fit beside a full set of decodes.
  static std::unique_ptr<DecodeFirstScheduler> create(std::size_t max_batch_tokens = 544,
                                                      std::size_t max_decode_sequences = 32,
                                                      std::size_t max_prefill_chunk_size = 256);

  bool submit(std::vector<Task> tasks) override;
  bool has_work() const override;
  std::vector<Task> get_work() override;
  std::vector<Task> cancel(SessionId session) override;
  std::vector<Task> clear() override;
  std::size_t max_prefill_chunk_size() const override { return max_prefill_chunk_size_; }

  std::size_t max_batch_tokens() const { return max_batch_tokens_; }
  std::size_t max_decode_sequences() const { return max_decode_sequences_; }

 private:
  // Arrival order is kept so that cancel() and clear() return tasks in the
  // order they were submitted.
  struct Queued {
    std::uint64_t arrival = 0;
    Task task;
  };

  DecodeFirstScheduler(std::size_t max_batch_tokens, std::size_t max_decode_sequences,
                       std::size_t max_prefill_chunk_size);

  bool admissible_locked(const std::vector<Task>& tasks) const;

  const std::size_t max_batch_tokens_;
  const std::size_t max_decode_sequences_;
  const std::size_t max_prefill_chunk_size_;

  mutable std::mutex mu_;
  // Every queue and set below takes its nodes from this pool (declared
  // first, so destroyed last): a decode step submits and dispatches one task
  // per session, and the general-purpose heap made that the scheduler's main
  // cost. Guarded by mu_ like the containers.
  std::pmr::unsynchronized_pool_resource pool_;
  std::uint64_t next_arrival_ = 0;
  std::pmr::deque<Queued> decodes_{&pool_};
  // Per-session prefill chunks in submission order.
  std::pmr::unordered_map<SessionId, std::pmr::deque<Queued>> prefills_{&pool_};
  std::size_t queued_prefills_ = 0;
  // Each session holds at most one slot. A slot whose queue was emptied by
  // cancel() survives until the next get_work(), so a session that rejoins
  // before then reuses it instead of gaining a second turn per pass.
  std::pmr::deque<SessionId> rotation_{&pool_};
  std::pmr::unordered_set<SessionId> in_rotation_{&pool_};
  std::pmr::unordered_set<TaskId> queued_ids_{&pool_};
  // get_work()'s scratch, kept between calls: the sessions decoding in the
  // batch being built and the decodes it leaves for a later one.
  std::pmr::unordered_set<SessionId> decoding_{&pool_};
  std::pmr::deque<Queued> deferred_{&pool_};
};

}  // namespace cellm
