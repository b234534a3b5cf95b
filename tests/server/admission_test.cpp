// AdmissionQueue: capacity accounting, FIFO order among waiters, the bounded
// queue, close() and abandoned waiters; refusals leave the counts unchanged.
#include "server/admission.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace cellm::server {
namespace {

using namespace std::chrono_literals;

bool eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(AdmissionTest, CountsSequencesAndReleasesOnDestruction) {
  AdmissionQueue q(4, 0);
  {
    auto a = q.acquire(3);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(q.running_sequences(), 3);
    EXPECT_EQ(q.running_requests(), 1);
    auto b = q.acquire(1);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(q.running_sequences(), 4);
    // Full with no queue: refused at once, counts unchanged.
    auto c = q.acquire(1);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kOutOfResources);
    EXPECT_EQ(q.running_sequences(), 4);
    EXPECT_EQ(q.waiting_requests(), 0);
  }
  EXPECT_EQ(q.running_sequences(), 0);
  EXPECT_EQ(q.running_requests(), 0);
}

TEST(AdmissionTest, CostAboveCapacityIsInvalid) {
  AdmissionQueue q(2, 8);
  auto t = q.acquire(3);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q.waiting_requests(), 0);
}

TEST(AdmissionTest, WaitersAreServedInArrivalOrder) {
  AdmissionQueue q(2, 8);
  auto holder = q.acquire(2);
  ASSERT_TRUE(holder.ok());
  std::vector<int> order;
  std::mutex mu;
  std::vector<std::thread> threads;
  // A big request first, then small ones: the small ones must not overtake it.
  for (int i = 0; i < 3; ++i) {
    const int cost = i == 0 ? 2 : 1;
    threads.emplace_back([&, i, cost] {
      auto t = q.acquire(cost);
      ASSERT_TRUE(t.ok());
      {
        std::lock_guard lock(mu);
        order.push_back(i);
      }
      std::this_thread::sleep_for(5ms);
    });
    ASSERT_TRUE(eventually([&] { return q.waiting_requests() == i + 1; }));
  }
  holder->release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(order.front(), 0);
  EXPECT_EQ(q.running_sequences(), 0);
}

TEST(AdmissionTest, QueueBoundAndCloseWakeWaiters) {
  AdmissionQueue q(1, 1);
  auto holder = q.acquire(1);
  ASSERT_TRUE(holder.ok());
  auto waiter = std::async(std::launch::async, [&] { return q.acquire(1).status().code(); });
  ASSERT_TRUE(eventually([&] { return q.waiting_requests() == 1; }));
  auto over = q.acquire(1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfResources);
  q.close();
  EXPECT_EQ(waiter.get(), StatusCode::kUnavailable);
  EXPECT_EQ(q.waiting_requests(), 0);
  EXPECT_EQ(q.acquire(1).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(q.running_sequences(), 1);  // the holder keeps its ticket
}

TEST(AdmissionTest, AbandonedWaitersLeaveTheQueue) {
  AdmissionQueue q(1, 4);
  auto holder = q.acquire(1);
  ASSERT_TRUE(holder.ok());
  std::atomic<bool> gone{false};
  auto waiter = std::async(std::launch::async, [&] {
    return q.acquire(1, [&] { return gone.load(); }).status().code();
  });
  ASSERT_TRUE(eventually([&] { return q.waiting_requests() == 1; }));
  gone = true;
  EXPECT_EQ(waiter.get(), StatusCode::kCancelled);
  EXPECT_EQ(q.waiting_requests(), 0);
  EXPECT_EQ(q.running_sequences(), 1);
}

}  // namespace
}  // namespace cellm::server
