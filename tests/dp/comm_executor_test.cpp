// CommExecutor: tasks run one at a time in submission order on one thread of their own (not the caller's),
// wait(ticket) returns only once that task has finished (and not later tasks), a task's exception reaches the
// waiter, the tasks queued behind it are dropped, and the destructor finishes what was queued. BufferPool: buffers
// are reused (best fit) and allocated_bytes counts every buffer it owns or has lent.
#include "dptrain/dp/comm_executor.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "dptrain/dp/buffer_pool.hpp"

namespace dptrain {
namespace {

using namespace std::chrono_literals;

TEST(CommExecutor, TasksRunInSubmissionOrderOnOneThreadThatIsNotTheCaller) {
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  std::mutex mutex;  // the vectors are read on this thread after wait_all; the lock documents the handover
  {
    CommExecutor executor;
    std::vector<CommExecutor::Ticket> tickets;
    for (int i = 0; i < 200; ++i)
      tickets.push_back(executor.submit([&, i] {
        if (i % 17 == 0) std::this_thread::sleep_for(100us);  // give a reordering bug a chance to show
        std::lock_guard lock(mutex);
        order.push_back(i);
        threads.push_back(std::this_thread::get_id());
      }));
    for (std::size_t i = 0; i < tickets.size(); ++i) EXPECT_EQ(tickets[i], CommExecutor::Ticket(i + 1));
    executor.wait_all();
    std::lock_guard lock(mutex);
    ASSERT_EQ(order.size(), 200u);
  }
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[std::size_t(i)], i);
  for (const auto& id : threads) {
    EXPECT_EQ(id, threads.front());
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(CommExecutor, WaitReturnsOnlyAfterThatTaskAndNotAfterLaterOnes) {
  CommExecutor executor;
  std::atomic<bool> first_done{false}, second_started{false}, second_done{false};
  std::promise<void> release_second;
  std::shared_future<void> second_may_finish = release_second.get_future().share();
  const auto first = executor.submit([&] {
    std::this_thread::sleep_for(50ms);
    first_done = true;
  });
  const auto second = executor.submit([&, second_may_finish] {
    second_started = true;
    second_may_finish.wait();  // held until after wait(first) has returned: waiting for it would deadlock
    second_done = true;
  });
  executor.wait(first);
  EXPECT_TRUE(first_done.load());
  EXPECT_FALSE(second_done.load());
  release_second.set_value();
  executor.wait(second);
  EXPECT_TRUE(second_started.load());
  EXPECT_TRUE(second_done.load());
  executor.wait(first);  // a finished ticket returns at once
}

TEST(CommExecutor, RunExecutesOnTheExecutorAndWaits) {
  CommExecutor executor;
  std::thread::id where;
  bool done = false;
  executor.run([&] {
    std::this_thread::sleep_for(10ms);
    where = std::this_thread::get_id();
    done = true;
  });
  EXPECT_TRUE(done);
  EXPECT_NE(where, std::this_thread::get_id());
}

TEST(CommExecutor, ATaskExceptionIsRethrownByWaitAndLaterTasksAreDropped) {
  CommExecutor executor;
  std::promise<void> all_queued;
  std::shared_future<void> queued = all_queued.get_future().share();
  std::atomic<int> ran_after{0};
  const auto ok = executor.submit([] {});
  const auto failing = executor.submit(
      [queued] {
        queued.wait();  // the tasks behind it are queued by the time it throws
        throw std::runtime_error("link down");
      },
      "all_reduce on unit blocks 2-3");
  CommExecutor::Ticket last = 0;
  for (int i = 0; i < 5; ++i) last = executor.submit([&] { ++ran_after; });
  executor.wait(ok);  // before the failure: no exception
  EXPECT_EQ(executor.failed(), "");
  all_queued.set_value();
  try {
    executor.wait(failing);
    FAIL() << "wait did not rethrow the task's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "link down");
  }
  EXPECT_EQ(executor.failed(), "all_reduce on unit blocks 2-3");  // named for the line that ends the job
  // The exception went to the first waiter; the dropped tasks count as finished and never ran.
  EXPECT_NO_THROW(executor.wait(last));
  EXPECT_EQ(ran_after.load(), 0);
  // So are tasks submitted after the failure: they would touch buffers the failing rank is already unwinding.
  const auto after = executor.submit([&] { ++ran_after; });
  EXPECT_EQ(after, last + 1);
  EXPECT_NO_THROW(executor.wait(after));
  EXPECT_EQ(ran_after.load(), 0);
}

TEST(CommExecutor, AWaiterForALaterTaskGetsTheException) {
  CommExecutor executor;
  executor.submit([] { throw std::logic_error("boom"); });
  const auto later = executor.submit([] {});
  EXPECT_THROW(executor.wait(later), std::logic_error);
}

TEST(CommExecutor, WaitUntilGivesUpAtTheDeadlineAndNamesTheTaskThatIsStuck) {
  CommExecutor executor;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  const auto stuck = executor.submit([released] { released.wait(); }, "all_reduce on unit blocks 0-1");
  const auto behind = executor.submit([] {}, "all_reduce on unit embeddings");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(executor.wait_until(behind, start + 50ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  EXPECT_EQ(executor.oldest_unfinished(), "all_reduce on unit blocks 0-1");  // the later task waits behind it
  release.set_value();
  EXPECT_TRUE(executor.wait_until(stuck, std::chrono::steady_clock::now() + 10s));
  EXPECT_TRUE(executor.wait_until(behind, std::chrono::steady_clock::now() + 10s));
  EXPECT_EQ(executor.oldest_unfinished(), "");
}

TEST(CommExecutor, DestructorFinishesQueuedTasks) {
  std::atomic<int> ran{0};
  {
    CommExecutor executor;
    for (int i = 0; i < 20; ++i)
      executor.submit([&] {
        std::this_thread::sleep_for(1ms);
        ++ran;
      });
  }
  EXPECT_EQ(ran.load(), 20);
}

TEST(BufferPool, ReusesReleasedBuffersAndCountsWhatItAllocated) {
  BufferPool pool(host_memory());
  EXPECT_EQ(pool.allocated_bytes(), 0u);
  BufferPool::Buffer a = pool.acquire(1000);
  ASSERT_TRUE(a);
  EXPECT_GE(a->bytes(), 1000u);
  EXPECT_EQ(pool.allocated_bytes(), 1000u);
  const void* a_data = a->data();
  pool.release(std::move(a));
  EXPECT_EQ(pool.allocated_bytes(), 1000u);  // a free buffer still counts
  // A smaller request takes the free buffer: nothing new is allocated.
  BufferPool::Buffer b = pool.acquire(600);
  EXPECT_EQ(b->data(), a_data);
  EXPECT_EQ(pool.allocated_bytes(), 1000u);
  // While it is lent, another request allocates.
  BufferPool::Buffer c = pool.acquire(600);
  EXPECT_NE(c->data(), a_data);
  EXPECT_GE(c->bytes(), 600u);
  EXPECT_EQ(pool.allocated_bytes(), 1600u);
  // A request larger than every free buffer allocates too.
  pool.release(std::move(b));
  BufferPool::Buffer d = pool.acquire(4000);
  EXPECT_EQ(pool.allocated_bytes(), 5600u);
  pool.release(std::move(c));
  pool.release(std::move(d));
  // Best fit: free buffers of 1000, 600 and 4000 bytes; 500 takes the 600-byte one, 700 the 1000-byte one.
  BufferPool::Buffer e = pool.acquire(500);
  EXPECT_EQ(e->bytes(), 600u);
  BufferPool::Buffer f = pool.acquire(700);
  EXPECT_EQ(f->bytes(), 1000u);
  EXPECT_EQ(f->data(), a_data);
  EXPECT_EQ(pool.allocated_bytes(), 5600u);
}

TEST(BufferPool, ReleaseFromAnotherThread) {
  // The comm executor gives buffers back while the compute thread takes others.
  BufferPool pool(host_memory());
  CommExecutor executor;
  for (int round = 0; round < 50; ++round) {
    auto buffer = std::make_shared<BufferPool::Buffer>(pool.acquire(256));
    executor.submit([&pool, buffer] { pool.release(std::move(*buffer)); });
    executor.wait_all();
  }
  EXPECT_EQ(pool.allocated_bytes(), 256u);  // one buffer, reused 50 times
}

}  // namespace
}  // namespace dptrain
