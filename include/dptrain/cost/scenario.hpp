// One question put to the systems model (a model on n GPUs joined by a link) and every number it answers with:
// the collectives on the BF16 gradient, ZeRO memory and traffic for each stage, and the modelled step. `dpmodel`
// prints these as tables (report.hpp) or JSON; a sweep evaluates one Scenario per GPU count.
#pragma once
#include <array>
#include <optional>
#include <string_view>
#include <vector>

#include "dptrain/cost/collectives.hpp"
#include "dptrain/cost/compute.hpp"
#include "dptrain/cost/hardware.hpp"
#include "dptrain/cost/link.hpp"
#include "dptrain/cost/zero.hpp"

namespace dptrain::cost {

struct Scenario {
  ModelShape model;
  Link link;
  double peak_flops = 0;                   // P per device, FLOP/s
  double eta = kDefaultMatmulEfficiency;   // η
  int gpus = 1;                            // p = n = d: every GPU is one data-parallel rank
  int compress_keep_one_in = 0;            // k of `--compress k`; 0: no compressed all-gather
};

// Throws UserError naming the first bad field (non-positive sizes, η outside (0, 1], ...).
void validate(const Scenario& scenario);

struct ScenarioNumbers {
  double gradient_bytes;   // M = 2N: the BF16 gradient
  double flops_per_token;  // 6N + 12·L·H·Q
  double flops_per_step;   // × D
  CollectiveCost ring_all_reduce;
  CollectiveCost tree_all_reduce;
  CollectiveCost reduce_scatter;
  CollectiveCost all_gather;
  std::optional<CollectiveCost> compressed_all_gather;  // present when compress_keep_one_in > 0
  std::array<ZeroMemory, kZeroStages> zero_memory;       // [stage] per GPU
  std::array<double, kZeroStages> zero_bytes_sent;       // [stage] per GPU per step
  StepTime step;  // comm = one ring all-reduce of the gradient (stages 0–2 with the default ring)
};

// Validates, then computes.
ScenarioNumbers evaluate(const Scenario& scenario);

// The GPU counts of `--gpus`: "8", "2,4,8", or with an ellipsis "2,4,8,...,1024". Before "..." stand at least
// two values a, b; it continues geometrically when b = a·r for an integer r ≥ 2 and the progression reaches the
// value after "..." exactly, else arithmetically with step b − a if that reaches it. Values must be positive and
// strictly increasing. Throws UserError quoting the text otherwise.
std::vector<int> parse_gpu_list(std::string_view text);

}  // namespace dptrain::cost
