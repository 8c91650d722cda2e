// One data-parallel training step over padded units, with overlap and ZeRO stages 0–3.
#include "dptrain/dp/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "dptrain/core/error.hpp"
#include "dptrain/core/hash.hpp"

namespace dptrain {

namespace {

std::size_t bucket_bytes(double bucket_mb) { return std::size_t(bucket_mb * double(std::size_t{1} << 20)); }

}  // namespace

DataParallelEngine::DataParallelEngine(const ModelConfig& config, Backend& backend, RankGroup group,
                                       EngineSettings settings, std::size_t local_windows)
    : layout_(config),
      backend_(backend),
      group_(std::move(group)),
      settings_(settings),
      plan_(layout_, bucket_bytes(settings.bucket_mb), element_size(settings.grad_dtype), group_.size),
      gpt_(layout_, backend, local_windows / std::size_t(std::max(1, settings.grad_accum))),
      micro_windows_(local_windows / std::size_t(std::max(1, settings.grad_accum))) {
  DP_ASSERT(settings_.zero_stage >= 0 && settings_.zero_stage <= 3);
  DP_ASSERT(settings_.grad_accum >= 1 && local_windows % std::size_t(settings_.grad_accum) == 0);
  const int stage = settings_.zero_stage;
  const std::size_t N = layout_.total(), units = plan_.units().size();
  for (const Unit& u : plan_.units())
    optimizer_pieces_.push_back(stage == 0 ? OptimizerPiece{u.range, u.range.begin}
                                           : OptimizerPiece{u.owned(group_.rank), u.shard_offset});
  const std::size_t optimizer_elements = stage == 0 ? N : plan_.shard_total();
  master_.resize(optimizer_elements);
  adam_m_.assign(optimizer_elements, 0.0f);
  adam_v_.assign(optimizer_elements, 0.0f);
  weights_.resize(stage == 3 ? plan_.shard_total() : N);
  gradient_.assign((stage <= 1 ? plan_.padded_total() : plan_.shard_total()) * wire_bytes(), std::byte{0});
  weights_f32_.resize(N);
  grads_f32_.resize(N);
  gradient_staging_.resize(units);
  weight_staging_.resize(units);
  gradient_tickets_.assign(units, 0);
  weight_tickets_.assign(units, 0);
  present_.assign(units, 0);
  // Forward needs the units from the embeddings up; backward the embeddings (head) first, then launch order.
  for (std::size_t u = units; u-- > 0;) forward_order_.push_back(u);
  backward_order_.push_back(units - 1);
  for (std::size_t u = 0; u + 1 < units; ++u) backward_order_.push_back(u);
}

DataParallelEngine::~DataParallelEngine() = default;

// ---- state -------------------------------------------------------------------------------------------------

void DataParallelEngine::initialise(std::uint64_t seed) {
  const std::size_t N = layout_.total();
  std::vector<float> params(N);  // [N]
  initialise_parameters(layout_, seed, params.data());
  std::vector<bf16> weights(N);  // [N]
  backend_.cast(params.data(), weights.data(), N);
  set_full_weights(weights.data());
  // The master copy starts equal to the BF16 weights, so a checkpoint of the weights alone describes the model.
  for (const OptimizerPiece& piece : optimizer_pieces_)
    backend_.cast(weights.data() + piece.flat.begin, master_.data() + piece.at, piece.flat.size());
  std::fill(adam_m_.begin(), adam_m_.end(), 0.0f);
  std::fill(adam_v_.begin(), adam_v_.end(), 0.0f);
  restored(0);
}

void DataParallelEngine::set_full_weights(const bf16* w) {
  if (settings_.zero_stage < 3) {
    std::copy_n(w, layout_.total(), weights_.data());
    return;
  }
  std::fill(weights_.begin(), weights_.end(), bf16{});
  for (const Unit& u : plan_.units()) {
    const FlatRange own = u.owned(group_.rank);
    std::copy_n(w + own.begin, own.size(), weights_.data() + u.shard_offset);
  }
}

void DataParallelEngine::restored(int step) {
  optimizer_step_ = step;
  refresh_compute_weights();
}

void DataParallelEngine::refresh_compute_weights() {
  // Stage 3 fills the working copy unit by unit as each pass gathers it.
  if (settings_.zero_stage < 3) backend_.cast(weights_.data(), weights_f32_.data(), weights_.size());
}

std::vector<bf16> DataParallelEngine::full_weights() {
  if (settings_.zero_stage < 3) return weights_;
  std::vector<bf16> full(layout_.total());  // [N]
  gather_all_units([&](std::size_t u, const bf16* unit) {
    const FlatRange r = plan_.units()[u].range;
    std::copy_n(unit, r.size(), full.data() + r.begin);
  });
  return full;
}

std::uint64_t DataParallelEngine::weights_hash() {
  const std::vector<bf16> w = full_weights();
  return fnv1a(w.data(), w.size() * sizeof(bf16));
}

MemoryUse DataParallelEngine::memory() const {
  MemoryUse m;
  m.weights = weights_.capacity() * sizeof(bf16);
  m.gradients = gradient_.capacity();
  m.optimizer = (master_.capacity() + adam_m_.capacity() + adam_v_.capacity()) * sizeof(float);
  m.communication = staging_.allocated_bytes();
  m.activations = gpt_.activation_bytes();
  m.working_copies = (weights_f32_.capacity() + grads_f32_.capacity()) * sizeof(float);
  return m;
}

// ---- communication -----------------------------------------------------------------------------------------

void DataParallelEngine::collective(CollectiveOp op, std::size_t u, void* data, DType dtype) {
  if (!distributed()) return;
  const Unit& unit = plan_.units()[u];
  const double start = timeline_.now();
  group_.collectives->run(op, data, unit.padded, dtype);
  if (timeline_.recording())
    timeline_.add({TimelineEvent::Track::communication, fmt::format("{} {}", collective_op_name(op), unit.name), start,
                 timeline_.now(), step_number_, int(u), unit.padded * element_size(dtype)});
}

void DataParallelEngine::wait_for_comm(CommExecutor::Ticket ticket, const char* what) {
  const double start = timeline_.now();
  executor_.wait(ticket);
  const double end = timeline_.now();
  waited_s_ += end - start;
  if (timeline_.recording() && end - start > 1e-5)
    timeline_.add({TimelineEvent::Track::compute, fmt::format("wait: {}", what), start, end, step_number_});
}

void* DataParallelEngine::gradient_slice(std::size_t u) {
  const Unit& unit = plan_.units()[u];
  const std::size_t at =
      settings_.zero_stage <= 1 ? unit.padded_offset + std::size_t(group_.rank) * unit.slice : unit.shard_offset;
  return gradient_.data() + at * wire_bytes();
}

// Casts unit u's gradient to the wire dtype (compute thread) and queues its collective: an all-reduce in place at
// stage 0, a reduce-scatter in place at stage 1, a reduce-scatter of a staging buffer keeping the own slice at
// stages 2 and 3.
void DataParallelEngine::launch_gradient(std::size_t u) {
  const Unit& unit = plan_.units()[u];
  const int stage = settings_.zero_stage;
  const DType dtype = settings_.grad_dtype;
  std::byte* wire;
  if (stage <= 1) {
    wire = gradient_.data() + unit.padded_offset * wire_bytes();
  } else {
    gradient_staging_[u] = staging_.acquire(unit.padded * wire_bytes());
    wire = gradient_staging_[u]->data();
  }
  const float* grad = grads_f32_.data() + unit.range.begin;
  if (dtype == DType::bf16)
    backend_.cast(grad, reinterpret_cast<bf16*>(wire), unit.range.size());
  else
    std::memcpy(wire, grad, unit.range.size() * sizeof(float));
  std::memset(wire + unit.range.size() * wire_bytes(), 0, (unit.padded - unit.range.size()) * wire_bytes());
  gradient_tickets_[u] = executor_.submit([this, u, wire, stage, dtype] {
    collective(stage == 0 ? CollectiveOp::all_reduce : CollectiveOp::reduce_scatter, u, wire, dtype);
    if (stage >= 2) {
      // Keep the own slice; the staging buffer goes back to the pool at once, for the next unit.
      const Unit& unit = plan_.units()[u];
      std::memcpy(gradient_slice(u), wire + std::size_t(group_.rank) * unit.slice * wire_bytes(),
                  unit.slice * wire_bytes());
      staging_.release(std::move(gradient_staging_[u]));
    }
  });
}

// Stages 1–3: rank r's slice of unit u all-gathered into a staging buffer of the whole padded unit.
void DataParallelEngine::launch_weight_gather(std::size_t u, const bf16* own, std::size_t own_count) {
  const Unit& unit = plan_.units()[u];
  weight_staging_[u] = staging_.acquire(unit.padded * sizeof(bf16));
  bf16* slice = reinterpret_cast<bf16*>(weight_staging_[u]->data()) + std::size_t(group_.rank) * unit.slice;
  std::copy_n(own, own_count, slice);
  std::fill(slice + own_count, slice + unit.slice, bf16{});
  bf16* buffer = reinterpret_cast<bf16*>(weight_staging_[u]->data());
  weight_tickets_[u] =
      executor_.submit([this, u, buffer] { collective(CollectiveOp::all_gather, u, buffer, DType::bf16); });
}

void DataParallelEngine::launch_weight_gather_from_shard(std::size_t u) {
  const Unit& unit = plan_.units()[u];
  launch_weight_gather(u, weights_.data() + unit.shard_offset, unit.slice);
}

const bf16* DataParallelEngine::gathered(std::size_t u) {
  wait_for_comm(weight_tickets_[u], "weights");
  return reinterpret_cast<const bf16*>(weight_staging_[u]->data());
}

void DataParallelEngine::release_gathered(std::size_t u) { staging_.release(std::move(weight_staging_[u])); }

void DataParallelEngine::take_gathered_weights(std::size_t u) {
  const FlatRange r = plan_.units()[u].range;
  std::copy_n(gathered(u), r.size(), weights_.data() + r.begin);
  release_gathered(u);
}

void DataParallelEngine::gather_all_units(const std::function<void(std::size_t, const bf16*)>& use) {
  // Two units in flight: the next one is gathered while the current one is used.
  const std::size_t units = plan_.units().size();
  for (std::size_t u = 0; u <= units; ++u) {
    if (u < units) launch_weight_gather_from_shard(u);
    if (u > 0) {
      use(u - 1, gathered(u - 1));
      release_gathered(u - 1);
    }
  }
}

void DataParallelEngine::weights_needed(FlatRange range, const std::vector<std::size_t>& pass_order) {
  const std::size_t u = plan_.unit_of(range.begin);
  if (present_[u]) return;
  if (!weight_staging_[u]) launch_weight_gather_from_shard(u);
  const FlatRange r = plan_.units()[u].range;
  backend_.cast(gathered(u), weights_f32_.data() + r.begin, r.size());
  release_gathered(u);
  present_[u] = 1;
  // Prefetch: the next unit's all-gather runs while this one is computed with.
  const auto next = std::find(pass_order.begin(), pass_order.end(), u) + 1;
  if (next != pass_order.end() && !present_[*next] && !weight_staging_[*next])
    launch_weight_gather_from_shard(*next);
}

// ---- the step ----------------------------------------------------------------------------------------------

std::string DataParallelEngine::part_name(FlatRange range) const {
  if (range.begin == layout_.final_norm().begin) return "head + final norm";
  if (range.begin == layout_.embeddings().begin) return "embeddings";
  for (int l = 0; l < layout_.config().layers; ++l)
    if (layout_.block_range(l).begin == range.begin) return fmt::format("block {}", l);
  return "?";
}

void DataParallelEngine::gradient_ready(FlatRange range, bool last, StepResult& result) {
  const double now = timeline_.now();
  const std::size_t u = plan_.unit_of(range.begin);
  if (timeline_.recording())
    timeline_.add({TimelineEvent::Track::compute, "backward " + part_name(range), unit_clock_, now, step_number_,
                   int(u)});
  if (last) {
    result.unit_backward_s[u] += now - unit_clock_;
    // A unit is complete when its lowest range is: blocks complete from the top down.
    if (settings_.overlap && range.begin == plan_.units()[u].range.begin) launch_gradient(u);
  }
  unit_clock_ = timeline_.now();
}

void DataParallelEngine::micro_step(const std::int32_t* windows, float dloss, bool last, StepResult& result,
                                    double& loss) {
  const bool sharded_weights = settings_.zero_stage == 3;
  auto needed = [this](const std::vector<std::size_t>& order) -> WeightsNeeded {
    return [this, &order](FlatRange r) { weights_needed(r, order); };
  };
  const double start = timeline_.now();
  std::fill(present_.begin(), present_.end(), 0);
  loss += gpt_.forward(weights_f32_.data(), windows, micro_windows_,
                       sharded_weights ? needed(forward_order_) : WeightsNeeded{});
  const double forward_end = timeline_.now();
  result.forward_s += forward_end - start;
  timeline_.add({TimelineEvent::Track::compute, "forward", start, forward_end, step_number_});
  std::fill(present_.begin(), present_.end(), 0);
  unit_clock_ = forward_end;
  gpt_.backward(
      weights_f32_.data(), grads_f32_.data(), dloss,
      [&](FlatRange r) { gradient_ready(r, last, result); },
      sharded_weights ? needed(backward_order_) : WeightsNeeded{}, last);
  result.backward_s += timeline_.now() - forward_end;
}

double DataParallelEngine::global_grad_norm() {
  // Each rank sums the squares of its own slices, the ranks' sums are added in rank order: every element counted
  // once, and the same bits at every stage and on every rank.
  double own = 0;
  for (std::size_t u = 0; u < plan_.units().size(); ++u)
    own += backend_.sum_of_squares(gradient_slice(u), plan_.units()[u].owned(group_.rank).size(),
                                   settings_.grad_dtype);
  double total = 0;
  executor_.run([&] { total = group_.sum_scalar(own); });
  return std::sqrt(total);
}

StepResult DataParallelEngine::step(const std::int32_t* windows, std::size_t global_windows,
                                    const OptimizerSettings& optimizer) {
  const ModelConfig& c = layout_.config();
  const std::size_t units = plan_.units().size();
  step_number_ = optimizer_step_ + 1;
  waited_s_ = 0;
  StepResult result;
  result.unit_backward_s.assign(units, 0.0);
  // Every rank scales by the global position count, so the sum over ranks is the global mean's gradient.
  const float dloss = 1.0f / float(global_windows * std::size_t(c.seq));
  std::fill(grads_f32_.begin(), grads_f32_.end(), 0.0f);
  double local_loss = 0;
  const std::size_t window_size = std::size_t(c.seq + 1);
  for (int k = 0; k < settings_.grad_accum; ++k)
    micro_step(windows + std::size_t(k) * micro_windows_ * window_size, dloss, k + 1 == settings_.grad_accum,
               result, local_loss);
  if (!settings_.overlap)  // the same collectives in the same order, after backward
    for (std::size_t u = 0; u < units; ++u) launch_gradient(u);
  wait_for_comm(gradient_tickets_[units - 1], "gradient");

  double loss_total = 0;
  executor_.run([&] { loss_total = group_.sum_scalar(local_loss); });
  result.loss = loss_total / double(global_windows * std::size_t(c.seq));
  result.grad_norm = global_grad_norm();
  result.finite = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
  if (result.finite) {
    const float grad_scale = optimizer.grad_clip > 0 && result.grad_norm > optimizer.grad_clip
                                 ? float(optimizer.grad_clip / result.grad_norm)
                                 : 1.0f;
    update(optimizer, grad_scale, result);
  }
  result.exposed_comm_s = waited_s_;
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
    const std::size_t gradient_at = stage <= 1 ? unit.padded_offset + (piece.flat.begin - unit.range.begin)
                                               : unit.shard_offset;
    const std::size_t weights_at = stage == 3 ? unit.shard_offset : piece.flat.begin;
    for (const ParameterEntry& e : layout_.entries()) {
      const std::size_t begin = std::max(e.offset, piece.flat.begin);
      const std::size_t end = std::min(e.offset + e.numel, piece.flat.end);
      if (begin >= end) continue;
      const std::size_t i = begin - piece.flat.begin;
      p.weight_decay = e.weight_decay ? float(optimizer.weight_decay) : 0.0f;
      backend_.adamw(master_.data() + piece.at + i, adam_m_.data() + piece.at + i, adam_v_.data() + piece.at + i,
                     weights_.data() + weights_at + i, gradient_.data() + (gradient_at + i) * elem,
                     settings_.grad_dtype, end - begin, p);
    }
    // Stages 1, 2: the updated slice goes out while the next unit is updated (two units in flight at most).
    if (stage == 1 || stage == 2) {
      launch_weight_gather(u, weights_.data() + piece.flat.begin, piece.flat.size());
      if (u > 0) take_gathered_weights(u - 1);
    }
  }
  if (stage == 1 || stage == 2) take_gathered_weights(plan_.units().size() - 1);
  timeline_.add({TimelineEvent::Track::compute, "optimizer", start, timeline_.now(), step_number_});
  refresh_compute_weights();
  result.optimizer_s = timeline_.now() - start;
}

double DataParallelEngine::loss_sum(const std::int32_t* windows, std::size_t n) {
  if (settings_.zero_stage == 3)
    gather_all_units([&](std::size_t u, const bf16* unit) {
      const FlatRange r = plan_.units()[u].range;
      backend_.cast(unit, weights_f32_.data() + r.begin, r.size());
    });
  double total = 0;
  for (std::size_t done = 0; done < n; done += gpt_.max_windows()) {
    const std::size_t chunk = std::min(gpt_.max_windows(), n - done);
    total += gpt_.forward(weights_f32_.data(), windows + done * std::size_t(layout_.config().seq + 1), chunk);
  }
  return total;
}

}  // namespace dptrain
