// DecodeFirstScheduler: admission, decode-first composition, round-robin
// prefill, cancellation, and invariants under random and concurrent use.
#include "cellm/decode_first_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace cellm {
namespace {

Task prefill(TaskId tid, SessionId sid, std::size_t size, bool output = false) {
  Task t;
  t.tid = tid;
  t.is_decode = false;
  t.input.sid = sid;
  t.input.size = size;
  t.input.produce_output = output;
  t.input.payload = std::make_shared<const std::vector<Token>>(size, Token{7});
  return t;
}

Task decode(TaskId tid, SessionId sid) {
  Task t = prefill(tid, sid, 1, true);
  t.is_decode = true;
  return t;
}

std::vector<TaskId> tids(const std::vector<Task>& tasks) {
  std::vector<TaskId> out;
  for (const Task& t : tasks) out.push_back(t.tid);
  return out;
}

// budget = 2 * chunk + decodes, as the runner sizes it.
std::unique_ptr<DecodeFirstScheduler> make(std::size_t chunk = 4, std::size_t decodes = 2) {
  auto s = DecodeFirstScheduler::create(2 * chunk + decodes, decodes, chunk);
  EXPECT_NE(s, nullptr);
  return s;
}

using Ids = std::vector<TaskId>;

TEST(CreateTest, Defaults) {
  auto s = DecodeFirstScheduler::create();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->max_batch_tokens(), 544u);
  EXPECT_EQ(s->max_decode_sequences(), 32u);
  EXPECT_EQ(s->max_prefill_chunk_size(), 256u);
  EXPECT_FALSE(s->has_work());
}

TEST(CreateTest, RejectsZeroLimits) {
  EXPECT_EQ(DecodeFirstScheduler::create(0, 32, 256), nullptr);
  EXPECT_EQ(DecodeFirstScheduler::create(544, 0, 256), nullptr);
  EXPECT_EQ(DecodeFirstScheduler::create(544, 32, 0), nullptr);
}

TEST(CreateTest, RequiresRoomForDecodesPlusAFullChunk) {
  EXPECT_NE(DecodeFirstScheduler::create(288, 32, 256), nullptr);
  EXPECT_EQ(DecodeFirstScheduler::create(287, 32, 256), nullptr);
  EXPECT_EQ(DecodeFirstScheduler::create(100, 32, 256), nullptr);
}

TEST(CreateTest, RejectsDecodeCapThatLeavesNoRoomForPrefill) {
  EXPECT_EQ(DecodeFirstScheduler::create(32, 32, 1), nullptr);
  EXPECT_EQ(DecodeFirstScheduler::create(32, 33, 1), nullptr);
  EXPECT_NE(DecodeFirstScheduler::create(33, 32, 1), nullptr);
}

TEST(CreateTest, RejectsChunkLargerThanTheBudget) {
  const std::size_t huge = std::numeric_limits<std::size_t>::max();
  EXPECT_EQ(DecodeFirstScheduler::create(544, 32, huge), nullptr);
  EXPECT_EQ(DecodeFirstScheduler::create(544, 32, 545), nullptr);
  auto s = DecodeFirstScheduler::create(huge, 32, 256);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->max_batch_tokens(), huge);
}

TEST(ClassificationTest, OneTokenPrefillIsNotADecode) {
  auto s = make();
  ASSERT_TRUE(s->submit({prefill(1, 1, 1, true)}));
  ASSERT_TRUE(s->submit({decode(2, 2)}));
  ASSERT_TRUE(s->submit({decode(3, 3)}));
  // The real decodes come first; the one-token prefill does not use a decode
  // slot, so it still joins the batch although both slots are taken.
  EXPECT_EQ(tids(s->get_work()), (Ids{2, 3, 1}));
}

TEST(ClassificationTest, RejectsDecodeWiderThanOneToken) {
  auto s = make();
  Task wide = decode(1, 1);
  wide.input.size = 2;
  EXPECT_FALSE(s->submit({wide}));
  Task empty = decode(2, 1);
  empty.input.size = 0;
  EXPECT_FALSE(s->submit({empty}));
  EXPECT_FALSE(s->has_work());
  // The same width is fine as a prefill chunk.
  EXPECT_TRUE(s->submit({prefill(1, 1, 2)}));
}

TEST(SubmitTest, RejectsEmptyStep) {
  auto s = make();
  EXPECT_FALSE(s->submit({}));
  EXPECT_FALSE(s->submit({prefill(1, 1, 0)}));
  EXPECT_FALSE(s->has_work());
  EXPECT_TRUE(s->get_work().empty());
}

TEST(SubmitTest, RejectsPrefillAboveChunkSize) {
  auto s = make(4);
  EXPECT_FALSE(s->submit({prefill(1, 1, 5)}));
  EXPECT_FALSE(s->has_work());
  EXPECT_TRUE(s->submit({prefill(1, 1, 4)}));
}

TEST(SubmitTest, RejectsDuplicateTaskIdAlreadyWaiting) {
  auto s = make();
  ASSERT_TRUE(s->submit({prefill(1, 1, 2)}));
  EXPECT_FALSE(s->submit({prefill(1, 2, 2)}));
  EXPECT_FALSE(s->submit({decode(1, 3)}));
  auto work = s->get_work();
  ASSERT_EQ(work.size(), 1u);
  EXPECT_EQ(work[0].input.sid, 1);
}

TEST(SubmitTest, RejectsTaskIdRepeatedWithinOneSubmit) {
  auto s = make();
  EXPECT_FALSE(s->submit({prefill(1, 1, 2), prefill(1, 1, 2)}));
  EXPECT_FALSE(s->has_work());
  // Nothing was retained: the id is still free.
  EXPECT_TRUE(s->submit({prefill(1, 1, 2)}));
}

TEST(SubmitTest, RejectedGroupEntersNoQueue) {
  auto s = make(4);
  EXPECT_FALSE(s->submit({prefill(1, 1, 4), decode(2, 2), prefill(3, 3, 9)}));
  EXPECT_FALSE(s->has_work());
  EXPECT_TRUE(s->get_work().empty());
  EXPECT_TRUE(s->submit({prefill(1, 1, 4), decode(2, 2), prefill(3, 3, 4)}));
}

TEST(SubmitTest, DuplicatePendingIdRejectsTheWholeGroup) {
  auto s = make();
  ASSERT_TRUE(s->submit({decode(5, 1)}));
  EXPECT_FALSE(s->submit({prefill(6, 2, 1), prefill(5, 2, 1)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{5}));
  EXPECT_FALSE(s->has_work());
}

TEST(SubmitTest, DispatchFreesTheTaskIdForReuse) {
  auto s = make();
  ASSERT_TRUE(s->submit({decode(1, 1)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1}));
  EXPECT_TRUE(s->submit({decode(1, 1)}));
}

TEST(SubmitTest, CancelFreesTheTaskIdForReuse) {
  auto s = make();
  ASSERT_TRUE(s->submit({prefill(1, 1, 2)}));
  EXPECT_EQ(s->cancel(1).size(), 1u);
  EXPECT_TRUE(s->submit({prefill(1, 1, 2)}));
}

TEST(PayloadTest, CarriesPayloadUninspected) {
  auto s = make(4);
  auto backing = std::make_shared<const std::vector<Token>>(std::vector<Token>{1, 2, 3, 4, 5, 6});
  Task t;
  t.tid = 9;
  t.input.sid = 42;
  t.input.produce_output = true;
  t.input.offset = 2;
  t.input.size = 3;
  t.input.payload = backing;
  t.input.position = 17;
  ASSERT_TRUE(s->submit({t}));
  auto work = s->get_work();
  ASSERT_EQ(work.size(), 1u);
  const Task& got = work[0];
  EXPECT_EQ(got.tid, 9);
  EXPECT_FALSE(got.cancelled);
  EXPECT_FALSE(got.is_decode);
  EXPECT_EQ(got.input.sid, 42);
  EXPECT_TRUE(got.input.produce_output);
  EXPECT_EQ(got.input.offset, 2u);
  EXPECT_EQ(got.input.size, 3u);
  EXPECT_EQ(got.input.position, 17);
  EXPECT_EQ(std::get<TokenInputPtr>(got.input.payload).get(), backing.get());
}

TEST(PayloadTest, BatchInputKeepsTaskOrderAndSlices) {
  auto s = make(4);
  ASSERT_TRUE(s->submit({decode(1, 1), decode(2, 2)}));
  ASSERT_TRUE(s->submit({prefill(3, 3, 4), prefill(4, 4, 3)}));
  auto work = s->get_work();
  ASSERT_EQ(tids(work), (Ids{1, 2, 3, 4}));
  BatchInput batch = to_batch_input(work);
  ASSERT_EQ(batch.inputs.size(), 4u);
  EXPECT_EQ(batch.size(), 1u + 1u + 4u + 3u);
  EXPECT_EQ(batch.inputs[0].sid, 1);
  EXPECT_EQ(batch.inputs[3].sid, 4);
  EXPECT_EQ(batch.inputs[3].size, 3u);
}

TEST(DecodeTest, ServedInArrivalOrderUpToTheCap) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({decode(1, 1), decode(2, 2), decode(3, 3)}));
  ASSERT_TRUE(s->submit({decode(4, 4), decode(5, 5)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2}));
  EXPECT_EQ(tids(s->get_work()), (Ids{3, 4}));
  EXPECT_EQ(tids(s->get_work()), (Ids{5}));
  EXPECT_TRUE(s->get_work().empty());
}

TEST(DecodeTest, StaysFifoAcrossDrainAndRefill) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({decode(1, 1), decode(2, 2), decode(3, 3)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2}));
  ASSERT_TRUE(s->submit({decode(4, 1), decode(5, 2)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{3, 4}));
  EXPECT_EQ(tids(s->get_work()), (Ids{5}));
  ASSERT_TRUE(s->submit({decode(6, 9)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{6}));
}

TEST(DecodeTest, BeatsPrefillAndStillLeavesRoomForAFullChunk) {
  auto s = make(4, 2);  // budget 10
  ASSERT_TRUE(s->submit({prefill(1, 10, 4), prefill(2, 10, 4), prefill(3, 10, 4)}));
  ASSERT_TRUE(s->submit({decode(4, 1), decode(5, 2)}));
  auto work = s->get_work();
  EXPECT_EQ(tids(work), (Ids{4, 5, 1, 2}));
  EXPECT_EQ(to_batch_input(work).size(), 10u);
  EXPECT_EQ(tids(s->get_work()), (Ids{3}));
}

TEST(PrefillTest, SubmittedPromptChunksStayInOrder) {
  auto s = make(4);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4), prefill(3, 1, 4), prefill(4, 1, 4),
                         prefill(5, 1, 1, true)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2}));
  // The short final chunk still fits beside two full ones.
  EXPECT_EQ(tids(s->get_work()), (Ids{3, 4, 5}));
  EXPECT_FALSE(s->has_work());
}

TEST(PrefillTest, LongPromptCannotHogTheBatch) {
  auto s = make(4);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4), prefill(3, 1, 4), prefill(4, 1, 4)}));
  ASSERT_TRUE(s->submit({prefill(5, 2, 4), prefill(6, 2, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 5}));
  EXPECT_EQ(tids(s->get_work()), (Ids{2, 6}));
  EXPECT_EQ(tids(s->get_work()), (Ids{3, 4}));
}

TEST(PrefillTest, LoneSessionFillsTheBatchAcrossPasses) {
  auto s = make(4);  // budget 10
  ASSERT_TRUE(s->submit({prefill(1, 1, 3), prefill(2, 1, 3), prefill(3, 1, 3), prefill(4, 1, 3)}));
  auto work = s->get_work();
  EXPECT_EQ(tids(work), (Ids{1, 2, 3}));
  EXPECT_EQ(to_batch_input(work).size(), 9u);
  EXPECT_EQ(tids(s->get_work()), (Ids{4}));
}

TEST(PrefillTest, StopsWhenTheNextChunkDoesNotFit) {
  auto s = make(4);  // budget 10
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4), prefill(3, 1, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2}));
  EXPECT_TRUE(s->has_work());
  EXPECT_EQ(tids(s->get_work()), (Ids{3}));
}

TEST(PrefillTest, DeferredSessionOutranksOneNeverReached) {
  auto s = make(4);  // budget 10
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(5, 1, 4)}));
  ASSERT_TRUE(s->submit({prefill(2, 2, 4)}));
  ASSERT_TRUE(s->submit({prefill(3, 3, 4)}));
  ASSERT_TRUE(s->submit({prefill(4, 4, 2)}));
  // Session 3 does not fit after 1 and 2; the smaller chunk behind it does.
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2, 4}));
  // The deferred session now goes before session 1's second chunk.
  EXPECT_EQ(tids(s->get_work()), (Ids{3, 5}));
}

TEST(PrefillTest, DeferredSessionsKeepTheirOrder) {
  auto s = make(4);  // budget 10
  ASSERT_TRUE(s->submit({prefill(1, 1, 4)}));
  ASSERT_TRUE(s->submit({prefill(2, 2, 4)}));
  ASSERT_TRUE(s->submit({prefill(3, 3, 4)}));
  ASSERT_TRUE(s->submit({prefill(4, 4, 4)}));
  ASSERT_TRUE(s->submit({prefill(5, 5, 2)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2, 5}));
  ASSERT_TRUE(s->submit({prefill(6, 6, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{3, 4}));
  EXPECT_EQ(tids(s->get_work()), (Ids{6}));
}

TEST(PrefillTest, RotationIsFairAcrossCalls) {
  auto s = make(4);
  TaskId tid = 1;
  for (SessionId sid = 1; sid <= 3; ++sid) {
    std::vector<Task> group;
    for (int i = 0; i < 8; ++i) group.push_back(prefill(tid++, sid, 4));
    ASSERT_TRUE(s->submit(group));
  }
  std::map<SessionId, int> served;
  for (int call = 0; call < 9; ++call) {
    for (const Task& t : s->get_work()) ++served[t.input.sid];
  }
  EXPECT_EQ(served[1], 6);
  EXPECT_EQ(served[2], 6);
  EXPECT_EQ(served[3], 6);
}

TEST(PrefillTest, SessionRejoinsTheRotationAfterDraining) {
  auto s = make(4);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4)}));
  ASSERT_TRUE(s->submit({prefill(2, 2, 4), prefill(3, 2, 4), prefill(4, 2, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2}));
  ASSERT_TRUE(s->submit({prefill(5, 1, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{3, 5}));
  EXPECT_EQ(tids(s->get_work()), (Ids{4}));
  EXPECT_FALSE(s->has_work());
}

TEST(BatchCompositionTest, OneDecodePerSessionPerBatch) {
  auto s = make(4, 3);
  ASSERT_TRUE(s->submit({decode(1, 1), decode(2, 1), decode(3, 2)}));
  auto work = s->get_work();
  EXPECT_EQ(tids(work), (Ids{1, 3}));
  EXPECT_EQ(tids(s->get_work()), (Ids{2}));
}

TEST(BatchCompositionTest, SecondDecodeForASessionRunsInTheNextBatch) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({decode(1, 1), decode(2, 1), decode(3, 2), decode(4, 3)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 3}));
  // The deferred decode kept its place ahead of the later arrival.
  EXPECT_EQ(tids(s->get_work()), (Ids{2, 4}));
}

TEST(BatchCompositionTest, PrefillWaitsWhileTheSessionHasADecode) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({decode(1, 1)}));
  ASSERT_TRUE(s->submit({prefill(2, 1, 3)}));
  ASSERT_TRUE(s->submit({prefill(3, 2, 3)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 3}));
  EXPECT_EQ(tids(s->get_work()), (Ids{2}));
}

TEST(BatchCompositionTest, ConsecutivePrefillChunksMaySharePlaces) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4, true)}));
  auto work = s->get_work();
  ASSERT_EQ(tids(work), (Ids{1, 2}));
  EXPECT_EQ(work[0].input.sid, work[1].input.sid);
}

TEST(CancelTest, DropsEveryQueuedTaskForTheSessionAndReturnsThem) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 2)}));
  ASSERT_TRUE(s->submit({decode(3, 1)}));
  ASSERT_TRUE(s->submit({prefill(4, 2, 4)}));
  auto cancelled = s->cancel(1);
  EXPECT_EQ(tids(cancelled), (Ids{1, 2, 3}));
  for (const Task& t : cancelled) {
    EXPECT_TRUE(t.cancelled);
    EXPECT_EQ(t.input.sid, 1);
  }
  EXPECT_EQ(tids(s->get_work()), (Ids{4}));
  EXPECT_FALSE(s->has_work());
}

TEST(CancelTest, DropsEveryQueuedDecodeForTheSession) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({decode(1, 1), decode(2, 1), decode(3, 2)}));
  EXPECT_EQ(tids(s->cancel(1)), (Ids{1, 2}));
  EXPECT_EQ(tids(s->get_work()), (Ids{3}));
  EXPECT_FALSE(s->has_work());
}

TEST(CancelTest, LeavesOtherSessionsRunnable) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4)}));
  ASSERT_TRUE(s->submit({prefill(3, 2, 4), prefill(4, 2, 4)}));
  ASSERT_TRUE(s->submit({decode(5, 3)}));
  EXPECT_EQ(s->cancel(1).size(), 2u);
  EXPECT_EQ(tids(s->get_work()), (Ids{5, 3, 4}));
}

TEST(CancelTest, UnknownSessionIsIgnored) {
  auto s = make();
  ASSERT_TRUE(s->submit({decode(1, 1)}));
  EXPECT_TRUE(s->cancel(99).empty());
  EXPECT_TRUE(s->has_work());
  EXPECT_EQ(tids(s->get_work()), (Ids{1}));
}

TEST(CancelTest, DoubleCancelReportsEachTaskOnce) {
  auto s = make();
  ASSERT_TRUE(s->submit({prefill(1, 1, 2), decode(2, 1)}));
  EXPECT_EQ(tids(s->cancel(1)), (Ids{1, 2}));
  EXPECT_TRUE(s->cancel(1).empty());
  EXPECT_FALSE(s->has_work());
}

TEST(CancelTest, DispatchedTaskIsNoLongerTracked) {
  auto s = make();
  ASSERT_TRUE(s->submit({prefill(1, 1, 2)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1}));
  EXPECT_TRUE(s->cancel(1).empty());
}

TEST(CancelTest, CancellingDispatchedTaskDoesNotHideQueuedWork) {
  auto s = make(4);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4), prefill(3, 1, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2}));
  // Only the chunk still queued comes back; the dispatched ones are the caller's.
  EXPECT_EQ(tids(s->cancel(1)), (Ids{3}));
  ASSERT_TRUE(s->submit({decode(4, 1)}));
  EXPECT_TRUE(s->has_work());
  EXPECT_EQ(tids(s->get_work()), (Ids{4}));
}

TEST(CancelTest, CancelledDecodeInTheMiddleOfTheQueue) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({decode(1, 1), decode(2, 2), decode(3, 3)}));
  EXPECT_EQ(tids(s->cancel(2)), (Ids{2}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 3}));
}

TEST(CancelTest, CancelledPrefillSessionLeavesTheRotation) {
  auto s = make(4);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4)}));
  ASSERT_TRUE(s->submit({prefill(3, 2, 4), prefill(4, 2, 4)}));
  EXPECT_EQ(s->cancel(1).size(), 2u);
  EXPECT_EQ(tids(s->get_work()), (Ids{3, 4}));
  EXPECT_FALSE(s->has_work());
  EXPECT_TRUE(s->get_work().empty());
}

TEST(CancelTest, SessionRejoinsAfterAnInterveningBatch) {
  auto s = make(4);  // two full chunks per batch
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4)}));
  ASSERT_TRUE(s->submit({prefill(3, 2, 4), prefill(4, 2, 4), prefill(5, 2, 4)}));
  ASSERT_TRUE(s->submit({prefill(6, 3, 4), prefill(7, 3, 4), prefill(8, 3, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 3}));
  EXPECT_EQ(tids(s->cancel(1)), (Ids{2}));
  EXPECT_EQ(tids(s->get_work()), (Ids{6, 4}));
  // The emptied slot was retired by that batch, so session 1 joins at the tail.
  ASSERT_TRUE(s->submit({prefill(9, 1, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{7, 5}));
  EXPECT_EQ(tids(s->get_work()), (Ids{9, 8}));
  EXPECT_FALSE(s->has_work());
}

TEST(CancelTest, RejoiningAfterCancelDoesNotTakeTwoTurnsPerPass) {
  auto s = DecodeFirstScheduler::create(6, 1, 5);
  ASSERT_NE(s, nullptr);
  TaskId tid = 1;
  for (SessionId sid = 1; sid <= 3; ++sid) {
    std::vector<Task> group;
    for (int i = 0; i < 4; ++i) group.push_back(prefill(tid++, sid, 1));
    ASSERT_TRUE(s->submit(group));
  }
  ASSERT_EQ(s->cancel(1).size(), 4u);
  ASSERT_TRUE(
      s->submit({prefill(21, 1, 1), prefill(22, 1, 1), prefill(23, 1, 1), prefill(24, 1, 1)}));
  auto work = s->get_work();
  // Two passes of three sessions: one turn each per pass.
  EXPECT_EQ(tids(work), (Ids{21, 5, 9, 22, 6, 10}));
}

TEST(ClearTest, ReturnsAndRemovesAllQueuedTasks) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4)}));
  ASSERT_TRUE(s->submit({decode(3, 2)}));
  auto cleared = s->clear();
  EXPECT_EQ(tids(cleared), (Ids{1, 2, 3}));
  for (const Task& t : cleared) EXPECT_TRUE(t.cancelled);
  EXPECT_FALSE(s->has_work());
  EXPECT_TRUE(s->get_work().empty());
  EXPECT_TRUE(s->submit({prefill(1, 1, 4)}));  // ids are free again
}

TEST(ClearTest, DoesNotClaimTasksAlreadyHandedToTheCaller) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({prefill(1, 1, 4), prefill(2, 1, 4), prefill(3, 1, 4)}));
  EXPECT_EQ(tids(s->get_work()), (Ids{1, 2}));
  EXPECT_EQ(tids(s->clear()), (Ids{3}));
  EXPECT_TRUE(s->clear().empty());
}

TEST(HasWorkTest, EmptySchedulerHasNothingToDo) {
  auto s = make();
  EXPECT_FALSE(s->has_work());
  EXPECT_TRUE(s->get_work().empty());
  EXPECT_FALSE(s->has_work());
}

TEST(HasWorkTest, TracksQueuedTasksOnly) {
  auto s = make(4, 2);
  ASSERT_TRUE(s->submit({decode(1, 1)}));
  EXPECT_TRUE(s->has_work());
  s->get_work();
  EXPECT_FALSE(s->has_work());
  ASSERT_TRUE(s->submit({prefill(2, 2, 4)}));
  EXPECT_TRUE(s->has_work());
  s->cancel(2);
  EXPECT_FALSE(s->has_work());
  EXPECT_FALSE(s->submit({prefill(3, 3, 9)}));
  EXPECT_FALSE(s->has_work());
}

}  // namespace
}  // namespace cellm
