// The end-of-run summary lines and record.
#include "dptrain/train/summary_writer.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "dptrain/cost/compute.hpp"
#include "dptrain/cost/collectives.hpp"
#include "dptrain/cost/zero.hpp"
#include "dptrain/train/memory_report.hpp"

namespace dptrain {

namespace {

// Measured against modelled per collective and size, as table lines and JSON rows.
nlohmann::json collectives_table(const CollectiveTable& rows, std::vector<std::string>& lines) {
  nlohmann::json table = nlohmann::json::array();
  if (rows.empty()) return table;
  // The model predicts the transfer; the skew (waiting for the last rank to enter) stands beside it.
  lines.push_back(fmt::format("{:>14} {:>7} {:>10} {:>7} {:>12} {:>12} {:>12} {:>9} {:>12} {:>7}", "collective",
                              "algo", "size(B)", "calls", "sent(B)", "measured ms", "transfer ms", "skew ms",
                              "modelled ms", "ratio"));
  for (const auto& [key, row] : rows) {
    const auto& [op, algo, size] = key;
    lines.push_back(fmt::format("{:>14} {:>7} {:>10} {:>7} {:>12} {:>12.3f} {:>12.3f} {:>9.3f} {:>12.3f} {:>7.2f}",
                                collective_op_name(op), algorithm_name(algo), size, row.calls, row.bytes_sent,
                                1e3 * row.measured, 1e3 * row.transfer, 1e3 * row.skew, 1e3 * row.modelled,
                                row.transfer / row.modelled));
    table.push_back({{"op", collective_op_name(op)}, {"algo", algorithm_name(algo)}, {"size", size},
                     {"calls", row.calls}, {"bytes", row.bytes}, {"bytes_sent", row.bytes_sent},
                     {"measured_ms", 1e3 * row.measured}, {"transfer_ms", 1e3 * row.transfer},
                     {"skew_ms", 1e3 * row.skew}, {"modelled_ms", 1e3 * row.modelled},
                     {"ratio", row.transfer / row.modelled}, {"measured_ratio", row.measured / row.modelled}});
    if (algo == Algorithm::tree && op != CollectiveOp::all_reduce) table.back()["modelled_as"] = "ring";
  }
  // The model has the tree's all-reduce only (link_model.cpp's modelled_seconds): said where it stands in.
  if (std::any_of(rows.begin(), rows.end(), [](const auto& row) {
        return std::get<1>(row.first) == Algorithm::tree && std::get<0>(row.first) != CollectiveOp::all_reduce;
      }))
    lines.push_back("dptrain | the tree's reduce-scatter and all-gather have no formula in the model: their modelled "
                    "times are the ring's (\"modelled_as\": \"ring\" in the record)");
  return table;
}

}  // namespace

void RunTotals::add_step(double step_seconds, const StepResult& result, const StepComm& comm) {
  seconds += step_seconds;
  this->comm += comm.seconds;
  transfer += comm.transfer_seconds;
  skew += comm.skew_seconds;
  comm_model += comm.model_seconds;
  exposed += result.exposed_comm_s;
  exposed_model += comm.exposed_model_seconds;
  bytes_sent += comm.bytes_sent;
  ++steps;
  last_loss = result.loss;
}

RunSummary run_summary(const SummaryInputs& in) {
  const TrainOptions& o = in.options;
  const RunTotals& t = in.totals;
  const RunShape& run = in.run;
  RunSummary summary;
  std::vector<std::string>& lines = summary.lines;

  const double mean_ms = t.steps ? 1e3 * t.seconds / t.steps : 0.0;
  const double tokens_per_s = t.seconds > 0 ? double(run.tokens_per_step) * t.steps / t.seconds : 0.0;
  lines.push_back(fmt::format("dptrain | done: {} step{} | final loss {:.4f}{} | {:.1f} ms/step | {} tok/s", t.steps,
                              t.steps == 1 ? "" : "s", t.last_loss,
                              t.last_val ? fmt::format(" | val {:.4f}", *t.last_val) : std::string(), mean_ms,
                              human_count(tokens_per_s)));
  const nlohmann::json table = collectives_table(t.collectives, lines);
  const double per_step = t.steps ? 1.0 / t.steps : 0.0;
  const double hidden = cost::hidden_fraction(t.exposed, t.comm);
  const double hidden_model = cost::hidden_fraction(t.exposed_model, t.comm_model);
  if (run.ranks > 1)
    lines.push_back(fmt::format(
        "dptrain | per step: comm {:.2f} ms = transfer {:.2f} (model {:.2f}) + skew {:.2f}, exposed {:.2f} ms "
        "(model {:.2f}): {:.0f}% of communication hidden (model {:.0f}%)",
        1e3 * t.comm * per_step, 1e3 * t.transfer * per_step, 1e3 * t.comm_model * per_step,
        1e3 * t.skew * per_step, 1e3 * t.exposed * per_step,
        1e3 * t.exposed_model * per_step, 100 * hidden, 100 * hidden_model));

  // Bytes each rank sends per step and memory per rank, against docs/systems-model.md's ZeRO formulas.
  const double params = double(in.parameters), grad_bytes = double(element_size(o.grad_dtype));
  // The ring's formula for every stage (native is counted as the ring would send); the tree's for its all-reduce
  // (stage 0: 2M, what rank 0, its root, sends from 3 ranks on), none for its reduce-scatter and all-gather.
  const bool tree = o.allreduce == "tree";
  auto bytes_formula = [&](double n) -> nlohmann::json {
    if (tree && o.zero > 0) return nullptr;
    if (tree) return cost::wire_bytes(cost::Collective::tree_all_reduce, run.ranks, n * grad_bytes);
    return cost::zero_bytes_sent_per_accumulated_step(o.zero, n, run.ranks, o.grad_accum, grad_bytes);
  };
  const nlohmann::json bytes_sent = {{"measured", double(t.bytes_sent) * per_step},
                                     {"measured_max_rank", in.bytes_sent_largest},
                                     {"modelled", bytes_formula(params)},
                                     {"modelled_padded", bytes_formula(double(in.plan.padded_total()))}};
  const std::string measured = fmt::format(
      "dptrain | bytes sent per step and rank: {:.0f} measured{}", double(bytes_sent["measured"]),
      in.bytes_sent_largest > double(bytes_sent["measured"])
          ? fmt::format(" (rank 0; {:.0f} by the rank that sent the most)", in.bytes_sent_largest)
          : std::string());
  if (bytes_sent["modelled"].is_null())
    lines.push_back(measured + " (the model has no formula for the tree's reduce-scatter and all-gather)");
  else
    lines.push_back(fmt::format("{}, {:.0f} modelled ({:.0f} with the units' padding)", measured,
                                double(bytes_sent["modelled"]), double(bytes_sent["modelled_padded"])));
  const nlohmann::json memory = memory_report(in.memory_mine, in.memory_largest,
                                              cost::zero_memory_per_rank(o.zero, params, run.ranks, grad_bytes));
  for (const std::string& line : memory_table(memory)) lines.push_back(line);

  nlohmann::json units = nlohmann::json::array();
  for (const Unit& u : in.plan.units())
    units.push_back({{"name", u.name}, {"elements", u.range.size()}, {"padded", u.padded}});
  summary.record = {
      {"event", "summary"},
      {"link",
       {{"alpha_s", in.link.link.alpha_s},
        {"bandwidth_Bps", in.link.link.bandwidth_Bps},
        {"gamma_s_per_byte", in.link.link.gamma_s_per_byte},
        {"source", in.link.description}}},
      {"peak_flops_per_rank", run.peak_flops},
      {"mfu", t.seconds > 0 ? cost::mfu(run.flops_per_step * t.steps, t.seconds, run.ranks, run.peak_flops) : 0.0},
      {"collectives", table},
      {"zero", o.zero},
      {"overlap", run.overlap},
      {"overlap_choice", in.overlap_choice},
      {"cpu_gemm", in.cpu_gemm},
      {"attention", in.attention},
      {"matmul_epilogues", in.matmul_epilogues},
      {"host_cpu", {{"model", in.host_cpu.model}, {"vector_extensions", in.host_cpu.vector_extensions}}},
      {"grad_accum", o.grad_accum},
      {"bucket_mb", o.bucket_mb},
      {"units", units},
      {"comm_ms", 1e3 * t.comm * per_step},
      {"comm_model_ms", 1e3 * t.comm_model * per_step},
      {"transfer_ms", 1e3 * t.transfer * per_step},
      {"skew_ms", 1e3 * t.skew * per_step},
      {"exposed_comm_ms", 1e3 * t.exposed * per_step},
      {"exposed_comm_model_ms", 1e3 * t.exposed_model * per_step},
      {"hidden_comm_fraction", {{"measured", hidden}, {"modelled", hidden_model}}},
      {"bytes_sent_per_step", bytes_sent},
      {"memory", memory},
      {"steps", t.steps},
      {"first_step", in.first_step + 1},
      {"last_step", in.last_step},
      {"tokens", double(run.tokens_per_step) * t.steps},
      {"train_seconds", t.seconds},
      {"mean_step_ms", mean_ms},
      {"tokens_per_s", tokens_per_s},
      {"final_loss", t.last_loss},
      {"final_val_loss", t.last_val ? nlohmann::json(*t.last_val) : nlohmann::json()},
      {"parameters", in.parameters},
      {"ranks", run.ranks},
      {"threads_per_rank", in.threads}};
  return summary;
}

}  // namespace dptrain
