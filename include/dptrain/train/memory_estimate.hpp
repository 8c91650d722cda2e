// The memory a training run needs on each rank, estimated from its options before anything is allocated, and
// the memory this host has available: a run that cannot fit is refused with both figures instead of hanging in
// the kernel's out-of-memory handling or ending in a bare std::bad_alloc.
#pragma once
#include <cstdint>
#include <string>

#include "dptrain/compute/backend.hpp"
#include "dptrain/train/options.hpp"

namespace dptrain {

struct RunMemoryEstimate {
  double parameters = 0;
  double model_state_bytes = 0;  // ZeRO weights, gradients and optimizer state, plus the compute copies
  double activation_bytes = 0;   // the activation arena for one micro-step's windows
  double window_bytes = 0;       // the batch's token windows on the host (the evaluation's reuse them)
  double total() const { return model_state_bytes + activation_bytes + window_bytes; }
};

// What a backend keeps, in bytes: an activation, an element of the local gradient, a parameter's compute view
// (0 where the operations read the BF16 weights in place), and what attention saves per window and head. The
// defaults are the cpu backend's (fp32 activations, gradient and views; the probabilities [T, T] in fp32).
struct BackendFootprint {
  double activation_bytes = 4, gradient_bytes = 4, view_bytes = 4;
  double attention_saved_bytes = 0;  // per window and head; 0: T·T·activation_bytes
};
BackendFootprint footprint_of(const Backend& backend, const ModelConfig& model);

// Per rank of a run over `ranks` ranks on a backend of that footprint.
RunMemoryEstimate estimate_run_memory(const TrainOptions& options, int ranks, const BackendFootprint& backend = {});

// Throws UserError when `ranks_on_this_host` ranks of the estimate exceed `available` bytes.
void require_memory_fits(const RunMemoryEstimate& estimate, const TrainOptions& options, int ranks_on_this_host,
                         double available);

}  // namespace dptrain
