// The training loop: set-up (validation, data, model, resume) and the steps with evaluation, logging,
// cross-rank weight checks and checkpoints.
#pragma once
#include <memory>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/dp/engine.hpp"
#include "dptrain/train/data.hpp"
#include "dptrain/train/metrics_log.hpp"
#include "dptrain/train/mpi_world.hpp"
#include "dptrain/train/options.hpp"

namespace dptrain {

inline constexpr int kExitNonFinite = 3;

class Trainer {
 public:
  // Everything that can fail on bad input happens here, before the first step. Throws UserError.
  Trainer(const TrainOptions& options, const MpiWorld& world);
  ~Trainer();

  // Runs the remaining steps. Returns the exit code (0, or kExitNonFinite when a step was not finite).
  int run();

 private:
  double evaluate();
  void check_weights_agree(int step);
  void fill_local_windows(int step);
  void say(const std::string& line) const;  // rank 0 prints

  TrainOptions options_;
  const MpiWorld& world_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DataParallelEngine> engine_;
  MetricsLog log_;
  int threads_ = 1;
  std::size_t local_windows_ = 0;
  std::vector<std::int32_t> windows_;  // [local_windows, Q+1]
};

}  // namespace dptrain
