// The stop signals: blocked in the compute threads and taken by a thread of their own (sigwait); the handler,
// for threads that do not block them, stores the signal's number and nothing else (async-signal-safe).
#include "dptrain/train/stop_signal.hpp"

#include <omp.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <mutex>
#include <thread>

namespace dptrain {

namespace {

// Written by the handler (on whichever thread does not block the signals) or the waiting thread, read by the
// compute and comm threads: lock-free atomics, safe in a handler and ordered across threads.
std::atomic<int> received{0};
std::atomic<std::int64_t> first_received_at{0};  // monotonic nanoseconds
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<std::int64_t>::is_always_lock_free);

std::int64_t monotonic_nanoseconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return std::int64_t(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

// The first signal asks for a stop after the step. A SIGINT at least a second after it (a second Ctrl-C, not the
// same one delivered twice, by the terminal to the process group and again by mpirun) ends the process at once,
// without saving: the way out of a long evaluation or a step that does not end. Async-signal-safe: the handler
// calls it as well as the waiting thread.
void take_stop_signal(int signal) {
  const std::int64_t now = monotonic_nanoseconds();
  int none = 0;
  if (received.load() == 0) {
    first_received_at.store(now);
    received.compare_exchange_strong(none, signal);  // the first signal's number stays
  } else if (signal == SIGINT && now - first_received_at.load() >= 1'000'000'000) {
    static const char message[] = "dptrain: a second SIGINT: exiting now, without saving\n";
    [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, message, sizeof message - 1);
    _exit(128 + SIGINT);
  }
}

extern "C" void record_stop_signal(int signal) { take_stop_signal(signal); }

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void record_stop_signals() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or wait in progress carries on: the step finishes as usual
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

void catch_stop_signals(int compute_threads) {
  record_stop_signals();
  // A handler runs on the stack of the thread the signal interrupts. Measured: SIGINT to a 1-thread run inside
  // oneDNN's generated sgemm code corrupted the heap in 5 of 60 runs, and in none of 60 with the handler on an
  // alternate stack (that code keeps data below its stack pointer, where a signal frame lands). So no compute
  // thread takes the signals: this thread and its OpenMP team block them (threads the team adds later inherit
  // the mask), and one thread waits for them.
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
#pragma omp parallel num_threads(compute_threads)
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  static std::once_flag waiter;
  std::call_once(waiter, [set] {
    std::thread([set] {  // inherits the blocked mask, as sigwait requires
      for (;;) {
        int signal = 0;
        if (sigwait(&set, &signal) == 0) take_stop_signal(signal);
      }
    }).detach();
  });
}

int stop_signal_received() { return received.load(); }

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace dptrain
