// What one training step measured next to what the systems model predicts: the step's collectives summed and
// modelled (α–β per call, the exposed part from the per-unit backward times), and the step line and JSONL record
// built from them. Pure: the caller prints and writes.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/cost/link.hpp"
#include "dptrain/dp/engine.hpp"

namespace dptrain {

// Every collective of the timed steps summed per (operation, algorithm, size), for the summary table.
struct CollectiveTotals {
  std::size_t calls = 0;
  std::uint64_t bytes = 0, bytes_sent = 0;
  double measured = 0, modelled = 0;  // seconds
  double transfer = 0, skew = 0;      // measured = transfer + skew (collective_skew.hpp); modelled predicts transfer
};
using CollectiveTable = std::map<std::tuple<CollectiveOp, Algorithm, std::size_t>, CollectiveTotals>;

// One step's collectives: measured time split into transfer and skew, modelled time, bytes sent, and the modelled
// exposed part.
struct StepComm {
  double seconds = 0, model_seconds = 0, exposed_model_seconds = 0;
  double transfer_seconds = 0, skew_seconds = 0;  // seconds = transfer + skew
  // The overlap model run on the measured transfer times instead of the α–β ones: what would stay exposed if the
  // ranks arrived together.
  double exposed_transfer_seconds = 0;
  std::uint64_t bytes_sent = 0;
};

// Sums the step's calls and adds each to `table`. With overlap, the units' collectives queue behind the backward
// pass as the measured per-unit backward times release them (cost::simulate_overlap); weight all-gathers, and
// everything without overlap, count as exposed. The calls' skew_s and transfer_s must be filled (split_skew).
StepComm account_step_comm(const std::vector<CommRecord>& calls, const std::vector<double>& unit_backward_s,
                           bool overlap, int ranks, const cost::Link& link, CollectiveTable& table);

// What does not change from step to step.
struct RunShape {
  double flops_per_step = 0;      // model FLOPs of one global step (6N + 12·L·H·Q per token)
  std::size_t tokens_per_step = 0;
  int steps = 0;                  // --steps, for "step s/steps"
  int ranks = 1;
  double peak_flops = 0;          // per rank
  bool overlap = true;
};

struct StepReport {
  std::string line;       // "step 4/30 | loss 5.1234 | ..." (the trainer prints it unless --quiet)
  nlohmann::json record;  // the JSONL record
};

// The report of loop step `step` (1-based) that took `seconds`, at learning rate `lr`; val_loss when evaluated.
StepReport step_report(const RunShape& run, int step, double lr, double seconds, const StepResult& result,
                       const StepComm& comm, std::optional<double> val_loss);

// 1234567 → "1.23M", 12345 → "12.3k", 123 → "123": token rates and byte counts in the step line.
std::string human_count(double x);

}  // namespace dptrain
