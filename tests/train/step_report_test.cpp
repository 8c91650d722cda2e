// The per-step report and the run summary against hand-computed values: the α–β model of a step's calls and
// their exposed part, the step line and JSONL record, and the summary's lines and record.
#include <gtest/gtest.h>

#include "dptrain/dp/unit_plan.hpp"
#include "dptrain/model/layout.hpp"
#include "dptrain/train/step_report.hpp"
#include "dptrain/train/summary_writer.hpp"

namespace dptrain {
namespace {

// 12 GFLOP per step on 2 ranks of 1 TFLOP/s: 6 ms of modelled compute, 4 ms of it backward.
const RunShape kRun{.flops_per_step = 12e9, .tokens_per_step = 128, .steps = 30, .ranks = 2, .peak_flops = 1e12,
                    .overlap = true};

// A call that waited `skew` of its `seconds` for the other rank (as split_skew leaves it).
CommRecord call(CollectiveOp op, std::uint64_t bytes, double seconds, double skew = 0) {
  return {.op = op, .algo = Algorithm::ring, .dtype = DType::bf16, .count = bytes / 2, .bytes = bytes,
          .bytes_sent = bytes / 2, .seconds = seconds, .skew_s = skew, .transfer_s = seconds - skew};
}

TEST(StepReport, CallsAreModelledAndQueuedBehindBackward) {
  // α = 10 µs, B = 1 GB/s, 2 ranks: a ring all-reduce of 1000 B takes 2α + M/B = 21 µs.
  const cost::Link link{.alpha_s = 1e-5, .bandwidth_Bps = 1e9};
  CollectiveTable table;
  const std::vector<CommRecord> calls = {call(CollectiveOp::all_reduce, 1000, 3e-5, 1e-5),
                                         call(CollectiveOp::all_reduce, 1000, 2e-5)};
  // Units ready at 10 and 20 µs: the first runs 10–31 µs, the second 31–52 µs; backward ends at 20 µs.
  const StepComm overlapped = account_step_comm(calls, {1e-5, 1e-5}, true, 2, link, table);
  EXPECT_DOUBLE_EQ(overlapped.seconds, 5e-5);
  EXPECT_DOUBLE_EQ(overlapped.model_seconds, 4.2e-5);
  EXPECT_DOUBLE_EQ(overlapped.exposed_model_seconds, 3.2e-5);
  EXPECT_DOUBLE_EQ(overlapped.transfer_seconds, 4e-5);
  EXPECT_DOUBLE_EQ(overlapped.skew_seconds, 1e-5);
  // The same overlap on the measured transfers (20 µs each): 10–30 µs and 30–50 µs, 30 µs after backward.
  EXPECT_DOUBLE_EQ(overlapped.exposed_transfer_seconds, 3e-5);
  EXPECT_EQ(overlapped.bytes_sent, 1000u);
  const StepComm waiting = account_step_comm(calls, {1e-5, 1e-5}, false, 2, link, table);
  EXPECT_DOUBLE_EQ(waiting.exposed_model_seconds, 4.2e-5);  // without overlap all of it is exposed
  EXPECT_DOUBLE_EQ(waiting.exposed_transfer_seconds, 4e-5);
  ASSERT_EQ(table.size(), 1u);                              // one (op, algorithm, size) row, 4 calls
  const CollectiveTotals& row = table.begin()->second;
  EXPECT_EQ(row.calls, 4u);
  EXPECT_EQ(row.bytes, 4000u);
  EXPECT_DOUBLE_EQ(row.measured, 1e-4);
  EXPECT_DOUBLE_EQ(row.modelled, 8.4e-5);
  EXPECT_DOUBLE_EQ(row.transfer, 8e-5);
  EXPECT_DOUBLE_EQ(row.skew, 2e-5);
}

TEST(StepReport, LineAndRecordOfAStep) {
  const StepResult result{.loss = 5.0, .grad_norm = 2.0, .forward_s = 0.003, .backward_s = 0.005,
                          .optimizer_s = 0.001, .exposed_comm_s = 0.001, .unit_backward_s = {}};
  const StepComm comm{.seconds = 0.002, .model_seconds = 0.003, .exposed_model_seconds = 0.0015,
                      .transfer_seconds = 0.0015, .skew_seconds = 0.0005, .exposed_transfer_seconds = 0.001,
                      .bytes_sent = 68480};
  const StepReport report = step_report(kRun, 4, 1e-3, 0.01, result, comm, 4.5);
  EXPECT_EQ(report.line,
            "step 4/30 | loss 5.0000 | lr 1.0e-03 | norm 2.000 | 10.0 ms | 12.8k tok/s | MFU 60.0% | comm 2.0 ms "
            "= transfer 1.5 (model 3.0) + skew 0.5, 68.5kB sent | exposed 1.0 ms (model 1.5) | val 4.5000");
  const nlohmann::json& r = report.record;
  EXPECT_EQ(r["step"], 4);
  EXPECT_DOUBLE_EQ(r["tokens_per_s"].get<double>(), 12800.0);
  EXPECT_DOUBLE_EQ(r["mfu"].get<double>(), 0.6);  // 12e9 / 0.01 s / 2e12
  // Overlapped: 6 ms compute + max(0, 3 − 4) ms comm; measured 10 − 1 ms exposed + 1.5 ms modelled exposed.
  EXPECT_DOUBLE_EQ(r["step_model_ms"].get<double>(), 6.0);
  EXPECT_DOUBLE_EQ(r["step_overlap_model_ms"].get<double>(), 10.5);
  EXPECT_DOUBLE_EQ(r["comm_model_ms"].get<double>(), 3.0);
  EXPECT_EQ(r["comm_bytes"], 68480);
  EXPECT_DOUBLE_EQ(r["transfer_ms"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r["skew_ms"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["exposed_transfer_ms"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(r["val_loss"].get<double>(), 4.5);
  EXPECT_EQ(r.size(), 21u);

  RunShape waiting = kRun;
  waiting.overlap = false;
  waiting.ranks = 1;
  waiting.flops_per_step = 6e9;  // 6 ms on one rank
  const StepReport alone = step_report(waiting, 4, 1e-3, 0.01, result, comm, std::nullopt);
  EXPECT_DOUBLE_EQ(alone.record["step_model_ms"].get<double>(), 9.0);  // 6 ms + all 3 ms of comm
  EXPECT_EQ(alone.line, "step 4/30 | loss 5.0000 | lr 1.0e-03 | norm 2.000 | 10.0 ms | 12.8k tok/s | MFU 60.0%");
  EXPECT_FALSE(alone.record.contains("val_loss"));
}

TEST(StepReport, HumanCounts) {
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_count(12345), "12.3k");
  EXPECT_EQ(human_count(1234567), "1.23M");
}

TEST(RunSummary, LinesAndRecord) {
  // The tiny model (34,176 parameters) in 4 units on 2 ranks, padded to 34,240 elements.
  const ModelConfig tiny{.vocab = 256, .seq = 16, .layers = 2, .width = 32, .heads = 2};
  const ParameterLayout layout(tiny);
  const UnitPlan plan(layout, 0, 2, 2);
  ASSERT_EQ(plan.padded_total(), 34240u);
  TrainOptions options;
  options.model = tiny;
  options.steps = 30;
  const RunTotals totals{.steps = 2, .seconds = 0.02, .comm = 0.004, .comm_model = 0.006, .exposed = 0.001,
                         .exposed_model = 0.003, .transfer = 0.003, .skew = 0.001, .bytes_sent = 136960,
                         .last_loss = 5.0, .last_val = 4.5,
                         .collectives = {{{CollectiveOp::all_reduce, Algorithm::ring, 1000},
                                          {2, 2000, 2000, 4e-5, 5e-5, 3e-5, 1e-5}}}};
  const LinkSource link{{1e-5, 1e9, 2e-11}, "alpha=10us,bw=1GB/s,gamma=0.02ns/B"};
  const std::vector<double> memory = {1, 2, 3, 4, 5, 6, 7, 8};
  const RunSummary summary = run_summary({.options = options,
                                          .run = kRun,
                                          .totals = totals,
                                          .plan = plan,
                                          .parameters = layout.total(),
                                          .link = link,
                                          .memory_mine = memory,
                                          .memory_largest = memory,
                                          .bytes_sent_largest = 68480,
                                          .first_step = 10,
                                          .last_step = 30,
                                          .threads = 3,
                                          .overlap_choice = {{"mode", "on"}, {"overlap", true}},
                                          .cpu_gemm = nullptr,
                                          .attention = "gemm",
                                          .matmul_epilogues = "composed",
                                          .host_cpu = {}});
  ASSERT_EQ(summary.lines.size(), 5u + 9u);  // done, table header and row, per step, bytes; memory header + 8
  EXPECT_EQ(summary.lines[0], "dptrain | done: 2 steps | final loss 5.0000 | val 4.5000 | 10.0 ms/step | 12.8k tok/s");
  EXPECT_EQ(summary.lines[2],
            "    all_reduce    ring       1000       2         2000        0.040        0.030     0.010        0.050"
            "    0.60");
  EXPECT_EQ(summary.lines[3],
            "dptrain | per step: comm 2.00 ms = transfer 1.50 (model 3.00) + skew 0.50, exposed 0.50 ms (model 1.50): "
            "75% of communication hidden (model 50%)");
  // Stage 0 on 2 ranks sends one ring all-reduce of the BF16 gradient: 2·(1/2)·2 B per parameter.
  EXPECT_EQ(summary.lines[4],
            "dptrain | bytes sent per step and rank: 68480 measured, 68352 modelled (68480 with the units' padding)");
  const nlohmann::json& r = summary.record;
  EXPECT_EQ(r["event"], "summary");
  EXPECT_DOUBLE_EQ(r["mfu"].get<double>(), 0.6);  // 2 × 12e9 / 0.02 s / 2e12
  EXPECT_DOUBLE_EQ(r["hidden_comm_fraction"]["measured"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(r["hidden_comm_fraction"]["modelled"].get<double>(), 0.5);
  EXPECT_EQ(r["first_step"], 11);
  EXPECT_EQ(r["last_step"], 30);
  EXPECT_EQ(r["steps"], 2);
  EXPECT_EQ(r["attention"], "gemm");
  EXPECT_DOUBLE_EQ(r["tokens"].get<double>(), 256.0);
  EXPECT_EQ(r["units"].size(), 4u);
  EXPECT_EQ(r["collectives"][0]["op"], "all_reduce");
  EXPECT_DOUBLE_EQ(r["collectives"][0]["ratio"].get<double>(), 0.6);  // transfer / modelled
  EXPECT_DOUBLE_EQ(r["collectives"][0]["measured_ratio"].get<double>(), 0.8);
  EXPECT_DOUBLE_EQ(r["transfer_ms"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r["skew_ms"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["bytes_sent_per_step"]["modelled_padded"].get<double>(), 68480.0);
  EXPECT_DOUBLE_EQ(r["bytes_sent_per_step"]["measured_max_rank"].get<double>(), 68480.0);
  EXPECT_EQ(r["memory"]["optimizer"]["measured"], 3.0);
  EXPECT_EQ(r["threads_per_rank"], 3);
  EXPECT_EQ(r["link"]["source"], "alpha=10us,bw=1GB/s,gamma=0.02ns/B");
  EXPECT_DOUBLE_EQ(r["link"]["alpha_s"].get<double>(), 1e-5);
  EXPECT_DOUBLE_EQ(r["link"]["bandwidth_Bps"].get<double>(), 1e9);
  EXPECT_DOUBLE_EQ(r["link"]["gamma_s_per_byte"].get<double>(), 2e-11);
}

}  // namespace
}  // namespace dptrain
