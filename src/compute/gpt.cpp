// Forward and backward of the GPT-2 model over the Backend's operations (pre-LayerNorm blocks, tied LM head).
#include "dptrain/compute/gpt.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "dptrain/core/error.hpp"

namespace dptrain {

namespace {

const std::byte* offset_bytes(const void* base, std::size_t elements, std::size_t element_bytes) {
  return static_cast<const std::byte*>(base) + elements * element_bytes;
}

}  // namespace

WeightAccess whole_weights(const void* view, DType dtype) {
  return {[view, dtype](FlatRange r) -> const void* { return offset_bytes(view, r.begin, element_size(dtype)); }};
}

Gpt::Gpt(const ParameterLayout& layout, Backend& backend, std::size_t max_windows)
    : layout_(layout),
      backend_(backend),
      device_(backend.device()),
      max_windows_(max_windows),
      act_bytes_(element_size(backend.activation_dtype())),
      grad_bytes_(element_size(backend.gradient_dtype())) {
  const ModelConfig& c = layout.config();
  const std::size_t N = max_windows * c.seq, C = c.width, T = c.seq, V = c.vocab;
  ActivationArena& a = arena_;
  const std::size_t A = act_bytes_, F = sizeof(float);
  // The backend's scratch first: it settles how attention is computed, and so what attention saves per head.
  backend.reserve_scratch(c, N);
  const std::size_t saved = backend.attention_saved_bytes(T, C, std::size_t(c.heads));
  const auto inputs = a.add("inputs", N, sizeof(std::int32_t)), targets = a.add("targets", N, sizeof(std::int32_t));
  const auto embedded = a.add("embedded", N * C, A);
  struct LayerIds {
    ActivationArena::Id ln1, ln1_mean, ln1_rstd, qkv, att_saved, atty, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
        out;
  };
  std::vector<LayerIds> ids;
  for (int l = 0; l < c.layers; ++l) {
    auto name = [l](const char* what) { return fmt::format("h.{}.{}", l, what); };
    ids.push_back({a.add(name("ln1"), N * C, A), a.add(name("ln1_mean"), N, F), a.add(name("ln1_rstd"), N, F),
                   a.add(name("qkv"), N * 3 * C, A), a.add(name("att_saved"), max_windows * c.heads * saved, 1),
                   a.add(name("atty"), N * C, A), a.add(name("res2"), N * C, A), a.add(name("ln2"), N * C, A),
                   a.add(name("ln2_mean"), N, F), a.add(name("ln2_rstd"), N, F), a.add(name("fch"), N * 4 * C, A),
                   a.add(name("fch_gelu"), N * 4 * C, A), a.add(name("out"), N * C, A)});
  }
  const auto lnf = a.add("lnf", N * C, A), lnf_mean = a.add("lnf_mean", N, F), lnf_rstd = a.add("lnf_rstd", N, F);
  const auto logits = a.add("logits", N * c.logits_row_length(), A), losses = a.add("losses", N, F);
  const auto head_grad = a.add("head_grad", V * C, grad_bytes_);
  const auto d_stream = a.add("d_stream", N * C, A), d_ln = a.add("d_ln", N * C, A);
  const auto d_qkv = a.add("d_qkv", N * 3 * C, A), d_atty = a.add("d_atty", N * C, A);
  const auto d_fch = a.add("d_fch", N * 4 * C, A);
  a.allocate(device_);

  inputs_ = a.as<std::int32_t>(inputs), targets_ = a.as<std::int32_t>(targets);
  embedded_ = a.data(embedded);
  for (const LayerIds& i : ids)
    layers_.push_back({a.data(i.ln1), a.as<float>(i.ln1_mean), a.as<float>(i.ln1_rstd), a.data(i.qkv),
                       a.data(i.att_saved), a.data(i.atty), a.data(i.res2), a.data(i.ln2), a.as<float>(i.ln2_mean),
                       a.as<float>(i.ln2_rstd), a.data(i.fch), a.data(i.fch_gelu), a.data(i.out)});
  lnf_ = a.data(lnf), lnf_mean_ = a.as<float>(lnf_mean), lnf_rstd_ = a.as<float>(lnf_rstd);
  logits_ = a.data(logits), losses_ = a.as<float>(losses);
  head_grad_ = a.data(head_grad);
  device_.zero(head_grad_, V * C * grad_bytes_);
  d_stream_ = a.data(d_stream), d_ln_ = a.data(d_ln), d_qkv_ = a.data(d_qkv), d_atty_ = a.data(d_atty);
  d_fch_ = a.data(d_fch);
  host_tokens_.resize(2 * N);
}

// The compute weights of flat element `offset`, inside range r whose view starts at `base`.
const void* Gpt::weight_at(const void* base, FlatRange r, std::size_t offset) const {
  return offset_bytes(base, offset - r.begin, element_size(backend_.weight_dtype()));
}

void* Gpt::grad_at(void* grads, std::size_t offset) const {
  return static_cast<std::byte*>(grads) + offset * grad_bytes_;
}

// A pass over no windows (ZeRO-3 evaluation: every rank makes as many passes as the rank with the most windows)
// computes nothing — a GPU refuses a launch over no rows — but acquires and releases the weights as a pass does,
// so that its ranges' all-gathers stay in step with the other ranks'.
void Gpt::walk_weights(const WeightAccess& weights) const {
  const FlatRange emb = layout_.embeddings(), fin = layout_.final_norm();
  weights.acquire(emb);
  for (int l = 0; l < layout_.config().layers; ++l) {
    weights.acquire(layout_.block_range(l));
    weights.release(layout_.block_range(l));
  }
  weights.acquire(fin);
  weights.release(fin);
  weights.acquire(emb);  // the tied head
  weights.release(emb);
  weights.release(emb);
}

void Gpt::forward(const std::int32_t* windows, std::size_t n, const WeightAccess& weights, double* loss_sum,
                  float dloss) {
  DP_ASSERT(n <= max_windows_);
  n_ = n;
  backward_dloss_ = dloss;
  if (n == 0) return walk_weights(weights);
  const ModelConfig& c = layout_.config();
  const std::size_t T = c.seq, C = c.width, V = c.vocab, Vp = c.logits_row_length(), NH = c.heads, N = n * T;
  // Inputs [:, :Q] and targets [:, 1:] side by side on the host, then one upload (they are adjacent in the arena
  // only when n = max_windows, so two).
  for (std::size_t w = 0; w < n; ++w) {
    std::copy_n(windows + w * (T + 1), T, host_tokens_.data() + w * T);
    std::copy_n(windows + w * (T + 1) + 1, T, host_tokens_.data() + N + w * T);
  }
  device_.upload_in_order(inputs_, host_tokens_.data(), N * sizeof(std::int32_t));
  device_.upload_in_order(targets_, host_tokens_.data() + N, N * sizeof(std::int32_t));
  Backend& be = backend_;

  const FlatRange emb = layout_.embeddings();
  const void* E = weights.acquire(emb);
  be.embedding_forward(embedded_, inputs_, weight_at(E, emb, layout_.wte()), weight_at(E, emb, layout_.wpe()), N, T, C);
  const void* x = embedded_;
  for (int l = 0; l < c.layers; ++l) {
    const BlockOffsets& p = layout_.block(l);
    const FlatRange r = layout_.block_range(l);
    LayerActivations& a = layers_[l];
    const void* W = weights.acquire(r);
    auto w = [&](std::size_t offset) { return weight_at(W, r, offset); };
    be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w(p.ln1_w), w(p.ln1_b), N, C);
    be.matmul_forward(a.qkv, a.ln1, w(p.qkv_w), w(p.qkv_b), N, T, C, 3 * C, 3 * C);
    be.attention_forward(a.atty, a.att_saved, a.qkv, n, T, C, NH);
    be.matmul_residual_forward(a.res2, x, a.atty, w(p.attn_proj_w), w(p.attn_proj_b), N, T, C, C);
    be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, w(p.ln2_w), w(p.ln2_b), N, C);
    be.matmul_gelu_forward(a.fch_gelu, a.fch, a.ln2, w(p.fc_w), w(p.fc_b), N, T, C, 4 * C);
    be.matmul_residual_forward(a.out, a.res2, a.fch_gelu, w(p.fc_proj_w), w(p.fc_proj_b), N, T, 4 * C, C);
    weights.release(r);
    x = a.out;
  }
  const FlatRange fin = layout_.final_norm();
  const void* F = weights.acquire(fin);
  be.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, x, weight_at(F, fin, layout_.lnf_w()),
                       weight_at(F, fin, layout_.lnf_b()), N, C);
  weights.release(fin);
  const void* head = weights.acquire(emb);  // the tied head
  be.matmul_forward(logits_, lnf_, weight_at(head, emb, layout_.wte()), nullptr, N, T, C, V, Vp);
  weights.release(emb);
  weights.release(emb);
  be.softmax_cross_entropy(logits_, losses_, targets_, N, V, Vp, dloss, loss_sum);
}

void Gpt::backward(const WeightAccess& weights, void* G, const GradientReady& ready, bool completes_gradient) {
  DP_ASSERT(n_ == 0 || backward_dloss_ != 0.0f);  // a forward that made the logits' gradient, not used yet
  backward_dloss_ = 0.0f;
  const ModelConfig& c = layout_.config();
  const std::size_t T = c.seq, C = c.width, V = c.vocab, Vp = c.logits_row_length(), NH = c.heads, N = n_ * T;
  Backend& be = backend_;
  auto g = [&](std::size_t offset) { return grad_at(G, offset); };
  auto notify = [&](FlatRange r) {
    if (ready) ready(r);
  };

  // LM head (tied to wte) and final LayerNorm; the forward left the logits' gradient in logits_.
  const FlatRange emb = layout_.embeddings();
  const void* head = weights.acquire(emb);
  // The tied wte gets two terms, the head's now and the embedding lookup's last. The head's is summed apart and
  // added once the gradient is complete, so each term is a sum in window order however the batch is split.
  be.matmul_backward(d_ln_, head_grad_, nullptr, logits_, lnf_, weight_at(head, emb, layout_.wte()), N, T, C, V,
                     Vp);
  weights.release(emb);
  // The residual stream's gradient is the one sum of terms (LayerNorm backward adds into it); every other activation
  // gradient is written whole by the op that makes it (matmul, attention, GELU backward) and needs no clearing.
  device_.zero(d_stream_, N * C * act_bytes_);
  const FlatRange fin = layout_.final_norm();
  const void* F = weights.acquire(fin);
  const void* last = c.layers > 0 ? layers_.back().out : embedded_;
  be.layernorm_backward(d_stream_, g(layout_.lnf_w()), g(layout_.lnf_b()), d_ln_, last,
                        weight_at(F, fin, layout_.lnf_w()), lnf_mean_, lnf_rstd_, N, C);
  weights.release(fin);
  notify(fin);

  // Blocks, last first. d_stream_ holds ∂loss/∂(block output) and becomes ∂loss/∂(block input) in place: the
  // residual connections pass it through unchanged and each branch adds its own term.
  for (int l = c.layers - 1; l >= 0; --l) {
    const BlockOffsets& p = layout_.block(l);
    const FlatRange r = layout_.block_range(l);
    LayerActivations& a = layers_[l];
    const void* x = l > 0 ? layers_[l - 1].out : embedded_;
    const void* W = weights.acquire(r);
    auto w = [&](std::size_t offset) { return weight_at(W, r, offset); };
    // MLP branch: out = res2 + fc_proj(gelu(fc(ln2(res2)))).
    be.gelu_matmul_backward(d_fch_, g(p.fc_proj_w), g(p.fc_proj_b), d_stream_, a.fch_gelu, w(p.fc_proj_w), a.fch, N,
                            T, 4 * C, C);
    be.matmul_backward(d_ln_, g(p.fc_w), g(p.fc_b), d_fch_, a.ln2, w(p.fc_w), N, T, C, 4 * C, 4 * C);
    be.layernorm_backward(d_stream_, g(p.ln2_w), g(p.ln2_b), d_ln_, a.res2, w(p.ln2_w), a.ln2_mean, a.ln2_rstd, N,
                          C);
    // Attention branch: res2 = x + attn_proj(attention(qkv(ln1(x)))).
    be.matmul_backward(d_atty_, g(p.attn_proj_w), g(p.attn_proj_b), d_stream_, a.atty, w(p.attn_proj_w), N, T, C, C,
                       C);
    be.attention_backward(d_qkv_, d_atty_, a.qkv, a.atty, a.att_saved, n_, T, C, NH);
    be.matmul_backward(d_ln_, g(p.qkv_w), g(p.qkv_b), d_qkv_, a.ln1, w(p.qkv_w), N, T, C, 3 * C, 3 * C);
    be.layernorm_backward(d_stream_, g(p.ln1_w), g(p.ln1_b), d_ln_, x, w(p.ln1_w), a.ln1_mean, a.ln1_rstd, N, C);
    weights.release(r);
    notify(r);
  }

  be.embedding_backward(g(layout_.wte()), g(layout_.wpe()), d_stream_, inputs_, N, T, C);
  if (completes_gradient) {
    be.accumulate(g(layout_.wte()), head_grad_, V * C, be.gradient_dtype());
    device_.zero(head_grad_, V * C * grad_bytes_);
  }
  notify(emb);
}

}  // namespace dptrain
