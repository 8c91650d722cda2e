// Evaluating a Scenario: every number dpmodel prints, computed once for the text and the JSON output.
#include "dptrain/cost/scenario.hpp"

#include <charconv>
#include <cmath>
#include <utility>

#include "dptrain/core/error.hpp"

namespace dptrain::cost {

void validate(const Scenario& scenario) {
  validate(scenario.model);
  require(scenario.link.alpha_s >= 0 && std::isfinite(scenario.link.alpha_s), "link α = {} s must be finite and ≥ 0",
          scenario.link.alpha_s);
  require(scenario.link.bandwidth_Bps > 0 && std::isfinite(scenario.link.bandwidth_Bps),
          "link bandwidth B = {} B/s must be finite and positive", scenario.link.bandwidth_Bps);
  require(scenario.peak_flops > 0 && std::isfinite(scenario.peak_flops),
          "device peak P = {} FLOP/s must be finite and positive", scenario.peak_flops);
  require(scenario.eta > 0 && scenario.eta <= 1, "matmul efficiency η = {} must be in (0, 1]", scenario.eta);
  require(scenario.gpus >= 1, "GPU count {} must be at least 1", scenario.gpus);
  require(scenario.compress_keep_one_in >= 0, "--compress {} must be at least 1 (keep one value in k)",
          scenario.compress_keep_one_in);
}

ScenarioNumbers evaluate(const Scenario& scenario) {
  validate(scenario);
  const int p = scenario.gpus;
  const double params = static_cast<double>(scenario.model.params);
  ScenarioNumbers numbers{};
  numbers.gradient_bytes = kGradientBytesPerParam * params;
  numbers.flops_per_token = model_flops_per_token(scenario.model);
  numbers.flops_per_step = model_flops_per_step(scenario.model);

  auto cost = [&](Collective kind, double bytes) { return collective_cost(kind, p, bytes, scenario.link); };
  numbers.ring_all_reduce = cost(Collective::ring_all_reduce, numbers.gradient_bytes);
  numbers.tree_all_reduce = cost(Collective::tree_all_reduce, numbers.gradient_bytes);
  numbers.reduce_scatter = cost(Collective::ring_reduce_scatter, numbers.gradient_bytes);
  numbers.all_gather = cost(Collective::ring_all_gather, numbers.gradient_bytes);
  if (scenario.compress_keep_one_in > 0) {
    numbers.compressed_all_gather =
        cost(Collective::piece_all_gather, compressed_payload_bytes(params, scenario.compress_keep_one_in));
  }
  for (int stage = 0; stage < kZeroStages; ++stage) {
    numbers.zero_memory[stage] = zero_memory_per_rank(stage, params, p);
    numbers.zero_bytes_sent[stage] = zero_bytes_sent_per_step(stage, params, p);
  }
  numbers.step = model_step(numbers.flops_per_step, p, scenario.peak_flops, scenario.eta,
                            numbers.ring_all_reduce.seconds);
  // Inputs each valid alone can still leave the range of a double (α = 1e308 s, η = 1e-320): refuse them rather
  // than print inf or nan.
  const std::pair<const char*, double> times[] = {{"a ring all-reduce", numbers.ring_all_reduce.seconds},
                                                  {"a tree all-reduce", numbers.tree_all_reduce.seconds},
                                                  {"the compute of a step", numbers.step.compute_s},
                                                  {"the exposed communication", numbers.step.exposed_comm_s()}};
  for (const auto& [what, seconds] : times)
    require(std::isfinite(seconds),
            "the model's time of {} is {} s for these inputs (α = {} s, B = {} B/s, P = {} FLOP/s, η = {}): "
            "beyond what a double holds; give values of a real machine",
            what, seconds, scenario.link.alpha_s, scenario.link.bandwidth_Bps, scenario.peak_flops, scenario.eta);
  return numbers;
}

namespace {

constexpr std::size_t kMaxGpuCounts = 4096;  // a sweep longer than this is a typo, not a question

int parse_gpu_count(std::string_view item, std::string_view text) {
  int value = 0;
  auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), value);
  require(error != std::errc::result_out_of_range || end != item.data() + item.size(),
          "bad --gpus '{}': {} is out of range (at most {} GPUs)", text, item, std::numeric_limits<int>::max());
  require(error == std::errc() && end == item.data() + item.size() && value >= 1,
          "bad --gpus '{}': '{}' is not a positive whole number; expected e.g. 8, 2,4,8 or 2,4,8,...,1024", text,
          item);
  return value;
}

// Continues a, b up to `last` (exclusive of b, inclusive of last); geometric when b = a·r, else arithmetic.
void expand_ellipsis(std::vector<int>& counts, int last, std::string_view text) {
  require(counts.size() >= 2, "bad --gpus '{}': '...' needs two values before it to set the step", text);
  const std::int64_t a = counts[counts.size() - 2], b = counts.back();
  auto reaches = [&](auto next) {  // does the progression from b hit `last` exactly?
    std::int64_t value = b;
    while (value < last) value = next(value);
    return value == last;
  };
  auto extend = [&](auto next) {
    for (std::int64_t value = next(b); value <= last; value = next(value)) {
      require(counts.size() < kMaxGpuCounts, "bad --gpus '{}': more than {} GPU counts", text, kMaxGpuCounts);
      counts.push_back(static_cast<int>(value));
    }
  };
  const bool geometric = b % a == 0 && b / a >= 2;
  auto times = [&](std::int64_t value) { return value * (b / a); };
  auto plus = [&](std::int64_t value) { return value + (b - a); };
  if (geometric && reaches(times)) {
    extend(times);
  } else {
    require(reaches(plus), "bad --gpus '{}': {},{},... does not reach {} by a constant ratio or step", text, a, b,
            last);
    extend(plus);
  }
  counts.pop_back();  // `last` is pushed again by the caller with the value after "..."
}

}  // namespace

std::vector<int> parse_gpu_list(std::string_view text) {
  std::vector<int> counts;
  bool ellipsis_pending = false;
  std::string_view rest = text;
  require(!text.empty(), "bad --gpus '': expected e.g. 8, 2,4,8 or 2,4,8,...,1024");
  while (true) {
    const std::size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (item == "..." || item == "…") {
      require(!ellipsis_pending, "bad --gpus '{}': two '...' in a row", text);
      ellipsis_pending = true;
    } else {
      const int value = parse_gpu_count(item, text);
      require(counts.empty() || value > counts.back(), "bad --gpus '{}': counts must increase ({} after {})", text,
              value, counts.empty() ? 0 : counts.back());
      if (ellipsis_pending) {
        expand_ellipsis(counts, value, text);
        ellipsis_pending = false;
      }
      counts.push_back(value);
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  require(!ellipsis_pending, "bad --gpus '{}': '...' needs a last value after it", text);
  return counts;
}

}  // namespace dptrain::cost
