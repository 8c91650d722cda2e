// The GPT-2 computation graph (forward and backward) written once over the Backend's operations. Owns the
// activations of up to `max_windows` windows. Weights and gradients are flat fp32 buffers laid out by the
// ParameterLayout.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/model/layout.hpp"

namespace dptrain {

// Called as soon as the gradient of a range of the flat buffer is complete, in the order the backward pass
// completes them: final norm, block L−1 … block 0, embeddings (the tied wte gets its last term there).
using GradientReady = std::function<void(FlatRange)>;

// Called just before a pass reads the weights of a range: forward asks for the embeddings, blocks 0 … L−1, the
// final norm and the embeddings again (the tied head); backward for the embeddings (head), the final norm and
// blocks L−1 … 0. The embedding lookup's backward reads no weights. ZeRO-3 gathers the weights here.
using WeightsNeeded = std::function<void(FlatRange)>;

class Gpt {
 public:
  Gpt(const ParameterLayout& layout, Backend& backend, std::size_t max_windows);

  // windows [n, Q+1] tokens: inputs are [:, :Q], targets [:, 1:]. Returns Σ of the n·Q position losses.
  double forward(const float* weights, const std::int32_t* windows, std::size_t n, const WeightsNeeded& needed = {});

  // Adds dloss·∂(Σ losses)/∂weights into grads [N] for the windows of the last forward(). Once per forward():
  // the saved probabilities become the logits' gradient in place.
  // Gradient accumulation: micro-steps pass completes_gradient = false except the last, which folds in the tied
  // head's term of wte (kept apart until then; see gpt.cpp).
  void backward(const float* weights, float* grads, float dloss, const GradientReady& ready = {},
                const WeightsNeeded& needed = {}, bool completes_gradient = true);

  // Bytes of the activations and backward scratch this model holds (for the memory summary).
  std::size_t activation_bytes() const;

  std::size_t max_windows() const { return max_windows_; }

 private:
  struct LayerActivations {
    std::vector<float> ln1, ln1_mean, ln1_rstd;  // [N,C], [N], [N]
    std::vector<float> qkv;                      // [N,3C]
    std::vector<float> probs;                    // [B,NH,T,T]
    std::vector<float> atty;                     // [N,C] attention output before its projection
    std::vector<float> res2;                     // [N,C] stream after the attention branch
    std::vector<float> ln2, ln2_mean, ln2_rstd;  // [N,C], [N], [N]
    std::vector<float> fch, fch_gelu;            // [N,4C]
    std::vector<float> out;                      // [N,C] stream after the MLP branch (the block's output)
  };

  const ParameterLayout& layout_;
  Backend& backend_;
  std::size_t max_windows_;
  std::size_t n_ = 0;  // windows of the last forward

  std::vector<std::int32_t> inputs_, targets_;  // [N]
  std::vector<float> embedded_;                 // [N,C] block 0's input
  std::vector<LayerActivations> layers_;
  std::vector<float> lnf_, lnf_mean_, lnf_rstd_;  // [N,C], [N], [N]
  std::vector<float> logits_, losses_;            // [N,V] (probabilities after forward), [N]
  std::vector<float> head_grad_;                  // [V,C] the LM head's term of wte's gradient, until folded in
  // Backward scratch: the residual stream's gradient and one buffer per branch activation.
  std::vector<float> d_stream_, d_ln_, d_qkv_, d_atty_, d_fch_, d_fch_gelu_;
};

}  // namespace dptrain
