// The --op-times table from given rows: per-step figures, "not in an op" as the rest of the step, GFLOP/s only
// where an op has FLOPs, the comm thread's rows after the compute thread's.
#include "dptrain/train/op_times_report.hpp"

#include <gtest/gtest.h>

namespace dptrain {
namespace {

TEST(OpTimesReport, PerStepRowsAndTheRestOfTheStep) {
  const std::vector<OpTimeRow> rows = {{"matmul_forward", false, 18, 0.6, 1.2e9},
                                       {"layernorm_forward", false, 10, 0.2, 0},
                                       {"reduce_add", true, 4, 0.1, 0}};
  // 2 steps of 0.5 s each; peak 4 GFLOP/s.
  const OpTimesReport report = op_times_report(rows, 2, 1.0, 4e9);
  ASSERT_EQ(report.rows.size(), 4u);
  const nlohmann::json& mf = report.rows[0];
  EXPECT_EQ(mf["op"], "matmul_forward");
  EXPECT_EQ(mf["thread"], "compute");
  EXPECT_DOUBLE_EQ(mf["calls_per_step"].get<double>(), 9);
  EXPECT_DOUBLE_EQ(mf["ms_per_step"].get<double>(), 300);
  EXPECT_DOUBLE_EQ(mf["share"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(mf["gflops"].get<double>(), 2);
  EXPECT_TRUE(report.rows[1]["gflops"].is_null());
  const nlohmann::json& rest = report.rows[2];
  EXPECT_EQ(rest["op"], kNotInAnOp);
  EXPECT_NEAR(rest["ms_per_step"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(rest["share"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(report.rows[3]["op"], "reduce_add");
  EXPECT_EQ(report.rows[3]["thread"], "comm");
  EXPECT_DOUBLE_EQ(report.rows[3]["ms_per_step"].get<double>(), 50);
  std::string text;
  for (const std::string& line : report.lines) text += line + "\n";
  EXPECT_NE(text.find("50.0%"), std::string::npos) << text;  // 2 GFLOP/s of a 4 GFLOP/s peak
  EXPECT_NE(text.find("reduce_add (comm thread)"), std::string::npos) << text;
  EXPECT_NE(text.find("total"), std::string::npos) << text;
}

TEST(OpTimesReport, NoTimedStep) {
  const OpTimesReport report = op_times_report({}, 0, 0, 1e9);
  EXPECT_TRUE(report.rows.empty());
  ASSERT_EQ(report.lines.size(), 1u);
}

}  // namespace
}  // namespace dptrain
