// The stop-signal handler: async-signal-safe, it stores the signal's number and nothing else.
#include "dptrain/train/stop_signal.hpp"

#include <csignal>

namespace dptrain {

namespace {

volatile std::sig_atomic_t received = 0;

extern "C" void record_stop_signal(int signal) { received = signal; }

}  // namespace

void catch_stop_signals() {
  struct sigaction action {};
  action.sa_handler = record_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or wait in progress carries on: the step finishes as usual
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int stop_signal_received() { return received; }

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace dptrain
