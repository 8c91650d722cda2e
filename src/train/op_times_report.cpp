// The --op-times table and its summary rows.
#include "dptrain/train/op_times_report.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace dptrain {

OpTimesReport op_times_report(const std::vector<OpTimeRow>& rows, int steps, double step_seconds, double peak_flops,
                              const std::vector<OpTimeRow>& shape_rows) {
  OpTimesReport report;
  if (steps <= 0 || step_seconds <= 0) {
    report.lines.push_back("dptrain | --op-times: no step was timed (the first step of a run is not)");
    return report;
  }
  const double per_step = 1.0 / steps;
  report.lines.push_back(fmt::format(
      "dptrain | time per operation, {} step(s) after the first (waiting for the device after each operation):",
      steps));
  report.lines.push_back(fmt::format("{:>32} {:>10} {:>9} {:>7} {:>9} {:>7}", "op", "calls/step", "ms/step", "share",
                                     "GFLOP/s", "% peak"));
  // One line and one JSON row; `label` is what the line shows (the op, or its shape in the second table).
  auto row = [&](const std::string& op, const std::string& label, bool comm, double calls, double seconds,
                 double flops) {
    const double share = seconds / step_seconds, rate = seconds > 0 ? flops / seconds : 0;
    report.lines.push_back(flops > 0 ? fmt::format("{:>32} {:>10.1f} {:>9.3f} {:>6.1f}% {:>9.2f} {:>6.1f}%", label,
                                                   calls * per_step, 1e3 * seconds * per_step, 100 * share,
                                                   rate / 1e9, 100 * rate / peak_flops)
                                     : fmt::format("{:>32} {:>10.1f} {:>9.3f} {:>6.1f}%", label, calls * per_step,
                                                   1e3 * seconds * per_step, 100 * share));
    return nlohmann::json{{"op", op},
                          {"thread", comm ? "comm" : "compute"},
                          {"calls_per_step", calls * per_step},
                          {"ms_per_step", 1e3 * seconds * per_step},
                          {"share", share},
                          {"gflops", flops > 0 ? nlohmann::json(rate / 1e9) : nlohmann::json()}};
  };
  auto add = [&](const std::string& op, bool comm, double calls, double seconds, double flops) {
    report.rows.push_back(row(op, comm ? op + " (comm thread)" : op, comm, calls, seconds, flops));
  };
  double in_ops = 0;
  for (const OpTimeRow& r : rows) {
    if (r.other_thread) continue;
    add(r.op, false, double(r.calls), r.seconds, r.flops);
    in_ops += r.seconds;
  }
  const double outside = std::max(0.0, step_seconds - in_ops);
  report.lines.push_back(fmt::format("{:>32} {:>10} {:>9.3f} {:>6.1f}%", kNotInAnOp, "", 1e3 * outside * per_step,
                                     100 * outside / step_seconds));
  report.rows.push_back({{"op", kNotInAnOp},
                         {"thread", "compute"},
                         {"calls_per_step", 0},
                         {"ms_per_step", 1e3 * outside * per_step},
                         {"share", outside / step_seconds},
                         {"gflops", nullptr}});
  report.lines.push_back(fmt::format("{:>32} {:>10} {:>9.3f} {:>6.1f}%", "total", "", 1e3 * step_seconds * per_step,
                                     100 * (in_ops + outside) / step_seconds));
  for (const OpTimeRow& r : rows)
    if (r.other_thread) add(r.op, true, double(r.calls), r.seconds, r.flops);
  if (!shape_rows.empty()) {
    report.lines.push_back("dptrain | the same operations by shape (rows × in → out):");
    std::string op;
    for (const OpTimeRow& r : shape_rows) {
      if (r.op != op) report.lines.push_back(fmt::format("{:>32}", op = r.op));
      nlohmann::json json = row(r.op, r.shape, false, double(r.calls), r.seconds, r.flops);
      json["shape"] = r.shape;
      report.shape_rows.push_back(std::move(json));
    }
  }
  return report;
}

}  // namespace dptrain
