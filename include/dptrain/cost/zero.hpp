// ZeRO memory per rank and bytes sent per step, stages 0–3 (docs/systems-model.md "Memory per rank").
// Ψ parameters, d data-parallel ranks; BF16 weights (2Ψ), BF16 gradients (2Ψ), fp32 master + Adam m + v (KΨ, K = 12).
#pragma once

namespace dptrain::cost {

inline constexpr double kWeightBytesPerParam = 2;      // BF16 working weight
inline constexpr double kGradientBytesPerParam = 2;    // BF16 gradient (also the wire dtype)
inline constexpr double kOptimizerBytesPerParam = 12;  // K: fp32 master, Adam m, Adam v

inline constexpr int kZeroStages = 4;  // 0, 1, 2, 3

struct ZeroMemory {
  double weights_bytes;    // stage 3: 2Ψ/d, else 2Ψ
  double gradients_bytes;  // stages 2, 3: 2Ψ/d, else 2Ψ
  double optimizer_bytes;  // stages 1–3: KΨ/d, else KΨ
  double total_bytes() const { return weights_bytes + gradients_bytes + optimizer_bytes; }
};

// Throws UserError for a stage outside 0–3 or fewer than one rank.
// gradient_bytes_per_param: 2 for a BF16 gradient, 4 for fp32 (--grad-dtype fp32).
ZeroMemory zero_memory_per_rank(int stage, double params, int ranks,
                                double gradient_bytes_per_param = kGradientBytesPerParam);

// Bytes each rank sends in one step with ring collectives: stages 0–2 send one all-reduce of the BF16 gradient
// (reduce-scatter + all-gather is an all-reduce cut in two); stage 3 sends 1.5 times that (the weights are
// all-gathered again in the backward pass). With an fp32 gradient (4 bytes per parameter) stages 1–3 send the
// reduce-scatter of the fp32 gradient plus the all-gathers of the BF16 weights.
double zero_bytes_sent_per_step(int stage, double params, int ranks,
                                double gradient_bytes_per_param = kGradientBytesPerParam);
// The same with K micro-steps per step (gradient accumulation): the gradient is still reduced once per step,
// but stage 3 gathers the weights twice more for each further micro-step (its forward and its backward).
double zero_bytes_sent_per_accumulated_step(int stage, double params, int ranks, int micro_steps,
                                            double gradient_bytes_per_param = kGradientBytesPerParam);

}  // namespace dptrain::cost
