// The comm executor's thread and queue.
#include "dptrain/dp/comm_executor.hpp"

#include <omp.h>

namespace dptrain {

CommExecutor::CommExecutor() : thread_([this] { loop(); }) {}

CommExecutor::~CommExecutor() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  thread_.join();
}

CommExecutor::Ticket CommExecutor::submit(std::function<void()> task, std::string what) {
  std::lock_guard lock(mutex_);
  if (dropping_) {  // a task has thrown and the ranks no longer agree: nothing more runs
    ++completed_;
    return ++submitted_;
  }
  tasks_.emplace_back(std::move(task), std::move(what));
  queued_.notify_one();
  return ++submitted_;
}

void CommExecutor::wait(Ticket ticket) {
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return completed_ >= ticket || error_; });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

bool CommExecutor::wait_until(Ticket ticket, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  if (!finished_.wait_until(lock, deadline, [&] { return completed_ >= ticket || error_; })) return false;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return true;
}

std::string CommExecutor::oldest_unfinished() const {
  std::lock_guard lock(mutex_);
  return running_.empty() && !tasks_.empty() ? tasks_.front().second : running_;
}

std::string CommExecutor::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void CommExecutor::loop() {
  // The reductions inside a collective run on this thread alone: the compute thread's OpenMP team already
  // occupies the cores.
  omp_set_num_threads(1);
  std::unique_lock lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;
    std::function<void()> task = std::move(tasks_.front().first);
    running_ = std::move(tasks_.front().second);
    tasks_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) failed_ = running_;
    running_.clear();
    ++completed_;
    if (error) {
      error_ = error;
      dropping_ = true;
      completed_ += tasks_.size();
      tasks_.clear();
    }
    finished_.notify_all();
  }
}

}  // namespace dptrain
