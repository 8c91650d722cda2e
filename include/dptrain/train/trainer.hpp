// The training loop: set-up (validation, data, model, resume) and the steps with evaluation, logging,
// cross-rank weight checks and checkpoints.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "dptrain/comm/collectives.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/op_timing_backend.hpp"
#include "dptrain/core/cpu_info.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/dp/engine.hpp"
#include "dptrain/train/cpu_gemm_choice.hpp"
#include "dptrain/train/data.hpp"
#include "dptrain/train/link_model.hpp"
#include "dptrain/train/metrics_log.hpp"
#include "dptrain/train/mpi_world.hpp"
#include "dptrain/train/options.hpp"
#include "dptrain/train/overlap_choice.hpp"
#include "dptrain/train/run_transport.hpp"
#include "dptrain/train/save_lock.hpp"
#include "dptrain/train/summary_writer.hpp"

namespace dptrain {

inline constexpr int kExitNonFinite = 3;

class Trainer {
 public:
  // Everything that can fail on bad input happens here, in prepare() or in connect(), before the first step. The
  // constructor checks the options, the environment and the device, and that the run fits in the memory left (the
  // GPU's, or the host's, shared with the ranks placed there) before anything large is allocated. Local to this
  // rank (no communication), so a rank that fails here cannot leave the others waiting. Throws UserError.
  Trainer(const TrainOptions& options, const MpiWorld& world);
  ~Trainer();

  // Local to this rank, called once every rank's constructor succeeded (so that no rank allocates its model while
  // another still measures the memory left, which would count it twice): loads the data, allocates the model and
  // its state, resumes or initialises them, checks --save, --link, --log and --trace. Throws UserError.
  void prepare();

  // Collective, once every rank's set-up succeeded: checks that every rank was started with the same options,
  // the same training tokens and the same resume step (a rank with another --steps, --save or --link would
  // leave the others waiting in a collective; UserError naming the first option that differs, the rank and both
  // values), then opens the transport and the collectives; last, rank 0 makes --save DIR and takes its lock
  // (SaveLock: a directory another run holds is refused here, before step 1).
  void connect();

  // Runs the remaining steps. Returns the exit code: 0; kExitNonFinite when a step was not finite and
  // --skip-nonfinite was not given, or --max-skipped steps in a row were skipped (a checkpoint of that step is
  // saved first with --save); 128 + the signal after SIGTERM or SIGINT (stop_signal.hpp: the step finishes, every
  // rank stops after the same step and a checkpoint is saved with --save). A skipped step still counts as a loop
  // step: it advances the schedule and the data, and evaluations, checks and checkpoints due after it happen.
  int run();

 private:
  // The validation loss over --eval-windows fixed windows, in rounds of one step's share of windows per rank (the
  // buffer windows_ again): every 64 windows a rank the ranks agree whether a stop signal arrived, so that a long
  // evaluation neither holds up a stop nor needs memory for all its windows at once. Collective.
  struct Evaluation {
    std::optional<double> loss;  // absent when a signal cut the evaluation short
    int stop_signal = 0;         // that signal
  };
  Evaluation evaluate();
  int agreed_stop_signal();  // collective: a stop signal any rank received (0: none), the same on every rank
  // Collective, after a barrier: the trace's time origin, the earliest reading of the ranks of this rank's host (the
  // steady clock is the host's, so they share it exactly and no event is before it; hosts are aligned by the
  // barrier alone).
  double trace_origin();
  void check_weights_agree(int step);
  void fill_local_windows(int step);
  void say(const std::string& line) const;       // rank 0 prints
  void complain(const std::string& line) const;  // rank 0 prints to stderr: why the run stops early
  std::string save(int step);                    // collective: a checkpoint of loop step `step`; its folder
  bool finish(RunShape& shape, const RunTotals& totals, const std::string& stopped);  // summary and trace
  void write_log(const nlohmann::json& record);  // rank 0's --log; a failure is said once, on stderr
  // Collective (memory maximum over ranks); `stopped`: what ended the run early ("SIGTERM"), or empty.
  void summarise(const RunShape& run, const RunTotals& totals, const std::string& stopped);
  void gather_trace();  // collective when --trace

  TrainOptions options_;
  const MpiWorld& world_;
  bool saved_once_ = false;  // a checkpoint of this run is in place (--overwrite clears the old ones after it)
  std::unique_ptr<Dataset> data_;
  Placement placement_;  // the rank's node and GPU
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<OpTimes> op_times_;  // --op-times: backend_ times every operation into it
  int op_times_steps_ = 0;             // the steps timed, and their wall time
  double op_times_seconds_ = 0;
  RunTransport transport_;
  std::unique_ptr<DataParallelEngine> engine_;
  MetricsLog log_;
  LinkSource link_;
  double peak_flops_ = 0;  // per rank
  std::string peak_source_;
  SaveLock save_lock_;  // rank 0's lock of --save DIR, from the end of connect()
  int first_step_ = 0;  // loop steps done before this run: the resumed checkpoint's step, or 0
  int last_step_ = 0;   // the last loop step run (taken or skipped), first_step_ before the first
  std::vector<std::string> changed_since_checkpoint_;  // "--steps 80 (was 50)": options a resumed run changed
  OverlapChoice overlap_choice_{"on"};
  std::shared_ptr<CpuGemm> cpu_gemm_;  // what the cpu backend multiplies with; set in connect() for auto
  CpuGemmChoice cpu_gemm_choice_;      // how it was chosen; unused on cuda
  CpuInfo host_cpu_ = host_cpu_info();  // named beside every figure
  int threads_ = 1;
  std::size_t local_windows_ = 0;
  std::vector<std::int32_t> windows_;  // [local_windows, Q+1]
};

}  // namespace dptrain
