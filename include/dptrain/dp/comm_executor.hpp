// The comm executor: a dedicated thread that runs communication tasks one at a time, in the order they were
// submitted, while the compute thread goes on. During a step it is the only thread that calls MPI, so every rank
// issues the same sequence of collectives whatever the timing. (The CUDA backend's counterpart is a stream with
// events: submit = enqueue on the comm stream, wait = wait on the task's event.)
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace dptrain {

class CommExecutor {
 public:
  using Ticket = std::uint64_t;  // tasks are numbered 1, 2, 3, ... in submission order

  CommExecutor();
  ~CommExecutor();  // finishes the queued tasks, then joins
  CommExecutor(const CommExecutor&) = delete;
  CommExecutor& operator=(const CommExecutor&) = delete;

  // Queues a task behind every task submitted before it. `what` names it for a watchdog's message
  // ("all_reduce on unit blocks 0-11"). Once a task has thrown, later submissions are dropped as the queued ones
  // were: counted as finished, never run.
  Ticket submit(std::function<void()> task, std::string what = "communication");
  // Blocks until task `ticket` (and so every earlier one) has finished. A task's exception is rethrown here (to
  // the first waiter after it was thrown); later tasks are dropped, since the ranks no longer agree.
  void wait(Ticket ticket);
  // As wait, but gives up at `deadline`: false when task `ticket` has not finished by then (it keeps running).
  bool wait_until(Ticket ticket, std::chrono::steady_clock::time_point deadline);
  void wait_all() { wait(submitted_); }
  // The name of the task every later one waits behind: the one running now, else the next queued (submitted but
  // not yet picked up by the thread: a deadline shorter than that hand-over), or "" when idle.
  std::string oldest_unfinished() const;
  // The name of the last task that threw (its exception is the one wait() rethrows), or "" if none has.
  std::string failed() const;
  // Runs a task on the executor and waits for it: MPI calls between collectives keep their place in the order.
  void run(std::function<void()> task) { wait(submit(std::move(task))); }

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable queued_, finished_;
  std::deque<std::pair<std::function<void()>, std::string>> tasks_;
  std::string running_, failed_;
  Ticket submitted_ = 0, completed_ = 0;
  std::exception_ptr error_;
  bool stopping_ = false, dropping_ = false;
  std::thread thread_;
};

}  // namespace dptrain
