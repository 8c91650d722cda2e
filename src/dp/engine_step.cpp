// One data-parallel training step: micro-steps of forward and backward (each unit's gradient launched as the last
// micro-step completes it), the global gradient norm, AdamW on the rank's own slices with the weight all-gathers
// of stages 1 and 2, and evaluation.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "dptrain/core/error.hpp"
#include "dptrain/dp/engine.hpp"

namespace dptrain {

WeightAccess DataParallelEngine::weights_for(const std::vector<std::size_t>& pass_order) {
  if (settings_.zero_stage == 3) return sharded_weights(pass_order);
  return whole_weights(whole_view_, backend_.weight_dtype());
}

void DataParallelEngine::gradient_ready(FlatRange range, bool last, StepResult& result) {
  const double now = timeline_.now();
  const std::size_t u = plan_.unit_of(range.begin);
  if (timeline_.recording())
    timeline_.add(
        {TimelineEvent::Track::compute, "backward " + part_name(range), unit_clock_, now, step_number_, int(u)});
  if (last) {
    result.unit_backward_s[u] += now - unit_clock_;
    // A unit is complete when its lowest range is: blocks complete from the top down.
    if (settings_.overlap && range.begin == plan_.units()[u].range.begin) launch_gradient(u);
  }
  unit_clock_ = timeline_.now();
}

void DataParallelEngine::micro_step(const std::int32_t* windows, float dloss, bool last, StepResult& result) {
  const double start = timeline_.now();
  gpt_.forward(windows, micro_windows_, weights_for(forward_order_), accumulators_.as<double>(), dloss);
  release_idle_units(plan_.units().size());
  const double forward_end = timeline_.now();
  result.forward_s += forward_end - start;
  timeline_.add({TimelineEvent::Track::compute, "forward", start, forward_end, step_number_});
  unit_clock_ = forward_end;
  gpt_.backward(
      weights_for(backward_order_), gradient_accumulator_.data(),
      [&](FlatRange r) { gradient_ready(r, last, result); }, last);
  release_idle_units(plan_.units().size());
  result.backward_s += timeline_.now() - forward_end;
}

// Each rank sums the squares of its own slices into the device accumulator: every element counted once, and (the
// ranks' sums added in rank order) the same bits at every stage and on every rank.
void DataParallelEngine::add_own_squares() {
  double* sum_of_squares = accumulators_.as<double>() + 1;
  for (std::size_t u = 0; u < plan_.units().size(); ++u)
    backend_.sum_of_squares(gradient_slice(u), plan_.units()[u].owned(group_.rank).size(), settings_.grad_dtype,
                            sum_of_squares);
}

StepResult DataParallelEngine::step(const std::int32_t* windows, std::size_t global_windows,
                                    const OptimizerSettings& optimizer) {
  const ModelConfig& c = layout_.config();
  const std::size_t units = plan_.units().size();
  gaps_used_ = 0;
  StepResult result;
  result.unit_backward_s.assign(units, 0.0);
  // Every rank scales by the global position count, so the sum over ranks is the global mean's gradient.
  const float dloss = 1.0f / float(global_windows * std::size_t(c.seq));
  device().zero(gradient_accumulator_.data(), gradient_accumulator_.bytes());
  device().zero(accumulators_.data(), accumulators_.bytes());
  const std::size_t window_size = std::size_t(c.seq + 1);
  for (int k = 0; k < settings_.grad_accum; ++k)
    micro_step(windows + std::size_t(k) * micro_windows_ * window_size, dloss, k + 1 == settings_.grad_accum, result);
  if (!settings_.overlap)  // the same collectives in the same order, after backward
    for (std::size_t u = 0; u < units; ++u) launch_gradient(u);
  wait_for_comm(gradient_tickets_[units - 1], "gradient");

  add_own_squares();
  double local[2];  // the step's only read of device values: this rank's loss sum and Σ g²
  device().download(local, accumulators_.data(), sizeof(local));
  double loss_total = 0, sum_of_squares = 0;
  run_on_comm_executor(
      [&] {
        loss_total = group_.sum_scalar(local[0]);
        sum_of_squares = group_.sum_scalar(local[1]);
      },
      "the sum of the loss and gradient norm over ranks");
  result.loss = loss_total / double(global_windows * std::size_t(c.seq));
  result.grad_norm = std::sqrt(sum_of_squares);
  result.finite = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
  if (result.finite) {
    const float grad_scale = optimizer.grad_clip > 0 && result.grad_norm > optimizer.grad_clip
                                 ? float(optimizer.grad_clip / result.grad_norm)
                                 : 1.0f;
    update(optimizer, grad_scale, result);
  }
  result.exposed_comm_s = exposed_communication();
  return result;
}

void DataParallelEngine::update(const OptimizerSettings& optimizer, float grad_scale, StepResult& result) {
  const int stage = settings_.zero_stage;
  const double start = timeline_.now();
  AdamWParams p;
  p.lr = float(optimizer.lr);
  p.step = ++optimizer_step_;
  p.grad_scale = grad_scale;
  const std::size_t elem = wire_bytes();
  for (std::size_t u = 0; u < plan_.units().size(); ++u) {
    const Unit& unit = plan_.units()[u];
    const OptimizerPiece& piece = optimizer_pieces_[u];
    // Where flat element f of the piece is in the gradient and in the weights.
    const std::size_t gradient_at =
        stage <= 1 ? unit.padded_offset + (piece.flat.begin - unit.range.begin) : unit.shard_offset;
    const std::size_t weights_at = stage == 3 ? unit.shard_offset : piece.flat.begin;
    for (const ParameterEntry& e : layout_.entries()) {
      const std::size_t begin = std::max(e.offset, piece.flat.begin);
      const std::size_t end = std::min(e.offset + e.numel, piece.flat.end);
      if (begin >= end) continue;
      const std::size_t i = piece.at + begin - piece.flat.begin;
      p.weight_decay = e.weight_decay ? float(optimizer.weight_decay) : 0.0f;
      backend_.adamw(master_.as<float>() + i, adam_m_.as<float>() + i, adam_v_.as<float>() + i,
                     weights_.as<bf16>() + weights_at + (begin - piece.flat.begin),
                     gradient_.as<std::byte>() + (gradient_at + begin - piece.flat.begin) * elem,
                     settings_.grad_dtype, end - begin, p);
    }
    // Stages 1, 2: the updated slice goes out while the next unit is updated (two units in flight at most).
    if (stage == 1 || stage == 2) {
      launch_weight_gather(u, weights_.as<bf16>() + piece.flat.begin, piece.flat.size());
      if (u > 0) take_gathered_weights(u - 1);
    }
  }
  if (stage == 1 || stage == 2) take_gathered_weights(plan_.units().size() - 1);
  timeline_.add({TimelineEvent::Track::compute, "optimizer", start, timeline_.now(), step_number_});
  refresh_compute_weights();
  result.optimizer_s = timeline_.now() - start;
}

double DataParallelEngine::loss_sum(const std::int32_t* windows, std::size_t n) {
  const std::size_t chunk = gpt_.max_windows();
  std::size_t passes = (n + chunk - 1) / chunk;
  // From stage 3 on every pass gathers the weights unit by unit: every rank makes as many passes as the rank
  // with the most windows (the extra ones over no windows).
  if (settings_.zero_stage == 3)
    run_on_comm_executor([&] { passes = std::size_t(group_.max_scalar(double(passes))); },
                         "the exchange of the evaluation's passes");
  double* total = accumulators_.as<double>();
  device().zero(total, sizeof(double));
  for (std::size_t k = 0; k < passes; ++k) {
    const std::size_t done = std::min(n, k * chunk);
    gpt_.forward(windows + done * std::size_t(layout_.config().seq + 1), std::min(chunk, n - done),
                 weights_for(forward_order_), total);
    release_idle_units(plan_.units().size());
  }
  double result = 0;
  device().download(&result, total, sizeof(double));
  return result;
}

}  // namespace dptrain
