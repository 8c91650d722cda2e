// Learning-rate schedule: linear warm-up to the peak, then cosine decay to the floor at the last step.
#pragma once

namespace dptrain {

// step is 0-based (the step about to be taken), of total steps.
double learning_rate(int step, int total_steps, int warmup, double peak, double floor);

}  // namespace dptrain
