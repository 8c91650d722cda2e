// The report for LLaMA 7B on 8 GPUs over NVLink contains docs/systems-model.md's reference rows verbatim.
#include <gtest/gtest.h>

#include "dptrain/core/error.hpp"
#include "dptrain/cost/report.hpp"

namespace dptrain::cost {
namespace {

Scenario llama_on_nvlink(int gpus) {
  return Scenario{.model = find_model_preset("llama-7b")->shape,
                  .link = find_link_preset("nvlink-h100")->link,
                  .peak_flops = find_device_preset("h100")->peak_flops,
                  .eta = kDefaultMatmulEfficiency,
                  .gpus = gpus,
                  .compress_keep_one_in = 16};
}

const ReportLabels kLabels{.model = "llama-7b", .device = "H100 SXM", .link = "nvlink-h100", .where = "NVLink"};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(Report, ContainsTheReferenceRows) {
  const Scenario scenario = llama_on_nvlink(8);
  const std::string text = format_report(scenario, evaluate(scenario), kLabels);
  for (const char* row : {
           "Gradient M = 13.48 GB in BF16.",
           "| where | collective | time | bytes each GPU sends |",
           "| NVLink, 8 GPUs | ring all-reduce | 52.5 ms | 23.58 GB |",
           "| NVLink, 8 GPUs | binary-tree all-reduce (not pipelined) | 179.7 ms | 26.95 GB |",
           "| NVLink, 8 GPUs | reduce-scatter | 26.2 ms | 11.79 GB |",
           "| NVLink, 8 GPUs | all-gather | 26.2 ms | 11.79 GB |",
           "| stage | weights | gradients | optimizer | total | sent per step |",
           "| 2 | 13.48 GB | 1.68 GB | 10.11 GB | 25.27 GB | 23.58 GB |",
           "| 3 | 1.68 GB | 1.68 GB | 10.11 GB | 13.48 GB | 35.38 GB |",
           "| all-gather of compressed pieces (1 in 16; BF16 value + 4-byte index) | 2.53 GB | 17.69 GB | 39.3 ms |",
           "| waiting | 13.13 s | 8.76 s | 52.5 ms | 52.5 ms | 13.19 s | 47.1% |",
           "| overlapped | 13.13 s | 8.76 s | 52.5 ms | 0 s | 13.13 s | 47.3% |",
           "N = 6,738,149,376; L = 32; H = 4096; Q = 4096; 1,048,576 tokens per step",
       }) {
    EXPECT_TRUE(contains(text, row)) << "missing: " << row << "\n" << text;
  }
}

TEST(Report, EvaluateComputesEveryStageAndTheStep) {
  const ScenarioNumbers numbers = evaluate(llama_on_nvlink(64));
  EXPECT_DOUBLE_EQ(numbers.gradient_bytes, 13'476'298'752.0);
  EXPECT_DOUBLE_EQ(numbers.zero_memory[2].gradients_bytes, 13'476'298'752.0 / 64);
  EXPECT_DOUBLE_EQ(numbers.step.comm_s, numbers.ring_all_reduce.seconds);
  ASSERT_TRUE(numbers.compressed_all_gather.has_value());
  EXPECT_DOUBLE_EQ(numbers.compressed_all_gather->wire_bytes, 63 * 2'526'806'016.0);
}

TEST(Report, SweepHasOneRowPerGpuCount) {
  const std::vector<int> counts = {2, 8, 1024};
  const std::string text = format_sweep(llama_on_nvlink(1), counts, kLabels);
  EXPECT_TRUE(contains(text, "| 8 | 52.5 ms | 23.58 GB | 179.7 ms | 39.3 ms | 17.69 GB | 13.13 s | 13.19 s | 47.1% | "
                             "13.13 s | 47.3% |"))
      << text;
  EXPECT_TRUE(contains(text, "| 2 | ")) << text;
  EXPECT_TRUE(contains(text, "| 1024 | ")) << text;
}

TEST(Report, EvaluateRefusesBadScenarios) {
  Scenario bad = llama_on_nvlink(8);
  bad.eta = 1.5;
  EXPECT_THROW(evaluate(bad), UserError);
  bad = llama_on_nvlink(0);
  EXPECT_THROW(evaluate(bad), UserError);
  bad = llama_on_nvlink(8);
  bad.model.tokens_per_step = 0;
  EXPECT_THROW(evaluate(bad), UserError);
}

}  // namespace
}  // namespace dptrain::cost
