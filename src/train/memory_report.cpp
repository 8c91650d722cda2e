// Measured memory per category against the ZeRO formula.
#include "dptrain/train/memory_report.hpp"

#include <sys/resource.h>

#include <fmt/format.h>

namespace dptrain {

namespace {

constexpr const char* kCategories[] = {"weights",     "gradients",      "optimizer",    "communication_buffers",
                                       "activations", "working_copies", "peak_resident",
                                       "device_in_use"};

}  // namespace

std::vector<double> memory_figures(const MemoryUse& use, double peak_resident, double device_in_use) {
  return {double(use.weights),     double(use.gradients),      double(use.optimizer), double(use.communication),
          double(use.activations), double(use.working_copies), peak_resident,         device_in_use};
}

double peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

nlohmann::json memory_report(const std::vector<double>& mine, const std::vector<double>& largest,
                             const cost::ZeroMemory& modelled) {
  const double formula[] = {modelled.weights_bytes, modelled.gradients_bytes, modelled.optimizer_bytes};
  nlohmann::json report = nlohmann::json::object();
  for (std::size_t i = 0; i < std::size(kCategories); ++i) {
    nlohmann::json row = {{"measured", mine[i]}, {"measured_max_rank", largest[i]}};
    if (i < std::size(formula)) row["modelled"] = formula[i];
    report[kCategories[i]] = row;
  }
  return report;
}

std::vector<std::string> memory_table(const nlohmann::json& report) {
  std::vector<std::string> lines = {
      fmt::format("{:>22} {:>14} {:>14} {:>14} {:>7}", "memory per rank", "measured(B)", "max rank(B)", "modelled(B)",
                  "ratio")};
  for (const char* category : kCategories) {
    const nlohmann::json& row = report.at(category);
    const double measured = row.at("measured");
    std::string line = fmt::format("{:>22} {:>14.0f} {:>14.0f}", category, measured, double(row.at("measured_max_rank")));
    if (row.contains("modelled")) {
      const double modelled = row.at("modelled");
      line += fmt::format(" {:>14.0f} {:>7.4f}", modelled, modelled > 0 ? measured / modelled : 0.0);
    }
    lines.push_back(line);
  }
  return lines;
}

}  // namespace dptrain
