// FLOPs, compute time, step time and MFU, and the single-stream overlap simulation.
#include "dptrain/cost/compute.hpp"

#include <algorithm>

#include "dptrain/core/error.hpp"

namespace dptrain::cost {

double model_flops_per_token(const ModelShape& shape) {
  // 6N: forward 2N + backward 4N multiply-adds on every weight; 12·L·H·Q: attention scores and their use,
  // which depend on the sequence length rather than on a weight.
  const double n = static_cast<double>(shape.params);
  return 6 * n + 12.0 * shape.layers * shape.width * shape.seq;
}

double model_flops_per_step(const ModelShape& shape) {
  return model_flops_per_token(shape) * static_cast<double>(shape.tokens_per_step);
}

double compute_seconds(double flops, int devices, double peak_flops, double eta) {
  DP_ASSERT(devices >= 1 && peak_flops > 0 && eta > 0);
  return flops / (devices * peak_flops * eta);
}

double mfu(double flops, double seconds, int devices, double peak_flops) {
  DP_ASSERT(devices >= 1 && peak_flops > 0 && seconds > 0);
  return flops / seconds / (devices * peak_flops);
}

double hidden_fraction(double exposed_seconds, double total_seconds) {
  return total_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / total_seconds) : 0.0;
}

StepTime model_step(double flops_per_step, int devices, double peak_flops, double eta, double comm_seconds) {
  StepTime step{};
  step.compute_s = compute_seconds(flops_per_step, devices, peak_flops, eta);
  step.backward_s = kBackwardFractionOfCompute * step.compute_s;
  step.comm_s = comm_seconds;
  step.waiting_step_s = step.compute_s + comm_seconds;
  // Collectives run during backward; only what outlasts it lengthens the step.
  step.overlapped_step_s = step.compute_s + std::max(0.0, comm_seconds - step.backward_s);
  step.waiting_mfu = mfu(flops_per_step, step.waiting_step_s, devices, peak_flops);
  step.overlapped_mfu = mfu(flops_per_step, step.overlapped_step_s, devices, peak_flops);
  return step;
}

OverlapTimeline simulate_overlap(std::span<const double> backward_unit_seconds,
                                 std::span<const double> comm_unit_seconds) {
  DP_ASSERT(backward_unit_seconds.size() == comm_unit_seconds.size());
  const std::size_t units = backward_unit_seconds.size();
  OverlapTimeline timeline;
  timeline.ready_s.resize(units);
  timeline.comm_start_s.resize(units);
  timeline.comm_end_s.resize(units);
  double ready = 0, stream_free = 0;  // the comm stream runs one collective at a time, in unit order
  for (std::size_t u = 0; u < units; ++u) {
    DP_ASSERT(backward_unit_seconds[u] >= 0 && comm_unit_seconds[u] >= 0);
    ready += backward_unit_seconds[u];
    timeline.ready_s[u] = ready;
    timeline.comm_start_s[u] = std::max(ready, stream_free);
    timeline.comm_end_s[u] = timeline.comm_start_s[u] + comm_unit_seconds[u];
    stream_free = timeline.comm_end_s[u];
  }
  timeline.backward_end_s = ready;
  timeline.exposed_comm_s = std::max(0.0, stream_free - ready);
  return timeline;
}

}  // namespace dptrain::cost
