// Compute time, step time and MFU (docs/systems-model.md "Compute, step time, MFU"), and the overlap of gradient
// collectives with the backward pass simulated from per-unit times (docs/overlap.md).
#pragma once
#include <span>
#include <vector>

#include "dptrain/cost/hardware.hpp"

namespace dptrain::cost {

// 6N + 12·L·H·Q: model FLOPs of one training token (PaLM App. B; recomputation does not count).
double model_flops_per_token(const ModelShape& shape);
// (6N + 12·L·H·Q)·D: model FLOPs of one step.
double model_flops_per_step(const ModelShape& shape);

// flops / (n·P·η): modelled compute time of `flops` spread over n devices of peak P at matmul efficiency η.
double compute_seconds(double flops, int devices, double peak_flops, double eta);
// flops / seconds / (n·P): model FLOPs utilisation of a step that processed `flops` in `seconds`.
double mfu(double flops, double seconds, int devices, double peak_flops);

// 1 − exposed/total: the share of the communication time a step did not wait for (0 when there was none). At least
// 0: a measured wait can outlast the collectives' own time (it also holds the hand-over to the comm thread and the
// collectives queued behind others), and then nothing was hidden, not less than nothing.
double hidden_fraction(double exposed_seconds, double total_seconds);

// The backward pass is 2/3 of compute: it does twice the forward's FLOPs.
inline constexpr double kBackwardFractionOfCompute = 2.0 / 3.0;

struct StepTime {
  double compute_s;          // forward + backward
  double backward_s;         // 2/3 of compute: the window gradient collectives can hide in
  double comm_s;             // gradient communication of the step
  double waiting_step_s;     // compute + comm: communication after backward
  double overlapped_step_s;  // compute + max(0, comm − backward)
  double waiting_mfu;        // MFU of the waiting step
  double overlapped_mfu;     // MFU of the overlapped step

  double exposed_comm_s() const { return overlapped_step_s - compute_s; }
};

StepTime model_step(double flops_per_step, int devices, double peak_flops, double eta, double comm_seconds);

// A single comm stream behind the backward pass. Unit u's gradient is ready at ready_u = Σ_{v≤u} backward_v
// (backward starts at 0 and produces units in this order); its collective starts at max(ready_u, end_{u−1}) and
// takes comm_u. Everything in seconds.
struct OverlapTimeline {
  std::vector<double> ready_s;       // [units] when unit u's gradient is complete
  std::vector<double> comm_start_s;  // [units]
  std::vector<double> comm_end_s;    // [units]
  double backward_end_s = 0;         // Σ backward_u
  double exposed_comm_s = 0;         // max(0, comm_end of the last unit − backward_end): what the step waits for
};

// Both spans hold one entry per unit in the order units become ready; times must be ≥ 0 (a logic error otherwise).
OverlapTimeline simulate_overlap(std::span<const double> backward_unit_seconds,
                                 std::span<const double> comm_unit_seconds);

}  // namespace dptrain::cost
