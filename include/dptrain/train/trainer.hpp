// The training loop: set-up (validation, data, model, resume) and the steps with evaluation, logging,
// cross-rank weight checks and checkpoints.
#pragma once
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/comm/mpi_transport.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/dp/engine.hpp"
#include "dptrain/train/data.hpp"
#include "dptrain/train/link_model.hpp"
#include "dptrain/train/metrics_log.hpp"
#include "dptrain/train/mpi_world.hpp"
#include "dptrain/train/options.hpp"

namespace dptrain {

inline constexpr int kExitNonFinite = 3;

class Trainer {
 public:
  // Everything that can fail on bad input happens here or in connect(), before the first step. Local to this
  // rank (no communication), so a rank that fails here cannot leave the others waiting. Throws UserError.
  Trainer(const TrainOptions& options, const MpiWorld& world);
  ~Trainer();

  // Collective, once every rank's set-up succeeded: checks that every rank was started with the same options
  // (a rank with another --steps or --batch would leave the others waiting in a collective; UserError naming
  // the ranks that differ), then opens the transport and the collectives.
  void connect();

  // Runs the remaining steps. Returns the exit code (0, or kExitNonFinite when a step was not finite).
  int run();

 private:
  double evaluate();
  void check_weights_agree(int step);
  void fill_local_windows(int step);
  void say(const std::string& line) const;  // rank 0 prints
  nlohmann::json collectives_table();       // measured against modelled per collective and size; prints it
  // The step's collectives from the log: measured and modelled time, bytes, and the modelled exposed part.
  struct StepComm {
    double seconds = 0, model_seconds = 0, exposed_model_seconds = 0;
    std::uint64_t bytes_sent = 0;
  };
  StepComm account(const StepResult& result);

  TrainOptions options_;
  const MpiWorld& world_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<MpiTransport> transport_;
  std::unique_ptr<Collectives> collectives_;
  std::unique_ptr<DataParallelEngine> engine_;
  MetricsLog log_;
  LinkSource link_;
  double peak_flops_ = 0;  // per rank
  // Every collective of the timed steps summed per (operation, algorithm, size), for the summary table.
  struct CollectiveTotals {
    std::size_t calls = 0;
    std::uint64_t bytes = 0, bytes_sent = 0;
    double measured = 0, modelled = 0;  // seconds
  };
  std::map<std::tuple<CollectiveOp, Algorithm, std::size_t>, CollectiveTotals> collective_totals_;
  int threads_ = 1;
  std::size_t local_windows_ = 0;
  std::vector<std::int32_t> windows_;  // [local_windows, Q+1]
};

}  // namespace dptrain
