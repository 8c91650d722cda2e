// The end-of-run summary: the totals the steps accumulate, and from them the printed lines (the done line, the
// per-collective table of measured against modelled time, communication hidden per step, bytes sent and memory
// per rank against docs/systems-model.md's ZeRO formulas) and the {"event":"summary"} JSONL record. Pure: the caller
// gathers the per-rank figures, prints and writes.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dptrain/core/cpu_info.hpp"
#include "dptrain/dp/engine.hpp"
#include "dptrain/train/link_model.hpp"
#include "dptrain/train/options.hpp"
#include "dptrain/train/step_report.hpp"

namespace dptrain {

// Sums over the steps whose update was taken (skipped non-finite steps are not timed).
struct RunTotals {
  int steps = 0;
  double seconds = 0;
  double comm = 0, comm_model = 0, exposed = 0, exposed_model = 0;  // seconds
  double transfer = 0, skew = 0;                                    // comm = transfer + skew
  std::uint64_t bytes_sent = 0;
  double last_loss = NAN;
  std::optional<double> last_val;  // the last validation loss, when one was computed
  CollectiveTable collectives;  // filled by account_step_comm

  void add_step(double step_seconds, const StepResult& result, const StepComm& comm);
};

struct SummaryInputs {
  const TrainOptions& options;
  const RunShape& run;
  const RunTotals& totals;
  const UnitPlan& plan;
  std::size_t parameters = 0;
  const LinkSource& link;
  std::vector<double> memory_mine, memory_largest;  // memory_figures() of this rank and the maximum over ranks
  double bytes_sent_largest = 0;                     // the most bytes per step any rank sent (a tree's inner ranks)
  int first_step = 0;  // loop steps done before this run (a resume)
  int last_step = 0;   // the last loop step run: --steps, or where a signal or a non-finite step stopped it
  int threads = 1;     // per rank
  nlohmann::json overlap_choice;  // OverlapChoice::summary()
  nlohmann::json cpu_gemm;        // CpuGemmChoice::summary(); null on cuda
  std::string attention;          // Backend::attention_name()
  std::string matmul_epilogues;   // Backend::matmul_epilogues()
  CpuInfo host_cpu;               // rank 0's host CPU
};

struct RunSummary {
  std::vector<std::string> lines;  // printed by rank 0
  nlohmann::json record;           // {"event":"summary", ...}
};

RunSummary run_summary(const SummaryInputs& in);

}  // namespace dptrain
