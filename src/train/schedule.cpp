// Warm-up and cosine decay.
#include "dptrain/train/schedule.hpp"

#include <cmath>
#include <numbers>

namespace dptrain {

double learning_rate(int step, int total_steps, int warmup, double peak, double floor) {
  if (step < warmup) return peak * double(step + 1) / double(warmup);
  const int decay_steps = total_steps - warmup;
  // One step after the warm-up is the last step: --min-lr, the warm-up having reached the peak. A run of one step
  // and no warm-up has only the peak to take.
  if (decay_steps == 1) return warmup > 0 ? floor : peak;
  if (decay_steps <= 0) return peak;
  const double progress = double(step - warmup) / double(decay_steps - 1);  // 0 … 1 at the last step
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace dptrain
