// The text `dpmodel` prints: Markdown tables laid out as in docs/systems-model.md ("| NVLink, 8 GPUs | ring
// all-reduce | 52.5 ms | 23.58 GB |"). Pure string building; the app writes it out.
#pragma once
#include <span>
#include <string>

#include "dptrain/cost/scenario.hpp"

namespace dptrain::cost {

// Names for the headings: only the report needs them, the arithmetic does not.
struct ReportLabels {
  std::string model;   // "llama-7b"
  std::string device;  // "H100 SXM"
  std::string link;    // "nvlink-h100" or the spec as given
  std::string where;   // first column of the collectives table: "NVLink" for a preset, else describe(link)
};

// One GPU count: model line, collectives, payload vs wire bytes (with the compressed all-gather when asked),
// ZeRO stages 0–3, step.
std::string format_report(const Scenario& scenario, const ScenarioNumbers& numbers, const ReportLabels& labels);

// Several GPU counts, one table row each (`scenario.gpus` is ignored; each count is evaluated).
std::string format_sweep(const Scenario& scenario, std::span<const int> gpu_counts, const ReportLabels& labels);

}  // namespace dptrain::cost
