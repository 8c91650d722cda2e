// The memory a training run needs on each rank, estimated from its options before anything is allocated, and
// the memory this host has available: a run that cannot fit is refused with both figures instead of hanging in
// the kernel's out-of-memory handling or ending in a bare std::bad_alloc.
#pragma once
#include <cstdint>
#include <string>

#include "dptrain/train/options.hpp"

namespace dptrain {

struct RunMemoryEstimate {
  double parameters = 0;
  double model_state_bytes = 0;  // ZeRO weights, gradients and optimizer state, plus the compute copies
  double activation_bytes = 0;   // the activation arena for one micro-step's windows
  double window_bytes = 0;       // the batch's token windows on the host (the evaluation's reuse them)
  double total() const { return model_state_bytes + activation_bytes + window_bytes; }
};

// Per rank of a run over `ranks` ranks on the cpu backend (fp32 activations and compute weights).
RunMemoryEstimate estimate_run_memory(const TrainOptions& options, int ranks);

// Throws UserError when `ranks_on_this_host` ranks of the estimate exceed `available` bytes.
void require_memory_fits(const RunMemoryEstimate& estimate, const TrainOptions& options, int ranks_on_this_host,
                         double available);

}  // namespace dptrain
