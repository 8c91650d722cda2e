// dptrain --op-times end to end: the table is printed, and the summary's op_times rows count exactly the calls the
// model issues per step, their shares (with "not in an op") sum to one, and on 2 ranks the comm thread's
// reduce_add is a row of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "test_support.hpp"

namespace dptrain {
namespace {


class OpTimesRun : public testing::TinyRunTest {
 protected:
  OpTimesRun() : TinyRunTest("op-times", "--peak-tflops 1 --link alpha=10us,bw=1GB/s --steps 4 --op-times ") {}

  // The summary's op_times rows of a run (prefix: an mpiexec, or nothing), checked for what every run must hold.
  nlohmann::json op_times(const std::string& prefix, const std::string& log) {
    const testing::LoggedRun run = testing::run_logged(prefix + dptrain("--log " + log), log);
    EXPECT_NE(run.output.find("time per operation, 3 step(s) after the first"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("not in an op"), std::string::npos) << run.output;
    const nlohmann::json rows = run.summary.value("op_times", nlohmann::json::array());
    EXPECT_FALSE(rows.empty()) << run.summary.dump();
    double share = 0;
    for (const auto& row : rows) {
      EXPECT_GE(row["ms_per_step"].get<double>(), 0) << row.dump();
      if (row["thread"] == "compute") share += row["share"].get<double>();
    }
    EXPECT_NEAR(share, 1.0, 1e-9);
    by_shape_ = run.summary.value("op_times_by_shape", nlohmann::json::array());
    return rows;
  }
  nlohmann::json by_shape_;  // the last run's op_times_by_shape

  static const nlohmann::json* row(const nlohmann::json& rows, const std::string& op, const std::string& thread) {
    const auto it =
        std::find_if(rows.begin(), rows.end(), [&](const auto& r) { return r["op"] == op && r["thread"] == thread; });
    return it == rows.end() ? nullptr : &*it;
  }
};

TEST_F(OpTimesRun, OneRankCountsTheModelsCalls) {
  const nlohmann::json rows = op_times("", dir_ / "one.jsonl");
  // Gpt::forward: 4 matmul_forward per block and the tied head; tiny has 2 blocks and one micro-step per step.
  const nlohmann::json* forward = row(rows, "matmul_forward", "compute");
  ASSERT_NE(forward, nullptr) << rows.dump();
  EXPECT_EQ((*forward)["calls_per_step"].get<double>(), 4 * 2 + 1);
  EXPECT_GT((*forward)["gflops"].get<double>(), 0);
  const nlohmann::json* backward = row(rows, "matmul_backward", "compute");
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ((*backward)["calls_per_step"].get<double>(), 4 * 2 + 1);
  EXPECT_EQ((*row(rows, "attention_forward", "compute"))["calls_per_step"].get<double>(), 2);
  ASSERT_NE(row(rows, "not in an op", "compute"), nullptr);
  ASSERT_NE(row(rows, "adamw", "compute"), nullptr);
  ASSERT_TRUE((*row(rows, "layernorm_forward", "compute"))["gflops"].is_null());
  // By shape (tiny: 8 windows of 16 rows, C = 32, V = 256): qkv, the projections, the MLP and the LM head.
  std::map<std::string, double> forward_calls;
  for (const auto& r : by_shape_)
    if (r["op"] == "matmul_forward") forward_calls[r["shape"].get<std::string>()] = r["calls_per_step"].get<double>();
  const std::map<std::string, double> expected{
      {"128×32→96", 2}, {"128×32→32", 2}, {"128×32→128", 2}, {"128×128→32", 2}, {"128×32→256", 1}};
  EXPECT_EQ(forward_calls, expected) << by_shape_.dump();
}

TEST_F(OpTimesRun, TwoRanksReportTheCommThreadApart) {
  const nlohmann::json rows = op_times(testing::mpiexec(2) + " ", dir_ / "two.jsonl");
  // 8 windows over 2 ranks: the same calls per step as one rank, on half the rows.
  ASSERT_NE(row(rows, "matmul_forward", "compute"), nullptr);
  EXPECT_EQ((*row(rows, "matmul_forward", "compute"))["calls_per_step"].get<double>(), 4 * 2 + 1);
  const nlohmann::json* ring = row(rows, "reduce_add", "comm");
  ASSERT_NE(ring, nullptr) << rows.dump();  // the ring's hops, on the comm executor's thread
  EXPECT_GT((*ring)["calls_per_step"].get<double>(), 0);
}

}  // namespace
}  // namespace dptrain
