#include "cellm/decode_first_scheduler.h"

#include <algorithm>
#include <iterator>

namespace cellm {

std::unique_ptr<DecodeFirstScheduler> DecodeFirstScheduler::create(
    std::size_t max_batch_tokens, std::size_t max_decode_sequences,
    std::size_t max_prefill_chunk_size) {
  if (max_batch_tokens == 0 || max_decode_sequences == 0 || max_prefill_chunk_size == 0) {
    return nullptr;
  }
  if (max_decode_sequences >= max_batch_tokens) return nullptr;
  // A full chunk must always fit beside a saturated decode set, otherwise a
  // steady decode load could starve every prompt forever.
  if (max_prefill_chunk_size > max_batch_tokens - max_decode_sequences) return nullptr;
  return std::unique_ptr<DecodeFirstScheduler>(
      new DecodeFirstScheduler(max_batch_tokens, max_decode_sequences, max_prefill_chunk_size));
}

DecodeFirstScheduler::DecodeFirstScheduler(std::size_t max_batch_tokens,
                                           std::size_t max_decode_sequences,
                                           std::size_t max_prefill_chunk_size)
    : max_batch_tokens_(max_batch_tokens),
      max_decode_sequences_(max_decode_sequences),
      max_prefill_chunk_size_(max_prefill_chunk_size) {}

bool DecodeFirstScheduler::admissible_locked(const std::vector<Task>& tasks) const {
  if (tasks.empty()) return false;
  for (const Task& t : tasks) {
    const std::size_t size = t.input.size;
    if (size == 0) return false;
    if (t.is_decode ? size != 1 : size > max_prefill_chunk_size_) return false;
    if (queued_ids_.contains(t.tid)) return false;
  }
  // Repeats within `tasks` (the engine submits one decode, or a prompt's few
  // chunks, at a time: no set for those).
  if (tasks.size() > 1) {
    std::vector<TaskId> ids;
    ids.reserve(tasks.size());
    for (const Task& t : tasks) ids.push_back(t.tid);
    std::sort(ids.begin(), ids.end());
    if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) return false;
  }
  return true;
}

bool DecodeFirstScheduler::submit(std::vector<Task> tasks) {
  std::lock_guard lock(mu_);
  if (!admissible_locked(tasks)) return false;
  for (Task& t : tasks) {
    queued_ids_.insert(t.tid);
    Queued q{next_arrival_++, std::move(t)};
    if (q.task.is_decode) {
      decodes_.push_back(std::move(q));
      continue;
    }
    const SessionId sid = q.task.input.sid;
    prefills_[sid].push_back(std::move(q));
    ++queued_prefills_;
    if (in_rotation_.insert(sid).second) rotation_.push_back(sid);
  }
  return true;
}

bool DecodeFirstScheduler::has_work() const {
  std::lock_guard lock(mu_);
  return !decodes_.empty() || queued_prefills_ > 0;
}

std::vector<Task> DecodeFirstScheduler::get_work() {
  std::lock_guard lock(mu_);
  std::vector<Task> batch;
  batch.reserve(std::min(decodes_.size(), max_decode_sequences_) + (queued_prefills_ > 0 ? 8 : 0));
  std::size_t used = 0;

  // Decodes: FIFO up to the cap; a session's second decode waits for the next
  // batch and keeps its place ahead of later arrivals.
  decoding_.clear();
  if (!decodes_.empty()) {
    deferred_.clear();
    for (Queued& q : decodes_) {
      if (decoding_.size() < max_decode_sequences_ && decoding_.insert(q.task.input.sid).second) {
        queued_ids_.erase(q.task.tid);
        used += q.task.input.size;
        batch.push_back(std::move(q.task));
      } else {
        deferred_.push_back(std::move(q));
      }
    }
    decodes_.clear();
    decodes_.swap(deferred_);
  }
  // A steady decode load queues no prompt: nothing more to visit.
  if (queued_prefills_ == 0 && rotation_.empty()) return batch;

  // Prefill passes over the rotation until the budget is spent or a pass
  // takes nothing.
  bool took = true;
  while (took && used < max_batch_tokens_) {
    took = false;
    std::pmr::deque<SessionId> waiting(&pool_);  // visited but took nothing: keep priority
    std::pmr::deque<SessionId> served(&pool_);   // took a chunk: rotate behind the others
    for (SessionId sid : rotation_) {
      auto it = prefills_.find(sid);
      if (it == prefills_.end() || it->second.empty()) {
        // Drained (or emptied by cancel): the session leaves the rotation.
        if (it != prefills_.end()) prefills_.erase(it);
        in_rotation_.erase(sid);
        continue;
      }
      if (decoding_.contains(sid)) {
        // Its chunk would not adjoin the decode already in this batch.
        waiting.push_back(sid);
        continue;
      }
      Queued& front = it->second.front();
      if (front.task.input.size > max_batch_tokens_ - used) {
        waiting.push_back(sid);
        continue;
      }
      used += front.task.input.size;
      queued_ids_.erase(front.task.tid);
      batch.push_back(std::move(front.task));
      it->second.pop_front();
      --queued_prefills_;
      took = true;
      if (it->second.empty()) {
        prefills_.erase(it);
        in_rotation_.erase(sid);
      } else {
        served.push_back(sid);
      }
    }
    rotation_ = std::move(waiting);
    std::move(served.begin(), served.end(), std::back_inserter(rotation_));
  }
  return batch;
}

namespace {

std::vector<Task> in_arrival_order(std::vector<std::pair<std::uint64_t, Task>>& items) {
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Task> out;
  out.reserve(items.size());
  for (auto& [arrival, task] : items) {
    task.cancelled = true;
    out.push_back(std::move(task));
  }
  return out;
}

}  // namespace

std::vector<Task> DecodeFirstScheduler::cancel(SessionId session) {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::uint64_t, Task>> removed;
  std::pmr::deque<Queued> kept(&pool_);
  for (Queued& q : decodes_) {
    if (q.task.input.sid == session) {
      removed.emplace_back(q.arrival, std::move(q.task));
    } else {
      kept.push_back(std::move(q));
    }
  }
  decodes_ = std::move(kept);
  if (auto it = prefills_.find(session); it != prefills_.end()) {
    for (Queued& q : it->second) removed.emplace_back(q.arrival, std::move(q.task));
    queued_prefills_ -= it->second.size();
    // The entry stays (empty) with its rotation slot; get_work() retires it.
    it->second.clear();
  }
  for (const auto& item : removed) queued_ids_.erase(item.second.tid);
  return in_arrival_order(removed);
}

std::vector<Task> DecodeFirstScheduler::clear() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::uint64_t, Task>> removed;
  for (Queued& q : decodes_) removed.emplace_back(q.arrival, std::move(q.task));
  for (auto& [sid, queue] : prefills_) {
    for (Queued& q : queue) removed.emplace_back(q.arrival, std::move(q.task));
  }
  decodes_.clear();
  prefills_.clear();
  queued_prefills_ = 0;
  rotation_.clear();
  in_rotation_.clear();
  queued_ids_.clear();
  return in_arrival_order(removed);
}

}  // namespace cellm
