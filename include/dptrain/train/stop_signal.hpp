// SIGTERM and SIGINT as a request to stop: the handler only records the signal, and the training loop, which
// checks it once per step, finishes the step, saves a checkpoint and exits with 128 + the signal's number.
// (Schedulers send SIGTERM some time before they kill a job; Ctrl-C sends SIGINT.) A second SIGINT, a second or
// more after the first, ends the process at once without saving.
#pragma once

namespace dptrain {

// Installs the handlers for SIGTERM and SIGINT, which record the signal: from the start of the program, so that a
// signal during set-up (MPI's start, loading, probes) is a stop request too, not the end of the process.
void record_stop_signals();

// Installs the handlers, blocks them in the calling thread and its OpenMP team of
// `compute_threads`, and starts the thread that waits for them (once). Idempotent.
void catch_stop_signals(int compute_threads);

// The number of the first stop signal received, or 0.
int stop_signal_received();

// "SIGTERM", "SIGINT", or "a signal".
const char* stop_signal_name(int signal);

}  // namespace dptrain
