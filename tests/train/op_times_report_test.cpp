// The --op-times table from given rows: per-step figures, "not in an op" as the rest of the step, GFLOP/s only
// where an op has FLOPs, the comm thread's rows after the compute thread's.
#include "dptrain/train/op_times_report.hpp"

#include <gtest/gtest.h>

#include <string>

namespace dptrain {
namespace {

// A row's per-step figures: calls, milliseconds, share of the step, GFLOP/s.
void expect_per_step(const nlohmann::json& row, double calls, double ms, double share, double gflops) {
  EXPECT_DOUBLE_EQ(row["calls_per_step"].get<double>(), calls) << row;
  EXPECT_DOUBLE_EQ(row["ms_per_step"].get<double>(), ms) << row;
  EXPECT_DOUBLE_EQ(row["share"].get<double>(), share) << row;
  EXPECT_DOUBLE_EQ(row["gflops"].get<double>(), gflops) << row;
}

std::string text_of(const OpTimesReport& report) {
  std::string text;
  for (const std::string& line : report.lines) text += line + "\n";
  return text;
}

TEST(OpTimesReport, PerStepRowsAndTheRestOfTheStep) {
  const std::vector<OpTimeRow> rows = {{"matmul_forward", false, 18, 0.6, 1.2e9, ""},
                                       {"layernorm_forward", false, 10, 0.2, 0, ""},
                                       {"reduce_add", true, 4, 0.1, 0, ""}};
  // 2 steps of 0.5 s each; peak 4 GFLOP/s.
  const OpTimesReport report = op_times_report(rows, 2, 1.0, 4e9);
  ASSERT_EQ(report.rows.size(), 4u);
  const nlohmann::json& mf = report.rows[0];
  EXPECT_EQ(mf["op"], "matmul_forward");
  EXPECT_EQ(mf["thread"], "compute");
  expect_per_step(mf, 9, 300, 0.6, 2);
  EXPECT_TRUE(report.rows[1]["gflops"].is_null());
  const nlohmann::json& rest = report.rows[2];
  EXPECT_EQ(rest["op"], kNotInAnOp);
  EXPECT_NEAR(rest["ms_per_step"].get<double>(), 100, 1e-9);
  EXPECT_NEAR(rest["share"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(report.rows[3]["op"], "reduce_add");
  EXPECT_EQ(report.rows[3]["thread"], "comm");
  EXPECT_DOUBLE_EQ(report.rows[3]["ms_per_step"].get<double>(), 50);
  const std::string text = text_of(report);
  EXPECT_NE(text.find("50.0%"), std::string::npos) << text;  // 2 GFLOP/s of a 4 GFLOP/s peak
  EXPECT_NE(text.find("reduce_add (comm thread)"), std::string::npos) << text;
  EXPECT_NE(text.find("total"), std::string::npos) << text;
}

// The shape rows follow the table under their op's name, with the same per-step figures and the shape.
TEST(OpTimesReport, ShapeRowsFollowTheTable) {
  const std::vector<OpTimeRow> rows = {{"matmul_forward", false, 18, 0.6, 1.2e9, ""}};
  const std::vector<OpTimeRow> shapes = {{"matmul_forward", false, 16, 0.4, 0.8e9, "64×8→12"},
                                         {"matmul_forward", false, 2, 0.2, 0.4e9, "64×8→50257"}};
  const OpTimesReport report = op_times_report(rows, 2, 1.0, 4e9, shapes);
  ASSERT_EQ(report.shape_rows.size(), 2u);
  const nlohmann::json& head = report.shape_rows[1];
  EXPECT_EQ(head["op"], "matmul_forward");
  EXPECT_EQ(head["shape"], "64×8→50257");
  expect_per_step(head, 1, 100, 0.2, 2);
  const std::string text = text_of(report);
  const std::size_t by_shape = text.find("by shape"), total = text.find("total");
  ASSERT_NE(by_shape, std::string::npos) << text;
  EXPECT_LT(total, by_shape) << text;
  EXPECT_NE(text.find("64×8→50257", by_shape), std::string::npos) << text;
  EXPECT_EQ(report.rows.size(), 2u);  // the table's rows: matmul_forward and "not in an op", unchanged
}

TEST(OpTimesReport, NoTimedStep) {
  const OpTimesReport report = op_times_report({}, 0, 0, 1e9);
  EXPECT_TRUE(report.rows.empty());
  ASSERT_EQ(report.lines.size(), 1u);
}

}  // namespace
}  // namespace dptrain
