// DecodeFirstScheduler under random operation sequences (checked against an
// independent model of what is queued) and under concurrent callers.
#include "cellm/decode_first_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace cellm {
namespace {

Task make_task(TaskId tid, SessionId sid, std::size_t size, bool is_decode, bool output) {
  Task t;
  t.tid = tid;
  t.is_decode = is_decode;
  t.input.sid = sid;
  t.input.size = size;
  t.input.produce_output = output;
  t.input.payload = std::make_shared<const std::vector<Token>>(size, Token{1});
  return t;
}

// What the model knows: which tasks are queued, per-session prefill order and
// the global decode order. It does not know the rotation policy.
struct Model {
  struct Info {
    SessionId sid;
    std::size_t size;
    bool is_decode;
    bool output;
  };
  std::map<TaskId, Info> queued;
  std::map<SessionId, std::deque<TaskId>> prefills;
  std::deque<TaskId> decodes;

  bool session_queued(SessionId sid) const {
    for (const auto& [tid, info] : queued) {
      if (info.sid == sid) return true;
    }
    return false;
  }
  bool session_has_prefill(SessionId sid) const {
    auto it = prefills.find(sid);
    return it != prefills.end() && !it->second.empty();
  }
  void remove(TaskId tid) {
    const Info info = queued.at(tid);
    queued.erase(tid);
    if (info.is_decode) {
      decodes.erase(std::find(decodes.begin(), decodes.end(), tid));
    } else {
      auto& q = prefills[info.sid];
      q.erase(std::find(q.begin(), q.end(), tid));
    }
  }
};

TEST(InvariantTest, AcceptedTasksAreNeverLostOrReturnedTwice) {
  constexpr std::size_t kChunk = 4, kDecodes = 3, kBudget = 2 * kChunk + kDecodes;
  auto s = DecodeFirstScheduler::create(kBudget, kDecodes, kChunk);
  ASSERT_NE(s, nullptr);
  std::mt19937_64 rng(20240611);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };

  Model model;
  std::set<TaskId> accepted, dispatched, cancelled;
  TaskId next_tid = 1;
  constexpr SessionId kSessions = 6;

  for (int op = 0; op < 4000; ++op) {
    const std::size_t kind = pick(100);
    if (kind < 40) {
      // Submit a well-formed group (runner discipline: a session receives new
      // work only when nothing of it is queued, except extra decodes).
      const SessionId sid = static_cast<SessionId>(pick(kSessions)) + 1;
      std::vector<Task> group;
      if (pick(2) == 0) {
        if (model.session_has_prefill(sid)) continue;
        group.push_back(make_task(next_tid++, sid, 1, true, true));
      } else {
        if (model.session_queued(sid)) continue;
        const std::size_t chunks = 1 + pick(4);
        for (std::size_t c = 0; c < chunks; ++c) {
          group.push_back(make_task(next_tid++, sid, 1 + pick(kChunk), false, c + 1 == chunks));
        }
      }
      ASSERT_TRUE(s->submit(group));
      for (const Task& t : group) {
        accepted.insert(t.tid);
        model.queued[t.tid] = {t.input.sid, t.input.size, t.is_decode, t.input.produce_output};
        if (t.is_decode) {
          model.decodes.push_back(t.tid);
        } else {
          model.prefills[sid].push_back(t.tid);
        }
      }
    } else if (kind < 48) {
      // Malformed or duplicate groups are refused whole and change nothing.
      std::vector<Task> group{make_task(next_tid, 1, 1, false, false)};
      switch (pick(4)) {
        case 0: group.push_back(make_task(next_tid, 2, 1, false, false)); break;
        case 1: group.push_back(make_task(next_tid + 1, 2, kChunk + 1, false, false)); break;
        case 2: group.push_back(make_task(next_tid + 1, 2, 2, true, true)); break;
        default:
          if (model.queued.empty()) continue;
          group.push_back(make_task(model.queued.begin()->first, 2, 1, false, false));
      }
      ASSERT_FALSE(s->submit(group));
    } else if (kind < 85) {
      auto work = s->get_work();
      ASSERT_EQ(work.empty(), model.queued.empty()) << "op " << op;
      std::size_t tokens = 0, decodes = 0;
      std::map<SessionId, int> outputs, decode_of, prefill_of;
      std::vector<TaskId> taken_decodes;
      std::map<SessionId, std::vector<TaskId>> taken_prefills;
      for (const Task& t : work) {
        ASSERT_TRUE(model.queued.contains(t.tid)) << "unknown or repeated task " << t.tid;
        ASSERT_FALSE(dispatched.contains(t.tid));
        ASSERT_FALSE(t.cancelled);
        dispatched.insert(t.tid);
        tokens += t.input.size;
        if (t.input.produce_output) ++outputs[t.input.sid];
        if (t.is_decode) {
          ++decodes;
          ++decode_of[t.input.sid];
          taken_decodes.push_back(t.tid);
        } else {
          ++prefill_of[t.input.sid];
          taken_prefills[t.input.sid].push_back(t.tid);
        }
      }
      EXPECT_LE(tokens, kBudget);
      EXPECT_LE(decodes, kDecodes);
      for (const auto& [sid, n] : outputs) EXPECT_LE(n, 1) << "session " << sid;
      for (const auto& [sid, n] : decode_of) {
        EXPECT_EQ(n, 1);
        EXPECT_FALSE(prefill_of.contains(sid));
      }
      // Decodes: greedy FIFO with one per session up to the cap.
      std::vector<TaskId> expected_decodes;
      std::set<SessionId> seen;
      for (TaskId tid : model.decodes) {
        const SessionId sid = model.queued.at(tid).sid;
        if (expected_decodes.size() < kDecodes && !seen.contains(sid)) {
          seen.insert(sid);
          expected_decodes.push_back(tid);
        }
      }
      EXPECT_EQ(taken_decodes, expected_decodes);
      // Prefills: each session's chunks leave in submission order.
      for (const auto& [sid, taken] : taken_prefills) {
        const auto& q = model.prefills[sid];
        ASSERT_LE(taken.size(), q.size());
        EXPECT_TRUE(std::equal(taken.begin(), taken.end(), q.begin()));
      }
      for (const Task& t : work) model.remove(t.tid);
    } else if (kind < 98) {
      const SessionId sid = static_cast<SessionId>(pick(kSessions + 1)) + 1;  // may be unknown
      std::set<TaskId> expected;
      for (const auto& [tid, info] : model.queued) {
        if (info.sid == sid) expected.insert(tid);
      }
      auto removed = s->cancel(sid);
      std::set<TaskId> got;
      for (const Task& t : removed) {
        EXPECT_TRUE(t.cancelled);
        EXPECT_TRUE(got.insert(t.tid).second);
        cancelled.insert(t.tid);
      }
      ASSERT_EQ(got, expected);
      for (TaskId tid : got) model.remove(tid);
    } else {
      std::set<TaskId> got;
      for (const Task& t : s->clear()) {
        EXPECT_TRUE(t.cancelled);
        got.insert(t.tid);
        cancelled.insert(t.tid);
      }
      std::set<TaskId> expected;
      for (const auto& [tid, info] : model.queued) expected.insert(tid);
      ASSERT_EQ(got, expected);
      model = Model{};
    }
    ASSERT_EQ(s->has_work(), !model.queued.empty()) << "op " << op;
  }
  for (const Task& t : s->clear()) cancelled.insert(t.tid);
  for (TaskId tid : dispatched) EXPECT_FALSE(cancelled.contains(tid));
  EXPECT_EQ(dispatched.size() + cancelled.size(), accepted.size());
  EXPECT_GT(dispatched.size(), 500u);
  EXPECT_GT(cancelled.size(), 50u);
}

TEST(ConcurrencyTest, ProducersAndConsumerMakeProgressWithoutLoss) {
  auto s = DecodeFirstScheduler::create(40, 8, 16);
  ASSERT_NE(s, nullptr);
  constexpr int kProducers = 4, kPerProducer = 250;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&s, p] {
      std::mt19937 rng(p);
      for (int i = 0; i < kPerProducer; ++i) {
        const TaskId tid = p * 100000 + i;
        const SessionId sid = p * 10 + (i % 5);
        const bool dec = rng() % 2 == 0;
        Task t = make_task(tid, sid, dec ? 1 : 1 + rng() % 16, dec, true);
        while (!s->submit({t})) std::this_thread::yield();
      }
    });
  }
  std::set<TaskId> got;
  bool duplicate = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (got.size() < static_cast<std::size_t>(kProducers * kPerProducer) &&
         std::chrono::steady_clock::now() < deadline) {
    for (const Task& t : s->get_work()) duplicate |= !got.insert(t.tid).second;
  }
  for (auto& t : producers) t.join();
  EXPECT_FALSE(duplicate);
  EXPECT_EQ(got.size(), static_cast<std::size_t>(kProducers * kPerProducer));
  EXPECT_FALSE(s->has_work());
}

TEST(ConcurrencyTest, ObserversAreSafeDuringScheduling) {
  auto s = DecodeFirstScheduler::create(40, 8, 16);
  ASSERT_NE(s, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<long> observations{0};
  std::vector<std::thread> observers;
  for (int i = 0; i < 3; ++i) {
    observers.emplace_back([&] {
      while (!stop.load()) {
        (void)s->has_work();
        EXPECT_EQ(s->max_prefill_chunk_size(), 16u);
        EXPECT_TRUE(s->cancel(-1).empty());  // a session nobody uses
        observations.fetch_add(1);
      }
    });
  }
  constexpr int kTasks = 2000;
  std::set<TaskId> got;
  for (int i = 0; i < kTasks; ++i) {
    ASSERT_TRUE(s->submit({make_task(i, i % 7, 1 + i % 16, false, true)}));
    if (i % 3 == 0) {
      for (const Task& t : s->get_work()) got.insert(t.tid);
    }
  }
  while (s->has_work()) {
    for (const Task& t : s->get_work()) got.insert(t.tid);
  }
  // On a loaded machine the observers may not have run yet; let them.
  while (observations.load() < 100) std::this_thread::yield();
  stop.store(true);
  for (auto& t : observers) t.join();
  EXPECT_EQ(got.size(), static_cast<std::size_t>(kTasks));
}

}  // namespace
}  // namespace cellm
