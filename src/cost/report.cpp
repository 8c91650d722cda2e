// The Markdown text of dpmodel: a report for one GPU count, or a sweep table over several.
#include "dptrain/cost/report.hpp"

#include <fmt/format.h>

#include "dptrain/core/error.hpp"
#include "dptrain/cost/format.hpp"

namespace dptrain::cost {
namespace {

// Model, devices, link: the lines above every table.
std::string heading(const Scenario& scenario, const ScenarioNumbers& numbers, const ReportLabels& labels,
                    std::string_view gpus) {
  const ModelShape& model = scenario.model;
  std::string text = fmt::format("Model {} (N = {}; L = {}; H = {}; Q = {}; {} tokens per step)\n", labels.model,
                                 format_count(model.params), model.layers, model.width, model.seq,
                                 format_count(model.tokens_per_step));
  text += fmt::format("{} × {} ({:g} TFLOP/s dense BF16, η = {:g}); link {} ({})\n", gpus, labels.device,
                      scenario.peak_flops / 1e12, scenario.eta, labels.link, describe(scenario.link));
  text += fmt::format("Model FLOPs 6N + 12·L·H·Q = {} per token, {} per step.\n", format_flops(numbers.flops_per_token),
                      format_flops(numbers.flops_per_step));
  text += fmt::format("Gradient M = {} in BF16.\n", format_bytes(numbers.gradient_bytes));
  return text;
}

std::string compressed_name(const Scenario& scenario) {
  return fmt::format("all-gather of compressed pieces (1 in {}; BF16 value + 4-byte index)",
                     scenario.compress_keep_one_in);
}

std::string collectives_table(const Scenario& scenario, const ScenarioNumbers& numbers, const ReportLabels& labels) {
  MarkdownTable table({"where", "collective", "time", "bytes each GPU sends"});
  const std::string where = fmt::format("{}, {} GPU{}", labels.where, scenario.gpus, scenario.gpus == 1 ? "" : "s");
  auto row = [&](Collective kind, const CollectiveCost& cost) {
    table.add_row({where, std::string(collective_name(kind)), format_seconds(cost.seconds),
                   format_bytes(cost.wire_bytes)});
  };
  row(Collective::ring_all_reduce, numbers.ring_all_reduce);
  row(Collective::tree_all_reduce, numbers.tree_all_reduce);
  row(Collective::ring_reduce_scatter, numbers.reduce_scatter);
  row(Collective::ring_all_gather, numbers.all_gather);
  return table.str();
}

std::string payload_table(const Scenario& scenario, const ScenarioNumbers& numbers) {
  MarkdownTable table({"collective", "payload", "bytes each GPU sends", "time"});
  auto row = [&](std::string name, const CollectiveCost& cost) {
    table.add_row({std::move(name), format_bytes(cost.payload_bytes), format_bytes(cost.wire_bytes),
                   format_seconds(cost.seconds)});
  };
  row(std::string(collective_name(Collective::ring_all_reduce)), numbers.ring_all_reduce);
  row(std::string(collective_name(Collective::tree_all_reduce)), numbers.tree_all_reduce);
  row(std::string(collective_name(Collective::ring_reduce_scatter)), numbers.reduce_scatter);
  row(std::string(collective_name(Collective::ring_all_gather)), numbers.all_gather);
  if (numbers.compressed_all_gather) row(compressed_name(scenario), *numbers.compressed_all_gather);
  return table.str();
}

std::string zero_table(const ScenarioNumbers& numbers) {
  MarkdownTable table({"stage", "weights", "gradients", "optimizer", "total", "sent per step"});
  std::vector<double> bytes;  // stage by stage, the columns in order
  for (int stage = 0; stage < kZeroStages; ++stage) {
    const ZeroMemory& memory = numbers.zero_memory[stage];
    bytes.insert(bytes.end(), {memory.weights_bytes, memory.gradients_bytes, memory.optimizer_bytes,
                               memory.total_bytes(), numbers.zero_bytes_sent[stage]});
  }
  const std::vector<std::string> texts = format_bytes_in_one_unit(bytes);
  constexpr std::size_t kColumns = 5;
  for (int stage = 0; stage < kZeroStages; ++stage) {
    std::vector<std::string> row = {std::to_string(stage)};
    row.insert(row.end(), texts.begin() + stage * kColumns, texts.begin() + (stage + 1) * kColumns);
    table.add_row(std::move(row));
  }
  return table.str();
}

std::string step_table(const StepTime& step) {
  MarkdownTable table({"step", "compute", "backward", "comm", "exposed comm", "step time", "MFU"});
  auto row = [&](std::string name, double step_seconds, double mfu) {
    table.add_row({std::move(name), format_seconds(step.compute_s), format_seconds(step.backward_s),
                   format_seconds(step.comm_s), format_seconds(step_seconds - step.compute_s),
                   format_seconds(step_seconds), format_percent(mfu)});
  };
  row("waiting", step.waiting_step_s, step.waiting_mfu);
  row("overlapped", step.overlapped_step_s, step.overlapped_mfu);
  return table.str();
}

}  // namespace

std::string format_report(const Scenario& scenario, const ScenarioNumbers& numbers, const ReportLabels& labels) {
  std::string text = heading(scenario, numbers, labels, std::to_string(scenario.gpus));
  text += "\n## Collectives on the gradient\n\n" + collectives_table(scenario, numbers, labels);
  text += "\n## Payload vs wire bytes, per GPU\n\n" + payload_table(scenario, numbers);
  text += fmt::format("\n## ZeRO on {} GPU{}, memory per GPU (K = {:g})\n\n", scenario.gpus,
                      scenario.gpus == 1 ? "" : "s", kOptimizerBytesPerParam) +
          zero_table(numbers);
  text += fmt::format("\n## Step ({} tokens; comm = ring all-reduce of the gradient, hidden behind backward when "
                      "overlapped)\n\n",
                      format_count(scenario.model.tokens_per_step)) +
          step_table(numbers.step);
  return text;
}

std::string format_sweep(const Scenario& scenario, std::span<const int> gpu_counts, const ReportLabels& labels) {
  DP_ASSERT(!gpu_counts.empty());
  const bool compressed = scenario.compress_keep_one_in > 0;
  std::vector<std::string> header = {"GPUs", "ring all-reduce", "ring bytes each GPU sends", "binary-tree all-reduce"};
  if (compressed) {
    header.push_back(fmt::format("compressed all-gather (1 in {})", scenario.compress_keep_one_in));
    header.push_back("compressed bytes each GPU sends");
  }
  for (const char* column : {"compute", "waiting step", "waiting MFU", "overlapped step", "overlapped MFU"}) {
    header.push_back(column);
  }
  MarkdownTable table(std::move(header));

  Scenario at_count = scenario;
  std::string first_heading;
  for (int gpus : gpu_counts) {
    at_count.gpus = gpus;
    const ScenarioNumbers numbers = evaluate(at_count);
    if (first_heading.empty()) first_heading = heading(at_count, numbers, labels, "n");
    std::vector<std::string> row = {std::to_string(gpus), format_seconds(numbers.ring_all_reduce.seconds),
                                    format_bytes(numbers.ring_all_reduce.wire_bytes),
                                    format_seconds(numbers.tree_all_reduce.seconds)};
    if (compressed) {
      row.push_back(format_seconds(numbers.compressed_all_gather->seconds));
      row.push_back(format_bytes(numbers.compressed_all_gather->wire_bytes));
    }
    const StepTime& step = numbers.step;
    for (std::string cell : {format_seconds(step.compute_s), format_seconds(step.waiting_step_s),
                             format_percent(step.waiting_mfu), format_seconds(step.overlapped_step_s),
                             format_percent(step.overlapped_mfu)}) {
      row.push_back(std::move(cell));
    }
    table.add_row(std::move(row));
  }
  return first_heading + "\n## Growth with the GPU count (comm = ring all-reduce of the gradient)\n\n" + table.str();
}

}  // namespace dptrain::cost
