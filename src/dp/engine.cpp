// One data-parallel training step over the flat parameter buffer.
#include "dptrain/dp/engine.hpp"

#include <cmath>

#include "dptrain/core/error.hpp"
#include "dptrain/core/hash.hpp"

namespace dptrain {

DataParallelEngine::DataParallelEngine(const ModelConfig& config, Backend& backend, RankGroup group,
                                       DType grad_dtype, std::size_t local_windows)
    : layout_(config),
      backend_(backend),
      group_(std::move(group)),
      grad_dtype_(grad_dtype),
      gpt_(layout_, backend, local_windows) {
  const std::size_t N = layout_.total();
  weights_.resize(N);
  master_.resize(N);
  adam_m_.assign(N, 0.0f);
  adam_v_.assign(N, 0.0f);
  if (grad_dtype_ == DType::bf16) grads_bf16_.resize(N);
  weights_f32_.resize(N);
  grads_f32_.resize(N);
}

void DataParallelEngine::initialise(std::uint64_t seed) {
  initialise_parameters(layout_, seed, master_.data());
  backend_.cast(master_.data(), weights_.data(), master_.size());
  // The master copy starts equal to the BF16 weights, so a checkpoint of the weights alone describes the model.
  backend_.cast(weights_.data(), master_.data(), master_.size());
  std::fill(adam_m_.begin(), adam_m_.end(), 0.0f);
  std::fill(adam_v_.begin(), adam_v_.end(), 0.0f);
  restored(0);
}

void DataParallelEngine::restored(int step) {
  optimizer_step_ = step;
  refresh_compute_weights();
}

void DataParallelEngine::refresh_compute_weights() {
  backend_.cast(weights_.data(), weights_f32_.data(), weights_.size());
}

void* DataParallelEngine::wire_gradient(FlatRange range) {
  return grad_dtype_ == DType::bf16 ? static_cast<void*>(grads_bf16_.data() + range.begin)
                                    : static_cast<void*>(grads_f32_.data() + range.begin);
}

void DataParallelEngine::synchronise(FlatRange range) {
  if (grad_dtype_ == DType::bf16)
    backend_.cast(grads_f32_.data() + range.begin, grads_bf16_.data() + range.begin, range.size());
  if (group_.size > 1 && group_.all_reduce) group_.all_reduce(wire_gradient(range), range.size(), grad_dtype_);
}

StepResult DataParallelEngine::step(const std::int32_t* windows, std::size_t global_windows,
                                    const OptimizerSettings& optimizer) {
  const ModelConfig& c = layout_.config();
  const std::size_t n = gpt_.max_windows();
  // Every rank scales by the global position count, so the sum over ranks is the global mean's gradient.
  const float dloss = 1.0f / float(global_windows * std::size_t(c.seq));
  std::fill(grads_f32_.begin(), grads_f32_.end(), 0.0f);
  const double local_loss = gpt_.forward(weights_f32_.data(), windows, n);
  gpt_.backward(weights_f32_.data(), grads_f32_.data(), dloss, [this](FlatRange r) { synchronise(r); });

  StepResult result;
  result.loss = group_.sum_scalar(local_loss) / double(global_windows * std::size_t(c.seq));
  const void* grad = wire_gradient({0, layout_.total()});
  result.grad_norm = std::sqrt(backend_.sum_of_squares(grad, layout_.total(), grad_dtype_));
  result.finite = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
  if (!result.finite) return result;

  AdamWParams p;
  p.lr = float(optimizer.lr);
  p.step = ++optimizer_step_;
  p.grad_scale = optimizer.grad_clip > 0 && result.grad_norm > optimizer.grad_clip
                     ? float(optimizer.grad_clip / result.grad_norm)
                     : 1.0f;
  const std::size_t elem = element_size(grad_dtype_);
  for (const ParameterEntry& e : layout_.entries()) {
    p.weight_decay = e.weight_decay ? float(optimizer.weight_decay) : 0.0f;
    backend_.adamw(master_.data() + e.offset, adam_m_.data() + e.offset, adam_v_.data() + e.offset,
                   weights_.data() + e.offset, static_cast<const char*>(grad) + e.offset * elem, grad_dtype_,
                   e.numel, p);
  }
  refresh_compute_weights();
  return result;
}

double DataParallelEngine::loss_sum(const std::int32_t* windows, std::size_t n) {
  double total = 0;
  for (std::size_t done = 0; done < n; done += gpt_.max_windows()) {
    const std::size_t chunk = std::min(gpt_.max_windows(), n - done);
    total += gpt_.forward(weights_f32_.data(), windows + done * std::size_t(layout_.config().seq + 1), chunk);
  }
  return total;
}

std::uint64_t DataParallelEngine::weights_hash() const {
  return fnv1a(weights_.data(), weights_.size() * sizeof(bf16));
}

}  // namespace dptrain
