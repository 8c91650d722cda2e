// The GPT-2 computation graph (forward and backward) written once over the Backend's operations. Its activations
// and backward scratch for up to `max_windows` windows live in one ActivationArena on the backend's device.
// Weights come range by range from a WeightAccess (the flat buffer's units may live apart: ZeRO-3 gathers one
// unit at a time); gradients accumulate into one flat buffer [N] in the backend's gradient dtype.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "dptrain/compute/activation_arena.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/model/layout.hpp"

namespace dptrain {

// Called as soon as the gradient of a range of the flat buffer is complete, in the order the backward pass
// completes them: final norm, block L−1 … block 0, embeddings (the tied wte gets its last term there).
using GradientReady = std::function<void(FlatRange)>;

// Where a pass finds the weights. acquire(range) returns the range's compute weights (Backend::acquire_weights),
// the element at flat offset f being at element f − range.begin; release(range) says the pass will not read them
// again. Forward acquires the embeddings, blocks 0 … L−1, the final norm and the embeddings again (the tied head);
// backward the embeddings (head), the final norm and blocks L−1 … 0 (the embedding lookup's backward reads no
// weights). Each acquire is released before the next range is acquired, except the embeddings' first one in
// forward, which the head's use releases with its own.
struct WeightAccess {
  std::function<const void*(FlatRange)> acquire;
  std::function<void(FlatRange)> release = [](FlatRange) {};
};

// Compute weights of the whole flat buffer [N] in one view (replicated weights).
WeightAccess whole_weights(const void* view, DType dtype);

class Gpt {
 public:
  Gpt(const ParameterLayout& layout, Backend& backend, std::size_t max_windows);

  // windows [n, Q+1] tokens on the host: inputs are [:, :Q], targets [:, 1:]. Adds the Σ of the n·Q position
  // losses into *loss_sum (device memory). dloss ≠ 0 prepares a backward(): the classifier makes the logits'
  // gradient, dloss·∂(Σ losses)/∂logits, in the same pass as the losses; dloss = 0 computes the losses only. n = 0
  // computes nothing and only acquires and releases the weights in a pass's order (walk_weights).
  void forward(const std::int32_t* windows, std::size_t n, const WeightAccess& weights, double* loss_sum,
               float dloss = 0.0f);

  // Adds dloss·∂(Σ losses)/∂weights into grads [N] (device, gradient dtype) for the windows of the last forward(),
  // with that forward's dloss (which must not be 0). Once per forward().
  // Gradient accumulation: micro-steps pass completes_gradient = false except the last, which folds in the tied
  // head's term of wte (kept apart until then; see gpt.cpp).
  void backward(const WeightAccess& weights, void* grads, const GradientReady& ready = {},
                bool completes_gradient = true);

  // The arena's table and size (for the memory summary).
  const ActivationArena& activations() const { return arena_; }
  std::size_t activation_bytes() const { return arena_.bytes(); }
  std::size_t max_windows() const { return max_windows_; }

 private:
  struct LayerActivations {
    void* ln1;                     // [N,C]
    float *ln1_mean, *ln1_rstd;    // [N]
    void* qkv;                     // [N,3C]
    void* att_saved;               // what attention keeps for backward (Backend::attention_saved_bytes)
    void* atty;                    // [N,C] attention output before its projection
    void* res2;                    // [N,C] stream after the attention branch
    void* ln2;                     // [N,C]
    float *ln2_mean, *ln2_rstd;    // [N]
    void *fch, *fch_gelu;          // [N,4C]
    void* out;                     // [N,C] stream after the MLP branch (the block's output)
  };

  void walk_weights(const WeightAccess& weights) const;
  const void* weight_at(const void* base, FlatRange r, std::size_t offset) const;
  void* grad_at(void* grads, std::size_t offset) const;

  const ParameterLayout& layout_;
  Backend& backend_;
  Device& device_;
  std::size_t max_windows_;
  std::size_t n_ = 0;                   // windows of the last forward
  float backward_dloss_ = 0;            // its dloss, until a backward consumes the logits' gradient
  std::size_t act_bytes_, grad_bytes_;  // element sizes of activations and gradients

  ActivationArena arena_;
  std::int32_t *inputs_, *targets_;  // [N]
  void* embedded_;                   // [N,C] block 0's input
  std::vector<LayerActivations> layers_;
  void* lnf_;                        // [N,C]
  float *lnf_mean_, *lnf_rstd_;      // [N]
  void* logits_;                     // [N,V] in rows of Vp = logits_row_length() (their gradient after a forward
                                     // given dloss ≠ 0)
  float* losses_;                    // [N]
  void* head_grad_;                  // [V,C] gradient dtype: the LM head's term of wte's gradient until folded in
  // Backward scratch: the residual stream's gradient and one buffer per branch activation.
  void *d_stream_, *d_ln_, *d_qkv_, *d_atty_, *d_fch_;
  std::vector<std::int32_t> host_tokens_;  // [2N] inputs then targets, staged for one upload
};

}  // namespace dptrain
