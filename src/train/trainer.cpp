// The training loop of dptrain.
#include "dptrain/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "dptrain/core/error.hpp"
#include "dptrain/core/hash.hpp"
#include "dptrain/core/timer.hpp"
#include "dptrain/train/checkpoint.hpp"
#include "dptrain/cost/compute.hpp"
#include "dptrain/train/memory_report.hpp"
#include "dptrain/train/schedule.hpp"
#include "dptrain/train/trace_writer.hpp"

namespace dptrain {

namespace {

// The share of the communication time the step did not wait for.
double hidden_fraction(double exposed, double total) { return total > 0 ? 1.0 - exposed / total : 0.0; }

std::string human_count(double x) {
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

}  // namespace

Trainer::Trainer(const TrainOptions& options, const MpiWorld& world) : options_(options), world_(world) {
  validate(options_, world_.size());
  threads_ = options_.threads > 0
                 ? options_.threads
                 : std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, world_.local_size()));
  omp_set_num_threads(threads_);

  data_ = std::make_unique<Dataset>(load_corpus(options_.data), options_.val_fraction, options_.model.seq,
                                    options_.model.vocab);
  local_windows_ = std::size_t(options_.batch / world_.size());
  windows_.resize(local_windows_ * std::size_t(options_.model.seq + 1));

  backend_ = make_cpu_backend();
  RankGroup group;
  group.rank = world_.rank();
  group.size = world_.size();
  group.sum_scalar = [this](double x) { return world_.sum_in_rank_order(x); };
  group.max_scalar = [this](double x) { return world_.max_over_ranks({x})[0]; };
  const EngineSettings settings{.grad_dtype = options_.grad_dtype,
                                .zero_stage = options_.zero,
                                .bucket_mb = options_.bucket_mb,
                                .overlap = !options_.no_overlap,
                                .grad_accum = options_.grad_accum};
  engine_ = std::make_unique<DataParallelEngine>(options_.model, *backend_, std::move(group), settings,
                                                 local_windows_);
  if (!options_.resume.empty()) {
    load_checkpoint(options_.resume, *engine_, options_);
  } else {
    engine_->initialise(options_.seed);
  }
  if (!options_.link.empty()) link_ = link_from_spec(options_.link);
  if (!options_.log.empty() && world_.rank() == 0) log_ = MetricsLog(options_.log, !options_.resume.empty());
  if (!options_.trace.empty() && world_.rank() == 0) {
    // Written at the end: a wrong path must not surface after the whole run.
    const std::filesystem::path directory = std::filesystem::path(options_.trace).parent_path();
    require(directory.empty() || std::filesystem::is_directory(directory),
            "--trace: the directory of '{}' does not exist", options_.trace);
  }
}

Trainer::~Trainer() = default;

void Trainer::connect() {
  // The options every rank must share (threads and the log file may differ), as text.
  const TrainOptions& o = options_;
  const std::string shared = fmt::format(
      "{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", describe(o.model), o.model.vocab,
      o.steps, o.batch, o.lr, o.min_lr, o.warmup, o.weight_decay, o.grad_clip, o.seed, o.eval_every, o.eval_windows,
      o.allreduce, dtype_name(o.grad_dtype), o.check_every, o.val_fraction, o.save_every, o.skip_nonfinite,
      engine_->optimizer_step(), o.zero, o.bucket_mb, o.no_overlap, o.grad_accum, o.trace.empty());
  const std::vector<int> differing = world_.ranks_differing_from_first(fnv1a(shared.data(), shared.size()));
  require(differing.empty(),
          "rank(s) {} were started with options (or a resume step) that differ from rank 0's; every rank needs the same",
          fmt::join(differing, ", "));
  transport_ = std::make_unique<MpiTransport>();
  collectives_ = make_collectives(parse_algorithm(options_.allreduce), *transport_,
                                  [this](void* acc, const void* in, std::size_t n, DType dtype) {
                                    backend_->reduce_add(acc, in, n, dtype);
                                  });
  if (options_.link.empty()) {
    const std::size_t gradient_bytes = engine_->layout().total() * element_size(options_.grad_dtype);
    link_ = calibrate_link(*collectives_, std::min<std::size_t>(gradient_bytes, 16u << 20), 2.0);
  }
  // Every rank probes its own GEMM rate (they share the node's cores, as in training); the model uses the mean.
  const double probe = options_.peak_tflops > 0 ? options_.peak_tflops * 1e12 : measure_sgemm_flops();
  peak_flops_ = world_.sum_in_rank_order(probe) / world_.size();
  engine_->set_collectives(collectives_.get());
}

void Trainer::say(const std::string& line) const {
  if (world_.rank() == 0) fmt::print("{}\n", line);
  std::fflush(stdout);
}

void Trainer::fill_local_windows(int step) {
  const WindowRange mine = rank_windows(std::size_t(options_.batch), std::size_t(world_.size()),
                                       std::size_t(world_.rank()));
  const std::size_t W = std::size_t(options_.model.seq + 1);
  for (std::size_t i = mine.begin; i < mine.end; ++i)
    data_->train_window(options_.seed, std::uint64_t(step), i, windows_.data() + (i - mine.begin) * W);
}

double Trainer::evaluate() {
  const std::size_t E = std::size_t(options_.eval_windows), R = std::size_t(world_.size());
  const auto [begin, end] = rank_windows(E, R, std::size_t(world_.rank()));
  const std::size_t W = std::size_t(options_.model.seq + 1);
  std::vector<std::int32_t> windows((end - begin) * W);
  for (std::size_t i = begin; i < end; ++i) data_->val_window(i, E, windows.data() + (i - begin) * W);
  // Every rank calls loss_sum, windows or not: from ZeRO-3 on it gathers the weights.
  const double local = engine_->loss_sum(windows.data(), end - begin);
  return world_.sum_in_rank_order(local) / double(E * std::size_t(options_.model.seq));
}

void Trainer::check_weights_agree(int step) {
  const std::vector<int> differing = world_.ranks_differing_from_first(engine_->weights_hash());
  if (!differing.empty())
    world_.abort(fmt::format("weights differ across ranks after step {}: rank(s) {} disagree with rank 0", step,
                             fmt::join(differing, ", ")),
                 1);
}

nlohmann::json Trainer::collectives_table() {
  const auto& rows = collective_totals_;
  nlohmann::json table = nlohmann::json::array();
  if (rows.empty()) return table;
  say(fmt::format("{:>14} {:>7} {:>10} {:>7} {:>12} {:>12} {:>12} {:>7}", "collective", "algo", "size(B)", "calls",
                  "sent(B)", "measured ms", "modelled ms", "ratio"));
  for (const auto& [key, row] : rows) {
    const auto& [op, algo, size] = key;
    say(fmt::format("{:>14} {:>7} {:>10} {:>7} {:>12} {:>12.3f} {:>12.3f} {:>7.2f}", collective_op_name(op),
                    algorithm_name(algo), size, row.calls, row.bytes_sent, 1e3 * row.measured, 1e3 * row.modelled,
                    row.measured / row.modelled));
    table.push_back({{"op", collective_op_name(op)}, {"algo", algorithm_name(algo)}, {"size", size},
                     {"calls", row.calls}, {"bytes", row.bytes}, {"bytes_sent", row.bytes_sent},
                     {"measured_ms", 1e3 * row.measured}, {"modelled_ms", 1e3 * row.modelled},
                     {"ratio", row.measured / row.modelled}});
  }
  return table;
}

Trainer::StepComm Trainer::account(const StepResult& result) {
  StepComm comm;
  std::vector<double> unit_model;  // gradient collectives, launch order
  double gather_model = 0;         // weight all-gathers (ZeRO 1–3)
  for (const CommRecord& call : collectives_->log().take()) {
    const double modelled = modelled_seconds(call, world_.size(), link_.link);
    comm.seconds += call.seconds;
    comm.bytes_sent += call.bytes_sent;
    comm.model_seconds += modelled;
    (call.op == CollectiveOp::all_gather ? gather_model : unit_model.emplace_back()) += modelled;
    CollectiveTotals& totals = collective_totals_[{call.op, call.algo, call.bytes}];
    ++totals.calls;
    totals.bytes += call.bytes;
    totals.bytes_sent += call.bytes_sent;
    totals.measured += call.seconds;
    totals.modelled += modelled;
  }
  // The units' collectives queue behind the backward pass as the measured per-unit backward times release them;
  // weight all-gathers are counted as exposed.
  double unit_exposed = 0;
  if (!options_.no_overlap && unit_model.size() == result.unit_backward_s.size())
    unit_exposed = cost::simulate_overlap(result.unit_backward_s, unit_model).exposed_comm_s;
  else
    for (double t : unit_model) unit_exposed += t;
  comm.exposed_model_seconds = unit_exposed + gather_model;
  return comm;
}

int Trainer::run() {
  const ModelConfig& m = options_.model;
  const std::size_t tokens_per_step = std::size_t(options_.batch) * std::size_t(m.seq);
  const UnitPlan& plan = engine_->plan();
  say(fmt::format("dptrain | {} | data: {} ({} train, {} val tokens)", describe(m), data_->description(),
                  data_->train_tokens(), data_->val_tokens()));
  say(fmt::format("dptrain | {} rank(s) × {} thread(s) | batch {} × {} = {} tokens/step in {} micro-step(s) | grad {} "
                  "| all-reduce {}",
                  world_.size(), threads_, options_.batch, m.seq, tokens_per_step, options_.grad_accum,
                  dtype_name(options_.grad_dtype), options_.allreduce));
  say(fmt::format("dptrain | ZeRO {} | {} units (bucket {} MiB) | overlap {}", options_.zero, plan.units().size(),
                  options_.bucket_mb, options_.no_overlap ? "off" : "on"));
  say(fmt::format("dptrain | link {} | peak {:.1f} GFLOP/s per rank ({})", link_.description, peak_flops_ / 1e9,
                  options_.peak_tflops > 0 ? "--peak-tflops" : "sgemm probe"));
  const double flops_per_step = training_flops_per_token(m) * double(tokens_per_step);
  const double compute_model_seconds = flops_per_step / (world_.size() * peak_flops_);
  const int first_step = engine_->optimizer_step();
  if (first_step > 0) say(fmt::format("dptrain | resumed from '{}' at step {}", options_.resume, first_step));
  Timeline& timeline = engine_->timeline();
  timeline.record(!options_.trace.empty());
  world_.barrier();
  timeline.reset_origin();  // one origin for every rank's events

  double total_seconds = 0, last_loss = NAN, last_val = NAN;
  double total_comm = 0, total_comm_model = 0, total_exposed = 0, total_exposed_model = 0;
  std::uint64_t total_bytes_sent = 0;
  int timed_steps = 0;
  for (int step = first_step; step < options_.steps; ++step) {
    fill_local_windows(step);
    const double lr = learning_rate(step, options_.steps, options_.warmup, options_.lr, options_.min_lr);
    Stopwatch watch;
    const StepResult result =
        engine_->step(windows_.data(), std::size_t(options_.batch), {lr, options_.weight_decay, options_.grad_clip});
    const double seconds = watch.seconds();
    const StepComm comm = account(result);
    // SYSTEMS-MODEL.md's step: compute + comm, or compute + max(0, comm − backward) with overlap.
    const double step_model_seconds =
        compute_model_seconds + (options_.no_overlap ? comm.model_seconds
                                                     : std::max(0.0, comm.model_seconds - 2.0 / 3.0 * compute_model_seconds));
    // This step's measured computation plus the communication the model says stays exposed.
    const double step_overlap_model_seconds = seconds - result.exposed_comm_s + comm.exposed_model_seconds;
    const double mfu = flops_per_step / seconds / (world_.size() * peak_flops_);
    if (!result.finite) {
      const std::string what = fmt::format("step {}: loss {} and gradient norm {} are not finite", step + 1,
                                           result.loss, result.grad_norm);
      if (!options_.skip_nonfinite) {
        say(fmt::format("dptrain: {}; stopping (use --skip-nonfinite to skip such steps)", what));
        return kExitNonFinite;
      }
      say(fmt::format("dptrain: {}; step skipped", what));
      continue;
    }
    total_seconds += seconds;
    total_comm += comm.seconds;
    total_comm_model += comm.model_seconds;
    total_exposed += result.exposed_comm_s;
    total_exposed_model += comm.exposed_model_seconds;
    total_bytes_sent += comm.bytes_sent;
    ++timed_steps;
    last_loss = result.loss;
    const bool last = step + 1 == options_.steps;
    std::optional<double> val_loss;
    if (last || (options_.eval_every > 0 && (step + 1) % options_.eval_every == 0)) last_val = *(val_loss = evaluate());
    if (last || (options_.check_every > 0 && (step + 1) % options_.check_every == 0)) check_weights_agree(step + 1);

    const double tokens_per_s = double(tokens_per_step) / seconds;
    if (!options_.quiet) {
      std::string line = fmt::format("step {}/{} | loss {:.4f} | lr {:.1e} | norm {:.3f} | {:.1f} ms | {} tok/s",
                                     step + 1, options_.steps, result.loss, lr, result.grad_norm, 1e3 * seconds,
                                     human_count(tokens_per_s));
      line += fmt::format(" | MFU {:.1f}%", 100 * mfu);
      if (world_.size() > 1)
        line += fmt::format(" | comm {:.1f} ms (model {:.1f}) {}B | exposed {:.1f} ms (model {:.1f})",
                            1e3 * comm.seconds, 1e3 * comm.model_seconds, human_count(double(comm.bytes_sent)),
                            1e3 * result.exposed_comm_s, 1e3 * comm.exposed_model_seconds);
      if (val_loss) line += fmt::format(" | val {:.4f}", *val_loss);
      say(line);
    }
    nlohmann::json record = {{"step", step + 1},
                             {"loss", result.loss},
                             {"lr", lr},
                             {"grad_norm", result.grad_norm},
                             {"step_ms", 1e3 * seconds},
                             {"tokens_per_s", tokens_per_s},
                             {"forward_ms", 1e3 * result.forward_s},
                             {"backward_ms", 1e3 * result.backward_s},
                             {"optimizer_ms", 1e3 * result.optimizer_s},
                             {"comm_ms", 1e3 * comm.seconds},
                             {"comm_bytes", comm.bytes_sent},
                             {"comm_model_ms", 1e3 * comm.model_seconds},
                             {"exposed_comm_ms", 1e3 * result.exposed_comm_s},
                             {"exposed_comm_model_ms", 1e3 * comm.exposed_model_seconds},
                             {"step_model_ms", 1e3 * step_model_seconds},
                             {"step_overlap_model_ms", 1e3 * step_overlap_model_seconds},
                             {"mfu", mfu}};
    if (val_loss) record["val_loss"] = *val_loss;
    log_.write(record);

    if (!options_.save.empty() && (last || (options_.save_every > 0 && (step + 1) % options_.save_every == 0))) {
      const std::string where = save_checkpoint(options_.save, *engine_, options_, [this] { world_.barrier(); });
      if (!options_.quiet) say(fmt::format("dptrain | saved checkpoint {}", where));
    }
    collectives_->log().take();  // evaluation, checks and checkpoints are not part of a step
  }
  const double mean_ms = timed_steps ? 1e3 * total_seconds / timed_steps : 0.0;
  const double tokens_per_s = total_seconds > 0 ? double(tokens_per_step) * timed_steps / total_seconds : 0.0;
  say(fmt::format("dptrain | done: {} steps | final loss {:.4f} | val {:.4f} | {:.1f} ms/step | {} tok/s",
                  timed_steps, last_loss, last_val, mean_ms, human_count(tokens_per_s)));
  const nlohmann::json table = collectives_table();
  const double per_step = timed_steps ? 1.0 / timed_steps : 0.0;
  if (world_.size() > 1)
    say(fmt::format("dptrain | per step: comm {:.2f} ms (model {:.2f}), exposed {:.2f} ms (model {:.2f}): {:.0f}% of "
                    "communication hidden (model {:.0f}%)",
                    1e3 * total_comm * per_step, 1e3 * total_comm_model * per_step, 1e3 * total_exposed * per_step,
                    1e3 * total_exposed_model * per_step, 100 * hidden_fraction(total_exposed, total_comm),
                    100 * hidden_fraction(total_exposed_model, total_comm_model)));

  // Bytes each rank sends per step and memory per rank, against SYSTEMS-MODEL.md's ZeRO formulas.
  const double params = double(engine_->layout().total()), grad_bytes = double(element_size(options_.grad_dtype));
  auto bytes_formula = [&](double n) {
    double bytes = cost::zero_bytes_sent_per_step(options_.zero, n, world_.size(), grad_bytes);
    if (options_.zero == 3)  // each further micro-step gathers the weights twice more
      bytes += 2.0 * (options_.grad_accum - 1) *
               (cost::zero_bytes_sent_per_step(3, n, world_.size(), grad_bytes) -
                cost::zero_bytes_sent_per_step(2, n, world_.size(), grad_bytes));
    return bytes;
  };
  const nlohmann::json bytes_sent = {{"measured", double(total_bytes_sent) * per_step},
                                     {"modelled", bytes_formula(params)},
                                     {"modelled_padded", bytes_formula(double(plan.padded_total()))}};
  say(fmt::format("dptrain | bytes sent per step and rank: {:.0f} measured, {:.0f} modelled ({:.0f} with the units' "
                  "padding)",
                  double(bytes_sent["measured"]), double(bytes_sent["modelled"]), double(bytes_sent["modelled_padded"])));
  const std::vector<double> mine = memory_figures(engine_->memory(), peak_resident_bytes());
  const nlohmann::json memory =
      memory_report(mine, world_.max_over_ranks(mine),
                    cost::zero_memory_per_rank(options_.zero, params, world_.size(), grad_bytes));
  for (const std::string& line : memory_table(memory)) say(line);
  nlohmann::json units = nlohmann::json::array();
  for (const Unit& u : plan.units())
    units.push_back({{"name", u.name}, {"elements", u.range.size()}, {"padded", u.padded}});

  log_.write({{"event", "summary"},
              {"link", {{"alpha_s", link_.link.alpha_s}, {"bandwidth_Bps", link_.link.bandwidth_Bps},
                        {"source", link_.description}}},
              {"peak_flops_per_rank", peak_flops_},
              {"mfu", total_seconds > 0 ? flops_per_step * timed_steps / total_seconds / (world_.size() * peak_flops_) : 0.0},
              {"collectives", table},
              {"zero", options_.zero},
              {"overlap", !options_.no_overlap},
              {"grad_accum", options_.grad_accum},
              {"bucket_mb", options_.bucket_mb},
              {"units", units},
              {"comm_ms", 1e3 * total_comm * per_step},
              {"comm_model_ms", 1e3 * total_comm_model * per_step},
              {"exposed_comm_ms", 1e3 * total_exposed * per_step},
              {"exposed_comm_model_ms", 1e3 * total_exposed_model * per_step},
              {"hidden_comm_fraction", {{"measured", hidden_fraction(total_exposed, total_comm)},
                                        {"modelled", hidden_fraction(total_exposed_model, total_comm_model)}}},
              {"bytes_sent_per_step", bytes_sent},
              {"memory", memory},
              {"steps", timed_steps},
              {"first_step", first_step + 1},
              {"last_step", options_.steps},
              {"tokens", double(tokens_per_step) * timed_steps},
              {"train_seconds", total_seconds},
              {"mean_step_ms", mean_ms},
              {"tokens_per_s", tokens_per_s},
              {"final_loss", last_loss},
              {"final_val_loss", last_val},
              {"parameters", engine_->layout().total()},
              {"ranks", world_.size()},
              {"threads_per_rank", threads_}});
  if (!options_.trace.empty()) {
    const std::vector<std::string> events =
        world_.gather_to_first(trace_events(timeline.take(), world_.rank()).dump());
    if (world_.rank() == 0) {
      write_trace(options_.trace, events);
      say(fmt::format("dptrain | trace of {} rank(s) written to {}", world_.size(), options_.trace));
    }
  }
  return 0;
}

}  // namespace dptrain
