// The per-step report: collectives measured against the α–β model, and the step line and JSONL record.
#include "dptrain/train/step_report.hpp"

#include <fmt/format.h>

#include "dptrain/cost/compute.hpp"
#include "dptrain/train/link_model.hpp"

namespace dptrain {

std::string human_count(double x) {
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

StepComm account_step_comm(const std::vector<CommRecord>& calls, const std::vector<double>& unit_backward_s,
                           bool overlap, int ranks, const cost::Link& link, CollectiveTable& table) {
  StepComm comm;
  std::vector<double> unit_model, unit_transfer;  // gradient collectives, launch order
  double gather_model = 0, gather_transfer = 0;   // weight all-gathers (ZeRO 1–3)
  for (const CommRecord& call : calls) {
    const double modelled = modelled_seconds(call, ranks, link);
    comm.seconds += call.seconds;
    comm.transfer_seconds += call.transfer_s;
    comm.skew_seconds += call.skew_s;
    (call.op == CollectiveOp::all_gather ? gather_transfer : unit_transfer.emplace_back()) += call.transfer_s;
    comm.bytes_sent += call.bytes_sent;
    comm.model_seconds += modelled;
    (call.op == CollectiveOp::all_gather ? gather_model : unit_model.emplace_back()) += modelled;
    CollectiveTotals& totals = table[{call.op, call.algo, call.bytes}];
    ++totals.calls;
    totals.bytes += call.bytes;
    totals.bytes_sent += call.bytes_sent;
    totals.measured += call.seconds;
    totals.modelled += modelled;
    totals.transfer += call.transfer_s;
    totals.skew += call.skew_s;
  }
  auto exposed = [&](const std::vector<double>& unit_seconds) {
    double sum = 0;
    if (overlap && unit_seconds.size() == unit_backward_s.size())
      return cost::simulate_overlap(unit_backward_s, unit_seconds).exposed_comm_s;
    for (double t : unit_seconds) sum += t;
    return sum;
  };
  comm.exposed_model_seconds = exposed(unit_model) + gather_model;
  comm.exposed_transfer_seconds = exposed(unit_transfer) + gather_transfer;
  return comm;
}

StepReport step_report(const RunShape& run, int step, double lr, double seconds, const StepResult& result,
                       const StepComm& comm, std::optional<double> val_loss) {
  // docs/systems-model.md's step at the probed peak (η = 1): compute + comm, or compute + max(0, comm − backward)
  // with overlap.
  const cost::StepTime model = cost::model_step(run.flops_per_step, run.ranks, run.peak_flops, 1.0, comm.model_seconds);
  const double step_model_seconds = run.overlap ? model.overlapped_step_s : model.waiting_step_s;
  // This step's measured computation plus the communication the model says stays exposed.
  const double step_overlap_model_seconds = seconds - result.exposed_comm_s + comm.exposed_model_seconds;
  const double mfu = cost::mfu(run.flops_per_step, seconds, run.ranks, run.peak_flops);
  const double tokens_per_s = double(run.tokens_per_step) / seconds;

  StepReport report;
  report.line = fmt::format("step {}/{} | loss {:.4f} | lr {:.1e} | norm {:.3f} | {:.1f} ms | {} tok/s", step,
                            run.steps, result.loss, lr, result.grad_norm, 1e3 * seconds, human_count(tokens_per_s));
  report.line += fmt::format(" | MFU {:.1f}%", 100 * mfu);
  if (run.ranks > 1)
    report.line += fmt::format(
        " | comm {:.1f} ms = transfer {:.1f} (model {:.1f}) + skew {:.1f}, {}B sent | exposed {:.1f} ms (model "
        "{:.1f})",
        1e3 * comm.seconds, 1e3 * comm.transfer_seconds, 1e3 * comm.model_seconds, 1e3 * comm.skew_seconds,
        human_count(double(comm.bytes_sent)), 1e3 * result.exposed_comm_s, 1e3 * comm.exposed_model_seconds);
  if (val_loss) report.line += fmt::format(" | val {:.4f}", *val_loss);

  report.record = {{"step", step},
                   {"loss", result.loss},
                   {"lr", lr},
                   {"grad_norm", result.grad_norm},
                   {"step_ms", 1e3 * seconds},
                   {"tokens_per_s", tokens_per_s},
                   {"forward_ms", 1e3 * result.forward_s},
                   {"backward_ms", 1e3 * result.backward_s},
                   {"optimizer_ms", 1e3 * result.optimizer_s},
                   {"comm_ms", 1e3 * comm.seconds},
                   {"comm_bytes", comm.bytes_sent},
                   {"comm_model_ms", 1e3 * comm.model_seconds},
                   {"transfer_ms", 1e3 * comm.transfer_seconds},
                   {"skew_ms", 1e3 * comm.skew_seconds},
                   {"exposed_transfer_ms", 1e3 * comm.exposed_transfer_seconds},
                   {"exposed_comm_ms", 1e3 * result.exposed_comm_s},
                   {"exposed_comm_model_ms", 1e3 * comm.exposed_model_seconds},
                   {"step_model_ms", 1e3 * step_model_seconds},
                   {"step_overlap_model_ms", 1e3 * step_overlap_model_seconds},
                   {"mfu", mfu}};
  if (val_loss) report.record["val_loss"] = *val_loss;
  return report;
}

}  // namespace dptrain
