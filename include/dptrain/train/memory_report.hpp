// The memory part of the run summary: this rank's bytes per category (and the largest over ranks) next to
// docs/systems-model.md's ZeRO formula for weights, gradients and optimizer state, plus the peak resident set.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dptrain/cost/zero.hpp"
#include "dptrain/dp/engine.hpp"

namespace dptrain {

// Bytes of each category in a fixed order: weights, gradients, optimizer, communication, activations,
// working copies, peak resident (host), device in use (a GPU's memory in use as its driver reports it at the end
// of the run; 0 on the cpu).
std::vector<double> memory_figures(const MemoryUse& use, double peak_resident_bytes, double device_in_use_bytes);

// This process's peak resident set size in bytes (getrusage).
double peak_resident_bytes();

// {"weights": {"measured", "measured_max_rank", "modelled"}, ..., "peak_resident": {...}}: `mine` is rank 0's
// figures, `largest` the element-wise maximum over ranks; categories the formula does not cover have no
// "modelled".
nlohmann::json memory_report(const std::vector<double>& mine, const std::vector<double>& largest,
                             const cost::ZeroMemory& modelled);

// The report as fixed-width table lines.
std::vector<std::string> memory_table(const nlohmann::json& report);

}  // namespace dptrain
