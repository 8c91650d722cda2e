// The --op-times table: where a training step's time goes, per Backend operation (op_timing_backend.hpp), as
// printed lines and the summary record's "op_times" rows. Pure: the trainer collects, prints and writes.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dptrain/compute/op_timing_backend.hpp"

namespace dptrain {

inline constexpr const char* kNotInAnOp = "not in an op";

struct OpTimesReport {
  std::vector<std::string> lines;
  // [{"op", "thread": "compute"|"comm", "calls_per_step", "ms_per_step", "share", "gflops"}]: the compute
  // thread's operations longest first, then "not in an op" (the step's time outside them), so that the compute
  // rows' shares sum to 1; then the comm thread's operations, whose share of the step overlaps the others.
  nlohmann::json rows = nlohmann::json::array();
  // The same fields and "shape", for the GEMM-bearing ops by shape (OpTimes::shape_rows), in op order.
  nlohmann::json shape_rows = nlohmann::json::array();
};

// `rows` accumulated over `steps` timed steps that took `step_seconds` in all; peak_flops per rank (for the
// share of peak of the operations with FLOPs). `shape_rows` (OpTimes::shape_rows) follow the table in a second one.
OpTimesReport op_times_report(const std::vector<OpTimeRow>& rows, int steps, double step_seconds, double peak_flops,
                              const std::vector<OpTimeRow>& shape_rows = {});

}  // namespace dptrain
