// The training loop of dptrain: set-up, the cross-rank agreement, and the steps with their evaluations, checks
// and checkpoints (the per-step report is in step_report.cpp, the end-of-run summary in summary_writer.cpp).
#include "dptrain/train/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include "dptrain/comm/collective_skew.hpp"
#include "dptrain/core/atomic_file.hpp"
#include "dptrain/core/available_memory.hpp"
#include "dptrain/core/cpu_info.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/core/timer.hpp"
#include "dptrain/cost/hardware.hpp"
#include "dptrain/train/checkpoint.hpp"
#include "dptrain/train/checkpoint_directory.hpp"
#include "dptrain/train/memory_estimate.hpp"
#include "dptrain/train/memory_report.hpp"
#include "dptrain/train/op_times_report.hpp"
#include "dptrain/train/option_table.hpp"
#include "dptrain/train/rank_agreement.hpp"
#include "dptrain/train/schedule.hpp"
#include "dptrain/train/step_report.hpp"
#include "dptrain/train/stop_signal.hpp"
#include "dptrain/train/trace_writer.hpp"

namespace dptrain {

namespace {

// A NaN as "nan" whatever its sign bit (a square root of a NaN sum prints "-nan" otherwise).
double unsigned_nan(double x) { return std::isnan(x) ? std::fabs(x) : x; }

}  // namespace

Trainer::Trainer(const TrainOptions& options, const MpiWorld& world) : options_(options), world_(world) {
  validate(options_, world_.size());
  overlap_choice_ = OverlapChoice(options_.no_overlap ? "off" : options_.overlap);
  placement_ = placement_from_environment(world_.device_rank(), world_.device_size());
  // --cpu-gemm auto: OpenBLAS until connect() has timed the libraries on every rank (before the first GEMM).
  cpu_gemm_ = std::make_shared<CpuGemm>(make_cpu_gemm(initial_cpu_gemm(options_.cpu_gemm, host_cpu_)));
  backend_ = make_backend(options_.device == "auto" ? auto_backend_name() : options_.device, placement_, cpu_gemm_,
                          options_.attention, options_.matmul_epilogues == "fused");
  if (options_.op_times) {  // made on this thread, the compute thread: the comm executor's calls get rows apart
    op_times_ = std::make_shared<OpTimes>();
    backend_ = make_op_timing_backend(std::move(backend_), op_times_);
  }
  const std::string unsupported = world_.size() > 1 ? multi_rank_unsupported(backend_->name()) : "";
  require(unsupported.empty(), "--device {}: {} ranks: {}; run one rank per job on a GPU, or --device cpu",
          backend_->name(), world_.size(), unsupported);
  // Each rank's own environment, refused here where the ranks agree on set-up errors: refused first in connect(),
  // the rank would leave the others in a collective it never joins.
  if (std::string why = transport_environment_problem(backend_->name() == "cuda" && world_.size() > 1); !why.empty())
    throw UserError(why);
  // Before anything large is allocated: a run that cannot fit is refused with the estimate and what is available
  // (the GPU's free memory, shared by the ranks placed on it; else the host's, shared by the node's ranks).
  const bool own_memory = backend_->device().memory_free() > 0;
  require_memory_fits(estimate_run_memory(options_, world_.size(), footprint_of(*backend_, options_.model)), options_,
                      own_memory ? placement_.ranks_per_gpu : world_.local_size(),
                      own_memory ? double(backend_->device().memory_free()) : available_memory_bytes());
}

void Trainer::prepare() {
  threads_ = options_.threads > 0
                 ? options_.threads
                 : std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, world_.local_size()));
  omp_set_num_threads(threads_);
  // From here a stop signal is a request (the set-up's probes and calibration included): run() stops before its
  // first step if one came during set-up.
  catch_stop_signals(threads_);

  data_ = std::make_unique<Dataset>(load_corpus(options_.data), options_.val_fraction, options_.model.seq,
                                    options_.model.vocab);
  local_windows_ = std::size_t(options_.batch / world_.size());
  windows_.resize(local_windows_ * std::size_t(options_.model.seq + 1));

  RankGroup group;
  group.rank = world_.rank();
  group.size = world_.size();
  group.sum_scalar = [this](double x) { return world_.sum_in_rank_order(x); };
  group.max_scalar = [this](double x) { return world_.max_over_ranks({x})[0]; };
  group.abort = [this](const std::string& message) {
    if (transport_.transport) transport_.transport->abort();  // NCCL: ncclCommAbort before the job ends
    world_.abort(message, kExitCommunication);
  };
  const EngineSettings settings{.grad_dtype = options_.grad_dtype,
                                .zero_stage = options_.zero,
                                .bucket_mb = options_.bucket_mb,
                                .overlap = overlap_choice_.overlap_for_step(0),
                                .grad_accum = options_.grad_accum,
                                .comm_timeout_s = options_.comm_timeout};
  engine_ =
      std::make_unique<DataParallelEngine>(options_.model, *backend_, std::move(group), settings, local_windows_);
  if (!options_.resume.empty()) {
    const ResumePoint resumed = load_checkpoint(options_.resume, *engine_, options_);
    first_step_ = last_step_ = resumed.step;
    changed_since_checkpoint_ =
        changed_since_checkpoint(resumed.meta.value("training", nlohmann::json::object()), options_);
    // The data's path is recorded apart from the options ("data" holds where the batches continue).
    const nlohmann::json data = resumed.meta.value("data", nlohmann::json::object());
    if (data.is_object() && data.contains("path") && data["path"].is_string() && data["path"] != options_.data)
      changed_since_checkpoint_.push_back(
          fmt::format("--data {} (was {})", options_.data, data["path"].get<std::string>()));
  } else {
    engine_->initialise(options_.seed);
  }
  // Before step 1: an unwritable, full or already used --save must not surface at the first save.
  if (!options_.save.empty() && world_.rank() == 0)
    prepare_save_directory(options_, engine_->layout().total(), engine_->layout().entries().size() + 3, save_lock_);
  else if (!options_.save.empty())
    require_save_writable(options_, world_.rank());
  if (!options_.link.empty()) {
    link_ = link_from_spec(options_.link);
    const double wire_bytes = double(element_size(options_.grad_dtype));
    // Milliseconds, summed over the units' calls (an α each: at most a whole all-reduce per unit; three kinds of
    // call per micro-step under ZeRO-3), the micro-steps and the steps.
    const double sums =
        1e3 * double(engine_->plan().units().size()) * 3.0 * options_.grad_accum * std::max(1, options_.steps);
    require_finite_model_times(link_, world_.size(), wire_bytes * double(engine_->layout().total()), sums);
  }
  // Only checked here: a fresh run's log is truncated when the steps start (run()), so that bad input found
  // later in the set-up, on any rank, leaves an existing log as it was.
  if (!options_.log.empty() && world_.rank() == 0) require_log_writable(options_.log);
  if (!options_.trace.empty() && world_.rank() == 0) {
    // Written at the end: a wrong path must not surface after the whole run.
    const std::string problem = atomic_write_problem(options_.trace);
    require(problem.empty(), "--trace: cannot write '{}': {}", options_.trace, problem);
  }
}

Trainer::~Trainer() = default;

void Trainer::connect() {
  // The options every rank must share (option_table.cpp says which may differ and why), then what they read:
  // the training tokens (compared by content: hosts may mount the corpus at different paths) and the step the
  // checkpoint resumes from (the same path may hold another checkpoint on another host).
  std::vector<AgreedValue> values = values_every_rank_shares(options_);
  const std::string tokens =
      fmt::format("{} tokens, fnv1a {:016x}", data_->train_tokens() + data_->val_tokens(), data_->tokens_hash());
  values.push_back({"--data", tokens, fmt::format("{} ({})", options_.data, tokens)});
  // --device auto may resolve differently on hosts with and without GPUs.
  values.push_back({"--device", backend_->name(), fmt::format("{} ({})", options_.device, backend_->name())});
  values.push_back({"--resume", std::to_string(first_step_),
                    fmt::format("{} at step {}", options_.resume.empty() ? "none" : options_.resume, first_step_)});
  // --cpu-gemm by-cpu may resolve differently on hosts with different CPUs.
  if (backend_->name() == "cpu")
    values.push_back({"--cpu-gemm", cpu_gemm_->name, fmt::format("{} ({})", options_.cpu_gemm, cpu_gemm_->name)});
  world_.watched("the comparison of options across ranks", [&] { require_same_on_every_rank(world_, values); });
  if (backend_->name() == "cpu") {  // on every rank or none: the device and --cpu-gemm agree by now
    cpu_gemm_choice_ = choose_cpu_gemm(
        options_.cpu_gemm, options_.model, threads_,
        [this](std::vector<double> v) {
          world_.watched("the exchange of CPU GEMM timings", [&] { v = world_.max_over_ranks(std::move(v)); });
          return v;
        },
        host_cpu_);
    if (options_.cpu_gemm == "auto") *cpu_gemm_ = make_cpu_gemm(cpu_gemm_choice_.library);
  }
  world_.watched("the transport's connection", [&] {
    transport_ = connect_run_transport(*backend_, parse_algorithm(options_.allreduce), engine_->comm_stream(),
                                       placement_.gpu(), options_.comm_timeout, options_.nccl_blocking);
  });
  if (options_.link.empty()) {
    const std::size_t gradient_bytes = engine_->layout().total() * element_size(options_.grad_dtype);
    link_ = calibrate_link(
        *transport_.collectives, backend_->device(), std::min<std::size_t>(gradient_bytes, 16u << 20), 2.0,
        [this](const std::string& what, const std::function<void()>& exchange) { world_.watched(what, exchange); });
  }
  // MFU's peak: the flag, else a known GPU's datasheet figure, else a GEMM probe on every rank (on the cpu they
  // share the node's cores, as in training); the model uses the mean.
  const cost::DevicePreset* gpu =
      backend_->name() == "cpu" ? nullptr : cost::device_preset_for_gpu(backend_->device().name());
  const double peak = options_.peak_tflops > 0 ? options_.peak_tflops * 1e12
                      : gpu                    ? gpu->peak_flops
                                               : backend_->measure_gemm_flops();
  peak_source_ = options_.peak_tflops > 0 ? "--peak-tflops"
                 : gpu                    ? fmt::format("{} datasheet, dense BF16", gpu->label)
                                          : fmt::format("{} GEMM probe", backend_->name());
  world_.watched("the exchange of GEMM peaks", [&] { peak_flops_ = world_.sum_in_rank_order(peak) / world_.size(); });
  engine_->set_collectives(transport_.collectives.get());
  // Last, after every collective of the set-up: rank 0 makes --save DIR (the ranks agree on it by now) and locks
  // it, so that another run on the same directory, one started at the same moment too, is refused here, before
  // step 1, rather than at its first save after its training (or, racing it, the two mixing their checkpoints).
  if (!options_.save.empty() && world_.rank() == 0) {
    std::error_code error;
    std::filesystem::create_directories(options_.save, error);
    require(!error, "--save: cannot create '{}': {}", options_.save, error.message());
    save_lock_.acquire(options_.save);
  }
}

void Trainer::say(const std::string& line) const {
  if (world_.rank() == 0) fmt::print("{}\n", line);
  std::fflush(stdout);
}

void Trainer::complain(const std::string& line) const {
  if (world_.rank() == 0) fmt::print(stderr, "{}\n", line);
  std::fflush(stderr);
}

std::string Trainer::save(int step) {
  // The save's exchanges wait for rank 0's writing (the weights, and at stage 0 all of the optimizer state: 14 bytes
  // a parameter): --comm-timeout plus that much at 10 MB/s, a slow network file system's rate, so that a large
  // checkpoint is not ended as a stalled rank.
  const WaitAllowance writing{.seconds = double(engine_->layout().total()) * 14 / 10e6,
                              .for_what = "rank 0's writing at 10 MB/s"};
  // The first save of a run started with --overwrite removes the earlier run's checkpoints once it is in place.
  const std::string where = save_checkpoint(
      options_.save, *engine_, options_, step,
      {.barrier =
           [this, writing] {
             engine_->run_on_comm_executor([&] { world_.barrier(); }, "the checkpoint's barrier", writing);
           },
       .gather_to_first =
           [this, writing](const std::string& text) {
             std::vector<std::string> texts;
             engine_->run_on_comm_executor([&] { texts = world_.gather_to_first(text); },
                                           "the checkpoint's gather of shard records", writing);
             return texts;
           }},
      !saved_once_);
  saved_once_ = true;
  if (!options_.quiet) say(fmt::format("dptrain | saved checkpoint {}", where));
  return where;
}

void Trainer::fill_local_windows(int step) {
  const WindowRange mine =
      rank_windows(std::size_t(options_.batch), std::size_t(world_.size()), std::size_t(world_.rank()));
  const std::size_t W = std::size_t(options_.model.seq + 1);
  for (std::size_t i = mine.begin; i < mine.end; ++i)
    data_->train_window(options_.seed, std::uint64_t(step), i, windows_.data() + (i - mine.begin) * W);
}

Trainer::Evaluation Trainer::evaluate() {
  const std::size_t E = std::size_t(options_.eval_windows), R = std::size_t(world_.size());
  const auto [begin, end] = rank_windows(E, R, std::size_t(world_.rank()));
  const std::size_t W = std::size_t(options_.model.seq + 1);
  const std::size_t round = local_windows_;                          // --batch / ranks, the same on every rank
  const std::size_t rounds = ((E + R - 1) / R + round - 1) / round;  // for the rank with the most windows
  // The stop requests are exchanged after every 64 windows a rank or more (one small collective each): for a few
  // windows a step, after every round it would cost as much as the rounds.
  constexpr std::size_t kWindowsBetweenStopChecks = 64;
  const std::size_t rounds_per_check = (kWindowsBetweenStopChecks + round - 1) / round;
  double local = 0;
  for (std::size_t k = 0; k < rounds; ++k) {
    const std::size_t from = std::min(end, begin + k * round), to = std::min(end, from + round);
    for (std::size_t i = from; i < to; ++i) data_->val_window(i, E, windows_.data() + (i - from) * W);
    // Every rank calls loss_sum, windows or not: from ZeRO-3 on it gathers the weights.
    local += engine_->loss_sum(windows_.data(), to - from);
    if (k + 1 == rounds || (k + 1) % rounds_per_check != 0) continue;
    if (const int stop = agreed_stop_signal(); stop != 0) return {.loss = std::nullopt, .stop_signal = stop};
  }
  double total = 0;
  engine_->run_on_comm_executor([&] { total = world_.sum_in_rank_order(local); }, "the sum of the validation loss");
  return {.loss = total / double(E * std::size_t(options_.model.seq))};
}

double Trainer::trace_origin() {
  const double mine = now_seconds();
  double origin = mine;
  engine_->run_on_comm_executor([&] { origin = world_.node_minimum(mine); }, "the exchange of trace origins");
  return origin;
}

int Trainer::agreed_stop_signal() {
  int signal = 0;
  engine_->run_on_comm_executor([&] { signal = int(world_.max_over_ranks({double(stop_signal_received())})[0]); },
                                "the exchange of stop requests");
  return signal;
}

void Trainer::check_weights_agree(int step) {
  const std::uint64_t hash = engine_->weights_hash();
  std::vector<int> differing;
  engine_->run_on_comm_executor([&] { differing = world_.ranks_differing_from_first(hash); },
                                "the comparison of weight hashes");
  if (!differing.empty())
    world_.abort(fmt::format("weights differ across ranks after step {}: rank(s) {} disagree with rank 0", step,
                             fmt::join(differing, ", ")),
                 1);
}

int Trainer::run() {
  const ModelConfig& m = options_.model;
  const std::size_t tokens_per_step = std::size_t(options_.batch) * std::size_t(m.seq);
  const UnitPlan& plan = engine_->plan();
  say(fmt::format("dptrain | {} | data: {} ({} train, {} val tokens)", describe(m), data_->description(),
                  data_->train_tokens(), data_->val_tokens()));
  say(fmt::format(
      "dptrain | {} rank(s) × {} thread(s) | batch {} × {} = {} tokens/step in {} micro-step(s) | grad {} "
      "| all-reduce {} over {}",
      world_.size(), threads_, options_.batch, m.seq, tokens_per_step, options_.grad_accum,
      dtype_name(options_.grad_dtype), options_.allreduce, transport_.name));
  // The trial's steps, counted in this run (a resumed run times it again); a run shorter than it keeps overlap on.
  const int run_steps = options_.steps - first_step_, trial_end = 1 + 2 * OverlapChoice::kTrialPairs;
  const std::string auto_text =
      run_steps >= trial_end
          ? fmt::format("auto (on and off timed alternately on this run's steps 2-{}, the faster kept)", trial_end)
          : fmt::format(
                "auto (this run's {} step(s) are fewer than the trial's {}: on and off alternately after "
                "step 1, no choice made)",
                run_steps, trial_end);
  say(fmt::format("dptrain | ZeRO {} | {} units (bucket {} MiB) | overlap {}", options_.zero, plan.units().size(),
                  options_.bucket_mb, overlap_choice_.mode() == "auto" ? auto_text : overlap_choice_.mode()));
  // Tenths of a GFLOP/s, or two significant digits below 0.1 (--peak-tflops 1e-6 is 0.001).
  const double peak_gflops = peak_flops_ / 1e9;
  const std::string peak =
      peak_gflops >= 0.1 ? fmt::format("{:.1f}", peak_gflops) : fmt::format("{:.2g}", peak_gflops);
  say(fmt::format("dptrain | device {} ({}){} | attention {} | link {} | peak {} GFLOP/s per rank ({})",
                  backend_->name(),
                  backend_->name() == "cpu" ? "sgemm " + cpu_gemm_choice_.description() : backend_->device().name(),
                  backend_->name() == "cpu" ? " on " + host_cpu_.description() : "", backend_->attention_name(),
                  link_.description, peak, peak_source_));
  RunShape shape{.flops_per_step = training_flops_per_token(m) * double(tokens_per_step),
                 .tokens_per_step = tokens_per_step,
                 .steps = options_.steps,
                 .ranks = world_.size(),
                 .peak_flops = peak_flops_,
                 .overlap = overlap_choice_.overlap_for_step(0)};
  if (first_step_ > 0)
    say(fmt::format("dptrain | resumed from '{}' at step {}{}", options_.resume, first_step_,
                    changed_since_checkpoint_.empty()
                        ? ""
                        : fmt::format("; changed since it was saved: {} (the run follows the new values from here)",
                                      fmt::join(changed_since_checkpoint_, ", "))));
  Timeline& timeline = engine_->timeline();
  timeline.record(!options_.trace.empty());
  world_.watched("the barrier before step 1", [&] { world_.barrier(); });
  timeline.set_origin(trace_origin());  // one origin for the events of every rank of a host
  if (const int setup_stop = agreed_stop_signal(); setup_stop != 0) {
    complain(fmt::format("dptrain: stopped by {} during set-up, before step {}; nothing trained, nothing saved",
                         stop_signal_name(setup_stop), first_step_ + 1));
    return 128 + setup_stop;
  }
  // Opened (a fresh run's truncated) only now: a stop during set-up leaves an existing log as it was.
  if (!options_.log.empty() && world_.rank() == 0) log_ = MetricsLog(options_.log, !options_.resume.empty());
  if (first_step_ == options_.steps) {  // a finished run resumed as it was (a job started again): nothing to do
    say(fmt::format("dptrain | the checkpoint in '{}' is at step {} = --steps: nothing to train (raise --steps to "
                    "continue)",
                    options_.resume, first_step_));
    return 0;
  }

  RunTotals totals;
  // A non-finite step or validation loss ends the run after loop step `done`: its checkpoint with --save (for a
  // resume with another --lr, say, instead of a repeat), the summary, and the stop line on stderr; exit 3.
  const auto stop_non_finite = [&](int done, const std::string& reason, const std::string& line) {
    if (!options_.save.empty()) save(done);
    finish(shape, totals, reason);
    complain(line);
    return kExitNonFinite;
  };
  int skipped_in_a_row = 0;
  // The loop step, not the engine's optimizer step, drives the schedule, the data and the checkpoints' names:
  // a skipped non-finite step takes no update but is a step all the same.
  for (int step = first_step_; step < options_.steps; ++step) {
    fill_local_windows(step);
    last_step_ = step + 1;
    const double lr = learning_rate(step, options_.steps, options_.warmup, options_.lr, options_.min_lr);
    const int index = step - first_step_;  // of this run's steps
    shape.overlap = overlap_choice_.overlap_for_step(index);
    engine_->set_overlap(shape.overlap);
    // --op-times: the steps after the run's first (which warms caches and thread pools), the step alone.
    const bool timed = op_times_ && step > first_step_;
    if (timed) op_times_->set_enabled(true);
    engine_->set_timeline_step(step + 1);  // the loop's step: a skipped step does not advance the optimizer's
    Stopwatch watch;
    const StepResult result =
        engine_->step(windows_.data(), std::size_t(options_.batch), {lr, options_.weight_decay, options_.grad_clip});
    const double seconds = watch.seconds();
    if (timed) {
      op_times_->set_enabled(false);
      op_times_seconds_ += seconds;
      ++op_times_steps_;
    }
    std::vector<CommRecord> calls = transport_.collectives->log().take();
    // Outside the timed step: its skew and transfer (collective_skew.hpp), and whether a stop signal reached any
    // rank (then every rank stops after this same step). On the comm executor, under --comm-timeout's watch, as
    // every collective between steps: a rank that stops or dies there ends the job, it does not hang it.
    int stop_signal = 0;
    double slowest_seconds = seconds;  // over ranks: --overlap auto decides alike on every rank
    engine_->run_on_comm_executor(
        [&] {
          split_skew(calls, world_.all_gather(entry_times(calls)), world_.size());
          const std::vector<double> maxima = world_.max_over_ranks({double(stop_signal_received()), seconds});
          stop_signal = int(maxima[0]);
          slowest_seconds = maxima[1];
        },
        "the exchange of entry times, step times and stop requests");
    // Said after this step's line: the step was the last of the trial, run with the setting it tried.
    const std::optional<std::string> overlap_chosen = overlap_choice_.record(index, slowest_seconds);
    // A skipped step's collectives stay out of the summary's table, as its times stay out of the per-step means.
    CollectiveTable skipped_collectives;
    const StepComm comm = account_step_comm(calls, result.unit_backward_s, shape.overlap, world_.size(), link_.link,
                                            result.finite ? totals.collectives : skipped_collectives);
    const std::string skipped =
        result.finite ? std::string()
                      : fmt::format("dptrain: step {}: loss {} and gradient norm {} are not finite", step + 1,
                                    unsigned_nan(result.loss), unsigned_nan(result.grad_norm));
    skipped_in_a_row = result.finite ? 0 : skipped_in_a_row + 1;
    if (!result.finite && (!options_.skip_nonfinite || skipped_in_a_row >= options_.max_skipped)) {
      if (overlap_chosen) say(*overlap_chosen);
      // The step took no update: its checkpoint holds the weights of the last finite step.
      return stop_non_finite(
          step + 1, "a non-finite step",
          options_.skip_nonfinite
              ? fmt::format("{}; stopping after {} consecutive skipped steps (--max-skipped {})", skipped,
                            skipped_in_a_row, options_.max_skipped)
              : fmt::format("{}; stopping (use --skip-nonfinite to skip such steps)", skipped));
    }
    if (result.finite) totals.add_step(seconds, result, comm);
    const bool last = step + 1 == options_.steps;
    std::optional<double> val_loss;
    bool evaluation_cut = false;  // a stop signal ended this step's evaluation early: the run stops, also if last
    const bool evaluating = last || (options_.eval_every > 0 && (step + 1) % options_.eval_every == 0);
    const bool checking = last || (options_.check_every > 0 && (step + 1) % options_.check_every == 0);
    if (evaluating) {
      // In the trace, after the step: what the validation's collectives (stage 3's gathers) happen inside.
      const double evaluation_start = timeline.now();
      const Evaluation evaluation = evaluate();
      timeline.add({TimelineEvent::Track::compute, "validation", evaluation_start, timeline.now(), step + 1});
      if (evaluation.loss)
        totals.last_val = val_loss = evaluation.loss;
      else
        stop_signal = evaluation.stop_signal, evaluation_cut = true;
    }
    if (checking) {
      const double check_start = timeline.now();
      check_weights_agree(step + 1);
      timeline.add({TimelineEvent::Track::compute, "weight check", check_start, timeline.now(), step + 1});
    }

    if (result.finite) {
      const StepReport report = step_report(shape, step + 1, lr, seconds, result, comm, val_loss);
      if (!options_.quiet) say(report.line);
      write_log(report.record);
    } else {
      say(skipped + "; step skipped" + (val_loss ? fmt::format(" | val {:.4f}", *val_loss) : std::string()));
    }
    if (overlap_chosen && !last) say(*overlap_chosen);  // after the last step, "from here" is nowhere

    if (val_loss && !std::isfinite(*val_loss) && !options_.skip_nonfinite) {
      // Weights whose training loss is still finite but whose validation loss is not have diverged.
      return stop_non_finite(step + 1, "a non-finite validation loss",
                             fmt::format("dptrain: step {}: validation loss {} is not finite; stopping (use "
                                         "--skip-nonfinite to go on)",
                                         step + 1, unsigned_nan(*val_loss)));
    }
    // A stop request that came during this step's validation, weight check or save is agreed right after it (one
    // small exchange), not at the end of one more step, and so one more save.
    if (stop_signal == 0 && !last && (evaluating || checking)) stop_signal = agreed_stop_signal();
    const bool save_due = last || (options_.save_every > 0 && (step + 1) % options_.save_every == 0);
    const bool saving = !options_.save.empty() && (save_due || stop_signal != 0);
    if (saving) save(step + 1);
    if (stop_signal == 0 && !last && saving) stop_signal = agreed_stop_signal();
    transport_.collectives->log().take();  // evaluation, checks and checkpoints are not part of a step
    if (stop_signal != 0 && (!last || evaluation_cut)) {
      finish(shape, totals, stop_signal_name(stop_signal));
      complain(fmt::format("dptrain: stopped by {} after step {} of {}{}; {}", stop_signal_name(stop_signal),
                           step + 1, options_.steps, evaluation_cut ? " (its validation loss cut short)" : "",
                           options_.save.empty() ? std::string("nothing saved (no --save)")
                                                 : fmt::format("checkpoint saved in '{}' (continue with --resume {})",
                                                               options_.save, options_.save)));
      return 128 + stop_signal;
    }
  }
  // A log that could not be written (a full disk) did not stop the training; it makes the exit code 2.
  return finish(shape, totals, "") ? kExitBadInput : 0;
}

void Trainer::write_log(const nlohmann::json& record) {
  if (const std::string error = log_.write(record); !error.empty())
    complain(fmt::format("dptrain: {}; the run goes on without its log and will exit with 2", error));
}

// The summary (tables, the JSONL record) and the trace of the steps run, also when a signal or a non-finite step
// ends the run early (`stopped` says which; empty at the end). Collective: every rank stops after the same step.
// Returns whether rank 0's --log failed, on every rank.
bool Trainer::finish(RunShape& shape, const RunTotals& totals, const std::string& stopped) {
  shape.overlap = overlap_choice_.overlap();
  summarise(shape, totals, stopped);
  gather_trace();
  bool log_failed = false;
  engine_->run_on_comm_executor([&] { log_failed = world_.max_over_ranks({double(log_.failed())})[0] > 0; },
                                "the exchange of the log's state");
  return log_failed;
}

void Trainer::summarise(const RunShape& run, const RunTotals& totals, const std::string& stopped) {
  // The memory figures and, last, the bytes sent per step: this rank's and the maximum over ranks.
  std::vector<double> mine =
      memory_figures(engine_->memory(), peak_resident_bytes(), double(backend_->device().memory_in_use()));
  mine.push_back(totals.steps ? double(totals.bytes_sent) / totals.steps : 0.0);
  std::vector<double> largest;
  engine_->run_on_comm_executor([&] { largest = world_.max_over_ranks(mine); }, "the exchange of memory figures");
  const double bytes_sent_largest = largest.back();
  mine.pop_back(), largest.pop_back();
  RunSummary summary =
      run_summary({.options = options_,
                   .run = run,
                   .totals = totals,
                   .plan = engine_->plan(),
                   .parameters = engine_->layout().total(),
                   .link = link_,
                   .memory_mine = mine,
                   .memory_largest = largest,
                   .bytes_sent_largest = bytes_sent_largest,
                   .first_step = first_step_,
                   .last_step = last_step_,
                   .threads = threads_,
                   .overlap_choice = overlap_choice_.summary(),
                   .cpu_gemm = backend_->name() == "cpu" ? cpu_gemm_choice_.summary() : nlohmann::json(),
                   .attention = backend_->attention_name(),
                   .matmul_epilogues = backend_->matmul_epilogues(),
                   .host_cpu = host_cpu_});
  for (const std::string& line : summary.lines) say(line);
  if (op_times_) {  // rank 0's own operations
    const OpTimesReport report = op_times_report(op_times_->rows(), op_times_steps_, op_times_seconds_, peak_flops_,
                                                 op_times_->shape_rows());
    for (const std::string& line : report.lines) say(line);
    summary.record["op_times"] = report.rows;
    summary.record["op_times_by_shape"] = report.shape_rows;
  }
  if (!stopped.empty()) summary.record["stopped_by"] = stopped;
  write_log(summary.record);
}

void Trainer::gather_trace() {
  if (options_.trace.empty()) return;
  const std::string mine = trace_events(engine_->timeline().take(), world_.rank()).dump();
  std::vector<std::string> events;  // watched, as every exchange between steps: a rank that stops ends the job
  engine_->run_on_comm_executor([&] { events = world_.gather_to_first(mine); }, "the gather of trace events");
  if (world_.rank() == 0) {
    write_trace(options_.trace, events);
    say(fmt::format("dptrain | trace of {} rank(s) written to {}", world_.size(), options_.trace));
  }
}

}  // namespace dptrain
