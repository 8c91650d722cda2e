// Forward and backward of the GPT-2 model over the Backend's operations (pre-LayerNorm blocks, tied LM head).
#include "dptrain/compute/gpt.hpp"

#include <algorithm>

#include "dptrain/core/error.hpp"

namespace dptrain {

Gpt::Gpt(const ParameterLayout& layout, Backend& backend, std::size_t max_windows)
    : layout_(layout), backend_(backend), max_windows_(max_windows) {
  const ModelConfig& c = layout.config();
  const std::size_t N = max_windows * c.seq, C = c.width, T = c.seq;
  inputs_.resize(N);
  targets_.resize(N);
  embedded_.resize(N * C);
  layers_.resize(c.layers);
  for (auto& a : layers_) {
    a.ln1.resize(N * C), a.ln1_mean.resize(N), a.ln1_rstd.resize(N);
    a.qkv.resize(N * 3 * C);
    a.probs.resize(max_windows * c.heads * T * T);
    a.atty.resize(N * C), a.res2.resize(N * C);
    a.ln2.resize(N * C), a.ln2_mean.resize(N), a.ln2_rstd.resize(N);
    a.fch.resize(N * 4 * C), a.fch_gelu.resize(N * 4 * C);
    a.out.resize(N * C);
  }
  lnf_.resize(N * C), lnf_mean_.resize(N), lnf_rstd_.resize(N);
  logits_.resize(N * c.vocab), losses_.resize(N);
  head_grad_.assign(std::size_t(c.vocab) * C, 0.0f);
  d_stream_.resize(N * C), d_ln_.resize(N * C), d_qkv_.resize(N * 3 * C), d_atty_.resize(N * C);
  d_fch_.resize(N * 4 * C), d_fch_gelu_.resize(N * 4 * C);
}

double Gpt::forward(const float* W, const std::int32_t* windows, std::size_t n, const WeightsNeeded& needed) {
  DP_ASSERT(n <= max_windows_);
  n_ = n;
  const ModelConfig& c = layout_.config();
  const std::size_t T = c.seq, C = c.width, V = c.vocab, NH = c.heads, N = n * T;
  for (std::size_t w = 0; w < n; ++w) {
    std::copy_n(windows + w * (T + 1), T, inputs_.data() + w * T);
    std::copy_n(windows + w * (T + 1) + 1, T, targets_.data() + w * T);
  }
  Backend& be = backend_;
  auto need = [&](FlatRange r) {
    if (needed) needed(r);
  };
  need(layout_.embeddings());
  be.embedding_forward(embedded_.data(), inputs_.data(), W + layout_.wte(), W + layout_.wpe(), N, T, C);
  const float* x = embedded_.data();
  for (int l = 0; l < c.layers; ++l) {
    const BlockOffsets& p = layout_.block(l);
    LayerActivations& a = layers_[l];
    need(layout_.block_range(l));
    be.layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, W + p.ln1_w, W + p.ln1_b, N, C);
    be.matmul_forward(a.qkv.data(), a.ln1.data(), W + p.qkv_w, W + p.qkv_b, N, T, C, 3 * C);
    be.attention_forward(a.atty.data(), a.probs.data(), a.qkv.data(), n, T, C, NH);
    be.matmul_forward(a.res2.data(), a.atty.data(), W + p.attn_proj_w, W + p.attn_proj_b, N, T, C, C);
    be.accumulate(a.res2.data(), x, N * C);
    be.layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), W + p.ln2_w,
                         W + p.ln2_b, N, C);
    be.matmul_forward(a.fch.data(), a.ln2.data(), W + p.fc_w, W + p.fc_b, N, T, C, 4 * C);
    be.gelu_forward(a.fch_gelu.data(), a.fch.data(), N * 4 * C);
    be.matmul_forward(a.out.data(), a.fch_gelu.data(), W + p.fc_proj_w, W + p.fc_proj_b, N, T, 4 * C, C);
    be.accumulate(a.out.data(), a.res2.data(), N * C);
    x = a.out.data();
  }
  need(layout_.final_norm());
  be.layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), x, W + layout_.lnf_w(),
                       W + layout_.lnf_b(), N, C);
  need(layout_.embeddings());  // the tied head
  be.matmul_forward(logits_.data(), lnf_.data(), W + layout_.wte(), nullptr, N, T, C, V);
  return be.softmax_cross_entropy_forward(logits_.data(), losses_.data(), targets_.data(), N, V);
}

void Gpt::backward(const float* W, float* G, float dloss, const GradientReady& ready, const WeightsNeeded& needed,
                   bool completes_gradient) {
  const ModelConfig& c = layout_.config();
  const std::size_t T = c.seq, C = c.width, V = c.vocab, NH = c.heads, N = n_ * T;
  Backend& be = backend_;
  auto zero = [](std::vector<float>& v, std::size_t n) { std::fill_n(v.data(), n, 0.0f); };
  auto notify = [&](FlatRange r) {
    if (ready) ready(r);
  };
  auto need = [&](FlatRange r) {
    if (needed) needed(r);
  };

  // LM head (tied to wte) and final LayerNorm.
  be.softmax_cross_entropy_backward(logits_.data(), targets_.data(), dloss, N, V);
  zero(d_ln_, N * C);
  need(layout_.embeddings());
  // The tied wte gets two terms, the head's now and the embedding lookup's last. The head's is summed apart and
  // added once the gradient is complete, so each term is a sum in window order however the batch is split.
  be.matmul_backward(d_ln_.data(), head_grad_.data(), nullptr, logits_.data(), lnf_.data(), W + layout_.wte(), N,
                     T, C, V);
  zero(d_stream_, N * C);
  need(layout_.final_norm());
  const float* last = c.layers > 0 ? layers_.back().out.data() : embedded_.data();
  be.layernorm_backward(d_stream_.data(), G + layout_.lnf_w(), G + layout_.lnf_b(), d_ln_.data(), last,
                        W + layout_.lnf_w(), lnf_mean_.data(), lnf_rstd_.data(), N, C);
  notify(layout_.final_norm());

  // Blocks, last first. d_stream_ holds ∂loss/∂(block output) and becomes ∂loss/∂(block input) in place: the
  // residual connections pass it through unchanged and each branch adds its own term.
  for (int l = c.layers - 1; l >= 0; --l) {
    const BlockOffsets& p = layout_.block(l);
    LayerActivations& a = layers_[l];
    const float* x = l > 0 ? layers_[l - 1].out.data() : embedded_.data();
    need(layout_.block_range(l));
    // MLP branch: out = res2 + fc_proj(gelu(fc(ln2(res2)))).
    zero(d_fch_gelu_, N * 4 * C);
    be.matmul_backward(d_fch_gelu_.data(), G + p.fc_proj_w, G + p.fc_proj_b, d_stream_.data(), a.fch_gelu.data(),
                       W + p.fc_proj_w, N, T, 4 * C, C);
    zero(d_fch_, N * 4 * C);
    be.gelu_backward(d_fch_.data(), a.fch.data(), d_fch_gelu_.data(), N * 4 * C);
    zero(d_ln_, N * C);
    be.matmul_backward(d_ln_.data(), G + p.fc_w, G + p.fc_b, d_fch_.data(), a.ln2.data(), W + p.fc_w, N, T, C, 4 * C);
    be.layernorm_backward(d_stream_.data(), G + p.ln2_w, G + p.ln2_b, d_ln_.data(), a.res2.data(), W + p.ln2_w,
                          a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
    // Attention branch: res2 = x + attn_proj(attention(qkv(ln1(x)))).
    zero(d_atty_, N * C);
    be.matmul_backward(d_atty_.data(), G + p.attn_proj_w, G + p.attn_proj_b, d_stream_.data(), a.atty.data(),
                       W + p.attn_proj_w, N, T, C, C);
    zero(d_qkv_, N * 3 * C);
    be.attention_backward(d_qkv_.data(), d_atty_.data(), a.qkv.data(), a.probs.data(), n_, T, C, NH);
    zero(d_ln_, N * C);
    be.matmul_backward(d_ln_.data(), G + p.qkv_w, G + p.qkv_b, d_qkv_.data(), a.ln1.data(), W + p.qkv_w, N, T, C,
                       3 * C);
    be.layernorm_backward(d_stream_.data(), G + p.ln1_w, G + p.ln1_b, d_ln_.data(), x, W + p.ln1_w,
                          a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
    notify(layout_.block_range(l));
  }

  be.embedding_backward(G + layout_.wte(), G + layout_.wpe(), d_stream_.data(), inputs_.data(), N, T, C);
  if (completes_gradient) {
    be.accumulate(G + layout_.wte(), head_grad_.data(), head_grad_.size());
    std::fill(head_grad_.begin(), head_grad_.end(), 0.0f);
  }
  notify(layout_.embeddings());
}

std::size_t Gpt::activation_bytes() const {
  std::size_t floats = embedded_.capacity() + head_grad_.capacity() + lnf_.capacity() + lnf_mean_.capacity() + lnf_rstd_.capacity() +
                       logits_.capacity() + losses_.capacity() + d_stream_.capacity() + d_ln_.capacity() +
                       d_qkv_.capacity() + d_atty_.capacity() + d_fch_.capacity() + d_fch_gelu_.capacity();
  for (const LayerActivations& a : layers_)
    for (const std::vector<float>* v : {&a.ln1, &a.ln1_mean, &a.ln1_rstd, &a.qkv, &a.probs, &a.atty, &a.res2, &a.ln2,
                                        &a.ln2_mean, &a.ln2_rstd, &a.fch, &a.fch_gelu, &a.out})
      floats += v->capacity();
  return floats * sizeof(float) + (inputs_.capacity() + targets_.capacity()) * sizeof(std::int32_t);
}

}  // namespace dptrain
