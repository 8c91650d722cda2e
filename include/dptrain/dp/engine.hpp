// The data-parallel engine: the model's flat state (BF16 weights, gradients, fp32 master copy, Adam m and v)
// and one training step: forward and backward over this rank's windows, gradient averaging across ranks as
// each range of the flat buffer completes, global-norm clipping and the AdamW update.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/gpt.hpp"
#include "dptrain/core/dtype.hpp"
#include "dptrain/model/layout.hpp"

namespace dptrain {

// How the engine talks to the other ranks. A single-rank run leaves all_reduce empty.
struct RankGroup {
  int rank = 0, size = 1;
  // In place: sum over ranks of count elements of dtype.
  std::function<void(void* data, std::size_t count, DType dtype)> all_reduce;
  // Sum of one double per rank, added in rank order so every rank gets the same bits.
  std::function<double(double)> sum_scalar = [](double x) { return x; };
};

struct StepResult {
  double loss = 0;       // global mean loss of the step's B·Q positions
  double grad_norm = 0;  // global L2 norm of the averaged gradient, before clipping
  bool finite = true;    // loss and norm are finite (the update was skipped otherwise)
};

struct OptimizerSettings {
  double lr = 0, weight_decay = 0, grad_clip = 0;
};

class DataParallelEngine {
 public:
  DataParallelEngine(const ModelConfig& config, Backend& backend, RankGroup group, DType grad_dtype,
                     std::size_t local_windows);

  // Fresh weights from the seed (identical on every rank: the initialisation is a pure function of the seed).
  void initialise(std::uint64_t seed);

  // One optimizer step over this rank's windows [local_windows, Q+1]; global_windows = B.
  StepResult step(const std::int32_t* windows, std::size_t global_windows, const OptimizerSettings& optimizer);

  // Σ of position losses over windows [n, Q+1] (no gradient), for validation.
  double loss_sum(const std::int32_t* windows, std::size_t n);

  const ParameterLayout& layout() const { return layout_; }
  int optimizer_step() const { return optimizer_step_; }  // steps taken so far
  std::vector<bf16>& weights() { return weights_; }        // [N]
  std::vector<float>& master() { return master_; }         // [N]
  std::vector<float>& adam_m() { return adam_m_; }         // [N]
  std::vector<float>& adam_v() { return adam_v_; }         // [N]
  // After the weights or optimizer state were replaced (checkpoint), at optimizer step `step`.
  void restored(int step);

  // FNV-1a hash of the BF16 weights: equal on all ranks when they agree.
  std::uint64_t weights_hash() const;

 private:
  void refresh_compute_weights();
  void synchronise(FlatRange range);  // averages one range of the gradient across ranks
  void* wire_gradient(FlatRange range);  // the gradient in the wire type

  ParameterLayout layout_;
  Backend& backend_;
  RankGroup group_;
  DType grad_dtype_;
  Gpt gpt_;
  int optimizer_step_ = 0;

  std::vector<bf16> weights_;         // [N] BF16 working weights
  std::vector<float> master_, adam_m_, adam_v_;  // [N] fp32 optimizer state
  std::vector<bf16> grads_bf16_;      // [N] the gradient on the wire when grad_dtype is bf16
  // CPU working copies: OpenBLAS multiplies fp32, so the BF16 weights are expanded once per update and the
  // backward accumulates in fp32 before the cast to the wire type.
  std::vector<float> weights_f32_, grads_f32_;  // [N]
};

}  // namespace dptrain
