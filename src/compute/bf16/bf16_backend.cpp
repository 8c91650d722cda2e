// The BF16 backend (the cuda backend on a GPU): BF16 activations and weights (read in place: no weight views),
// fp32 parameter gradients (dW accumulates in fp32 through the GEMMs' β = 1), fp32 master/m/v; the kernels of
// kernels/ for everything but the GEMMs, which are GemmPlans. On a GPU every operation is issued on the device's
// compute stream and returns at once; nothing returns a value to the host. Reductions are deterministic (fixed
// orders, no float atomics), so two runs give the same bits; a window's gradient terms may depend on the batch it
// is in (cuBLASLt picks kernels by shape), so micro-batch invariance is not promised.
//
// Scratch (attention's permuted heads and score matrices, the two-stage reductions' partials) comes from one
// device buffer sized for the largest operation when the model lays out its activations (reserve_scratch).
#include "bf16_backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "dptrain/core/bf16.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/model/layout.hpp"

namespace dptrain {

namespace {

bf16* h(void* p) { return static_cast<bf16*>(p); }
const bf16* h(const void* p) { return static_cast<const bf16*>(p); }
float* f(void* p) { return static_cast<float*>(p); }
const float* f(const void* p) { return static_cast<const float*>(p); }

std::size_t aligned(std::size_t bytes) {
  return (bytes + Memory::kAlignment - 1) / Memory::kAlignment * Memory::kAlignment;
}

std::size_t total_bytes(const std::vector<std::size_t>& sizes) {
  std::size_t total = 0;
  for (std::size_t bytes : sizes) total += aligned(bytes);
  return total;
}

// The scratch of the attention: [B,NH,T,hs] BF16 heads and [B,NH,T,T] score matrices.
//   forward:  q, k, v, y; scores (fp32)
//   backward: q, k, v, dy, dq, dk, dv; dprobs (fp32), dscores (BF16)
std::vector<std::size_t> attention_forward_scratch(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const std::size_t heads = B * NH, act = B * T * C * sizeof(bf16);
  return {act, act, act, act, heads * T * T * sizeof(float)};
}
std::vector<std::size_t> attention_backward_scratch(std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const std::size_t heads = B * NH, act = B * T * C * sizeof(bf16);
  return {act, act, act, act, act, act, act, heads * T * T * sizeof(float), heads * T * T * sizeof(bf16)};
}

// An attention product in causal row blocks (gemm_plan.hpp): nothing above the diagonal is computed. plan.n = T.
std::vector<GemmPart> causal(const GemmPlan& plan) {
  return causal_row_blocks(plan, attention_causal_block(std::size_t(plan.n)));
}

// Regions of one device buffer at aligned offsets. It is sized by reserve() before the first step (the BF16
// backend's reserve_scratch); an operation asking for more than that grows it, which waits for the work in flight.
class Scratch {
 public:
  explicit Scratch(Memory& memory) : memory_(memory) {}
  void reserve(std::size_t bytes) {
    if (bytes > buffer_.bytes()) buffer_ = Buffer(memory_, bytes);
  }
  std::vector<void*> regions(const std::vector<std::size_t>& sizes) {
    reserve(total_bytes(sizes));
    std::vector<void*> out;
    std::size_t offset = 0;
    for (std::size_t bytes : sizes) {
      out.push_back(static_cast<std::byte*>(buffer_.data()) + offset);
      offset += aligned(bytes);
    }
    return out;
  }
  void* get(std::size_t bytes) { return regions({bytes})[0]; }
  std::size_t bytes() const { return buffer_.bytes(); }

 private:
  Memory& memory_;
  Buffer buffer_;
};

class Bf16Backend final : public Backend {
 public:
  Bf16Backend(std::string name, std::unique_ptr<Device> device, std::unique_ptr<Bf16Kernels> kernels,
              std::unique_ptr<GemmRunner> gemm, std::unique_ptr<FusedAttention> fused, std::string attention,
              bool fuse_epilogues)
      : name_(std::move(name)),
        device_(std::move(device)),
        kernels_(std::move(kernels)),
        gemm_(std::move(gemm)),
        fused_(std::move(fused)),
        attention_mode_(std::move(attention)),
        fuse_epilogues_(fuse_epilogues),
        scratch_(*device_) {}

  std::string name() const override { return name_; }
  Device& device() override { return *device_; }
  DType activation_dtype() const override { return DType::bf16; }
  DType weight_dtype() const override { return DType::bf16; }
  DType gradient_dtype() const override { return DType::f32; }
  BackendGuarantees guarantees() const override {
    return {
        .repeatable = true, .micro_batch_invariant = false, .row_length_invariant = gemm_->row_length_invariant()};
  }

  // A 4096³ BF16 GEMM through the model's GEMM path (cuBLASLt on a GPU), on random (not zero) data, timed with
  // the device's events over 10 back-to-back calls after 3 warm-up calls.
  double measure_gemm_flops() override {
    constexpr std::size_t n = 4096, calls = 10;
    std::vector<bf16> host(n * n);
    std::uint32_t state = 12345;
    for (bf16& x : host) {
      state = state * 1664525u + 1013904223u;
      x = to_bf16(float(int(state >> 9) % 2001 - 1000) * 1e-3f);
    }
    Device& d = *device_;
    Buffer a(d, n * n * sizeof(bf16)), b(d, n * n * sizeof(bf16)), c(d, n * n * sizeof(bf16));
    d.upload(a.data(), host.data(), a.bytes());
    d.upload(b.data(), host.data(), b.bytes());
    using R = GemmOperand;
    auto gemm = [&] {
      gemm_->run(matmul_forward_plan(n, n, n, n, false),
                 {{R::weight, a.data()}, {R::in, b.data()}, {R::out, c.data()}}, DType::bf16);
    };
    for (int i = 0; i < 3; ++i) gemm();
    const Event start = d.create_event(), end = d.create_event();
    d.record(start, d.compute_stream());
    for (std::size_t i = 0; i < calls; ++i) gemm();
    d.record(end, d.compute_stream());
    d.synchronize(end);
    const double seconds = d.elapsed_seconds(start, end);
    d.destroy(start);
    d.destroy(end);
    return 2.0 * double(n) * double(n) * double(n) * double(calls) / seconds;
  }

  // ---- compute weights: the BF16 weights themselves; views are only counted -------------------------------
  void reserve_weight_views(std::size_t, int views) override {
    if (!live_views_.empty()) throw std::logic_error("reserve_weight_views while a view is live");
    reserved_views_ = views;
  }
  const void* acquire_weights(const bf16* w, std::size_t) override {
    if (int(live_views_.size()) >= reserved_views_)
      throw std::logic_error("acquire_weights: every reserved weight view is live");
    live_views_.push_back(w);
    return w;
  }
  void release_weights(const void* view) override {
    const auto found = std::find(live_views_.begin(), live_views_.end(), view);
    if (found == live_views_.end()) throw std::logic_error("release_weights: not a live weight view");
    live_views_.erase(found);
  }
  std::size_t weight_view_bytes() const override { return 0; }

  // The largest of: attention's heads and score matrices, LayerNorm's and the biases' partial sums (the widest
  // biased product is the MLP's, 4C), an aligned copy of a bias, the squared norm's partials (over at most every
  // parameter).
  void reserve_scratch(const ModelConfig& c, std::size_t rows) override {
    const std::size_t T = std::size_t(c.seq), C = std::size_t(c.width), NH = std::size_t(c.heads), B = rows / T;
    const std::string refusal = fused_refusal(T, C, NH);
    const bool fused = refusal.empty();
    attention_name_ = fused                                 ? fused_->name()
                      : attention_mode_ == "auto" && fused_ ? fmt::format("gemm ({})", refusal)
                                                            : "gemm";
    const std::size_t attention =
        fused ? aligned(fused_->workspace_bytes(B, T, C, NH))
              : std::max(total_bytes(attention_forward_scratch(B, T, C, NH)),
                         total_bytes(attention_backward_scratch(B, T, C, NH)));
    scratch_.reserve(std::max({attention,
                               aligned(kernels_->layernorm_backward_scratch_bytes(rows, C)),
                               aligned(kernels_->bias_backward_scratch_bytes(rows, 4 * C)),
                               aligned(4 * C * sizeof(bf16)),
                               aligned(kernels_->sum_of_squares_scratch_bytes(ParameterLayout(c).total()))}));
  }
  std::size_t scratch_bytes() const override { return scratch_.bytes(); }

  // ---- how attention is computed ----------------------------------------------------------------------------
  // Why these heads are not fused, empty where they are: fused where asked for ("fused": else UserError with the
  // reason) or allowed ("auto") and the fused attention takes the heads.
  std::string fused_refusal(std::size_t T, std::size_t C, std::size_t NH) const {
    if (attention_mode_ == "gemm") return "--attention gemm";
    const std::string why =
        fused_ ? fused_->unsupported(T, C, NH) : "the " + name_ + " backend has no fused attention here";
    if (!why.empty() && attention_mode_ == "fused") throw UserError("--attention fused: " + why);
    return why;
  }
  bool use_fused(std::size_t T, std::size_t C, std::size_t NH) const { return fused_refusal(T, C, NH).empty(); }
  std::size_t attention_saved_bytes(std::size_t T, std::size_t C, std::size_t NH) const override {
    return use_fused(T, C, NH) ? T * sizeof(float) : T * T * sizeof(bf16);
  }
  std::string attention_name() const override { return attention_name_; }

  // ---- the model -------------------------------------------------------------------------------------------
  void embedding_forward(void* out, const std::int32_t* tokens, const void* wte, const void* wpe, std::size_t N,
                         std::size_t T, std::size_t C) override {
    kernels_->embedding_forward(h(out), tokens, h(wte), h(wpe), N, T, C);
  }
  void embedding_backward(void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, std::size_t N,
                          std::size_t T, std::size_t C) override {
    kernels_->embedding_backward(f(dwte), f(dwpe), h(dout), tokens, N, T, C);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* in, const void* w, const void* b,
                         std::size_t N, std::size_t C) override {
    kernels_->layernorm_forward(h(out), mean, rstd, h(in), h(w), h(b), N, C);
  }
  void layernorm_backward(void* din, void* dw, void* db, const void* dout, const void* in, const void* w,
                          const float* mean, const float* rstd, std::size_t N, std::size_t C) override {
    kernels_->layernorm_backward(h(din), f(dw), f(db), h(dout), h(in), h(w), mean, rstd, N, C,
                                 scratch_.get(kernels_->layernorm_backward_scratch_bytes(N, C)));
  }

  void matmul_forward(void* out, const void* in, const void* w, const void* bias, std::size_t N, std::size_t,
                      std::size_t C, std::size_t OC, std::size_t ld_out) override {
    using R = GemmOperand;
    gemm_->run(matmul_forward_plan(N, C, OC, ld_out, bias != nullptr), {{R::weight, w}, {R::in, in}, {R::out, out}},
               DType::bf16, aligned_bias(bias, OC));
  }
  // cuBLASLt's bias epilogue reads the bias in vectors (a less aligned one faults on GPUs), and the GEMM runner
  // takes biases at kBiasAlignment (256 bytes) only. Biases lie at any offset of the flat weights (all of GPT-2
  // small's at multiples of 256 bytes; a narrow model's at 16 or less): the others are copied into the scratch,
  // which starts at an allocation's alignment (the same values: the same bits).
  const void* aligned_bias(const void* bias, std::size_t OC) {
    if (bias == nullptr || reinterpret_cast<std::uintptr_t>(bias) % kBiasAlignment == 0) return bias;
    void* copy = scratch_.get(OC * sizeof(bf16));
    device_->copy(copy, bias, OC * sizeof(bf16));
    return copy;
  }
  // GELU in the product's epilogue where the GEMM runner has a kernel with it for the shape (cuBLASLt's
  // GELU_AUX_BIAS and DGELU; gemm_activation_fusable), else the composition, the shape noted. The residual always:
  // it is C. Unless told to compose (--matmul-epilogues composed).
  bool fuses_matmul_epilogues() const override { return fuse_epilogues_; }
  std::string matmul_epilogues() const override {
    if (!fuse_epilogues_) return "composed";
    std::string words = "GELU and the residual in the GEMM epilogues";
    if (!composed_.empty()) words += "; GELU composed for";
    for (const auto& [what, N, C, OC, fusable] : composed_)
      words += fmt::format(" [{} {}×{}→{}: {}]", what, N, C, OC,
                           fusable ? "no kernel took the epilogue" : "k or the row length not a multiple of 8");
    return words;
  }
  // Runs `plan` with its activation where it can; false (the shape noted) where the caller must compose.
  bool fused_activation(const GemmPlan& plan, std::initializer_list<GemmTensor> tensors, const void* bias,
                        std::string_view what, std::size_t N, std::size_t C, std::size_t OC) {
    const bool fusable = gemm_activation_fusable(plan);
    if (fusable && gemm_->try_run_with_activation(plan, tensors, bias)) return true;
    composed_.insert({what, N, C, OC, fusable});  // every step: a lookup, no formatting
    return false;
  }
  void matmul_residual_forward(void* out, const void* residual, const void* in, const void* w, const void* bias,
                               std::size_t N, std::size_t T, std::size_t C, std::size_t OC) override {
    if (!fuse_epilogues_) return Backend::matmul_residual_forward(out, residual, in, w, bias, N, T, C, OC);
    using R = GemmOperand;
    gemm_->run(with_residual(matmul_forward_plan(N, C, OC, OC, bias != nullptr)),
               {{R::weight, w}, {R::in, in}, {R::out, out}, {R::residual, residual}}, DType::bf16,
               aligned_bias(bias, OC));
  }
  void matmul_gelu_forward(void* out, void* pre, const void* in, const void* w, const void* bias, std::size_t N,
                           std::size_t T, std::size_t C, std::size_t OC) override {
    using R = GemmOperand;
    if (fuse_epilogues_ && fused_activation(matmul_forward_plan(N, C, OC, OC, bias != nullptr, GemmActivation::gelu),
                                            {{R::weight, w}, {R::in, in}, {R::out, out}, {R::pre, pre}},
                                            aligned_bias(bias, OC), "gelu forward", N, C, OC))
      return;
    Backend::matmul_gelu_forward(out, pre, in, w, bias, N, T, C, OC);
  }
  void gelu_matmul_backward(void* dpre, void* dw, void* dbias, const void* dout, const void* in, const void* w,
                            const void* pre, std::size_t N, std::size_t T, std::size_t C, std::size_t OC) override {
    using R = GemmOperand;
    if (!fuse_epilogues_ || !fused_activation(matmul_backward_input_plan(N, C, OC, OC, GemmActivation::dgelu),
                                              {{R::weight, w}, {R::dout, dout}, {R::din, dpre}, {R::pre, pre}},
                                              nullptr, "gelu backward", N, C, OC))
      return Backend::gelu_matmul_backward(dpre, dw, dbias, dout, in, w, pre, N, T, C, OC);
    matmul_backward(nullptr, dw, dbias, dout, in, w, N, T, C, OC, OC);  // the parameter gradients
  }
  void matmul_backward(void* din, void* dw, void* dbias, const void* dout, const void* in, const void* w,
                       std::size_t N, std::size_t, std::size_t C, std::size_t OC, std::size_t ld_out) override {
    using R = GemmOperand;
    if (din)
      gemm_->run(matmul_backward_input_plan(N, C, OC, ld_out), {{R::weight, w}, {R::dout, dout}, {R::din, din}},
                 DType::bf16);
    gemm_->run(matmul_backward_weight_plan(N, C, OC, ld_out), {{R::in, in}, {R::dout, dout}, {R::dweight, dw}},
               DType::f32);
    if (dbias)
      kernels_->bias_backward(f(dbias), h(dout), N, OC, ld_out,
                              scratch_.get(kernels_->bias_backward_scratch_bytes(N, OC)));
  }

  // Attention as permute + strided-batched GEMMs over the B·NH heads in causal row blocks + the causal softmax
  // kernels.
  void attention_forward(void* out, void* saved, const void* qkv, std::size_t B, std::size_t T, std::size_t C,
                         std::size_t NH) override {
    if (use_fused(T, C, NH))
      return fused_->forward(h(out), f(saved), h(qkv), B, T, C, NH,
                             scratch_.get(fused_->workspace_bytes(B, T, C, NH)));
    bf16* probs = h(saved);  // [B,NH,T,T]
    const std::size_t heads = B * NH;
    const auto r = scratch_.regions(attention_forward_scratch(B, T, C, NH));
    bf16 *q = h(r[0]), *k = h(r[1]), *v = h(r[2]), *y = h(r[3]);  // [B,NH,T,hs]
    float* scores = f(r[4]);                                      // [B,NH,T,T]
    kernels_->permute_qkv(q, k, v, h(qkv), B, T, C, NH);
    using R = GemmOperand;
    gemm_->run(causal(attention_scores_plan(B, T, C, NH)), {{R::q, q}, {R::k, k}, {R::scores, scores}}, DType::f32);
    kernels_->causal_softmax_forward(probs, scores, heads, T);
    gemm_->run(causal(attention_output_plan(B, T, C, NH)), {{R::probs, probs}, {R::v, v}, {R::y, y}}, DType::bf16);
    kernels_->unpermute(h(out), y, B, T, C, NH);
  }
  void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const void* saved,
                          std::size_t B, std::size_t T, std::size_t C, std::size_t NH) override {
    if (use_fused(T, C, NH))
      return fused_->backward(h(dqkv), h(dout), h(qkv), h(out), f(saved), B, T, C, NH,
                              scratch_.get(fused_->workspace_bytes(B, T, C, NH)));
    const bf16* probs = h(saved);  // [B,NH,T,T]
    const std::size_t heads = B * NH;
    const auto r = scratch_.regions(attention_backward_scratch(B, T, C, NH));
    bf16 *q = h(r[0]), *k = h(r[1]), *v = h(r[2]), *dy = h(r[3]), *dq = h(r[4]), *dk = h(r[5]), *dv = h(r[6]);
    float* dprobs = f(r[7]);  // [B,NH,T,T]
    bf16* dscores = h(r[8]);  // [B,NH,T,T]
    kernels_->permute_qkv(q, k, v, h(qkv), B, T, C, NH);
    kernels_->permute_heads(dy, h(dout), B, T, C, NH);
    using R = GemmOperand;
    gemm_->run(causal(attention_dprobs_plan(B, T, C, NH)), {{R::dy, dy}, {R::v, v}, {R::dprobs, dprobs}}, DType::f32);
    gemm_->run(causal(attention_dv_plan(B, T, C, NH)), {{R::probs, probs}, {R::dy, dy}, {R::dv, dv}}, DType::bf16);
    kernels_->causal_softmax_backward(dscores, probs, dprobs, heads, T);
    gemm_->run(causal(attention_dq_plan(B, T, C, NH)), {{R::dscores, dscores}, {R::k, k}, {R::dq, dq}}, DType::bf16);
    gemm_->run(causal(attention_dk_plan(B, T, C, NH)), {{R::dscores, dscores}, {R::q, q}, {R::dk, dk}}, DType::bf16);
    kernels_->unpermute_qkv(h(dqkv), dq, dk, dv, B, T, C, NH);
  }

  void gelu_forward(void* out, const void* in, std::size_t n) override { kernels_->gelu_forward(h(out), h(in), n); }
  void gelu_backward(void* din, const void* in, const void* dout, std::size_t n) override {
    kernels_->gelu_backward(h(din), h(in), h(dout), n);
  }
  void accumulate(void* out, const void* a, std::size_t n, DType dtype) override { reduce_add(out, a, n, dtype); }

  void softmax_cross_entropy(void* logits, float* losses, const std::int32_t* targets, std::size_t N, std::size_t V,
                             std::size_t ld, float dloss, double* loss_sum) override {
    kernels_->classifier(h(logits), losses, targets, dloss, N, V, ld, loss_sum);
  }

  // ---- gradients and the optimizer -------------------------------------------------------------------------
  void cast(const void* in, DType from, void* out, DType to, std::size_t n) override {
    if (from == to) {
      device_->copy(out, in, n * element_size(from));
    } else if (from == DType::f32) {
      kernels_->cast_f32_to_bf16(h(out), f(in), n);
    } else {
      kernels_->cast_bf16_to_f32(f(out), h(in), n);
    }
  }
  void reduce_add(void* acc, const void* incoming, std::size_t n, DType dtype) override {
    if (dtype == DType::bf16) {
      kernels_->add_bf16(h(acc), h(incoming), n);
    } else {
      kernels_->add_f32(f(acc), f(incoming), n);
    }
  }
  void sum_of_squares(const void* grad, std::size_t n, DType dtype, double* acc) override {
    void* partials = scratch_.get(kernels_->sum_of_squares_scratch_bytes(n));
    if (dtype == DType::bf16) {
      kernels_->sum_of_squares_bf16(acc, h(grad), n, partials);
    } else {
      kernels_->sum_of_squares_f32(acc, f(grad), n, partials);
    }
  }
  void adamw(float* master, float* m, float* v, bf16* weights, const void* grad, DType dtype, std::size_t n,
             const AdamWParams& p) override {
    const AdamWStep step{p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale, p.step};
    if (dtype == DType::bf16) {
      kernels_->adamw_bf16_grad(master, m, v, weights, h(grad), n, step);
    } else {
      kernels_->adamw_f32_grad(master, m, v, weights, f(grad), n, step);
    }
  }

 private:
  std::string name_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Bf16Kernels> kernels_;
  std::unique_ptr<GemmRunner> gemm_;
  std::unique_ptr<FusedAttention> fused_;
  std::string attention_mode_;
  std::string attention_name_ = "gemm";  // of the shape reserve_scratch was given
  bool fuse_epilogues_;
  Scratch scratch_;
  int reserved_views_ = 0;
  std::vector<const void*> live_views_;
  // The GELU products that ran as the composition: (what, N, C, OC, whether the shape was fusable).
  std::set<std::tuple<std::string_view, std::size_t, std::size_t, std::size_t, bool>> composed_;
};

}  // namespace

std::unique_ptr<Backend> make_bf16_backend(std::string name, std::unique_ptr<Device> device,
                                           std::unique_ptr<Bf16Kernels> kernels, std::unique_ptr<GemmRunner> gemm,
                                           std::unique_ptr<FusedAttention> fused, std::string attention,
                                           bool fuse_epilogues) {
  return std::make_unique<Bf16Backend>(std::move(name), std::move(device), std::move(kernels), std::move(gemm),
                                       std::move(fused), std::move(attention), fuse_epilogues);
}

}  // namespace dptrain
