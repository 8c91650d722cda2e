// The cuda backend: the model's operations on one GPU. BF16 activations and weights (read in place: no weight
// views), fp32 parameter gradients (dW accumulates in fp32 through cuBLASLt's β = 1), fp32 master/m/v; kernels of
// kernels/ for everything but the GEMMs, which are cuBLASLt's (GemmPlan). Every operation is issued on the
// device's compute stream and returns at once; nothing returns a value to the host. Reductions are deterministic
// (fixed orders, no float atomics), so two runs give the same bits; a window's gradient terms may depend on the
// batch it is in (cuBLASLt picks kernels by shape), so micro-batch invariance is not promised.
//
// Scratch (attention's permuted heads and score matrices, the two-stage reductions' partials) comes from one
// device buffer that grows to the largest request: it reaches its size in the first step and is not reallocated
// after (a growth waits for the work in flight, as cudaFree does).
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include "cublaslt_gemm.hpp"
#include "cuda_check.hpp"
#include "cuda_device.hpp"
#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/gemm_plan.hpp"
#include "dptrain/core/bf16.hpp"
#include "dptrain/core/error.hpp"
#include "kernel_launches.hpp"

namespace dptrain {

namespace {

using cuda::CudaDevice;
namespace launch = cuda::launch;

bf16* h(void* p) { return static_cast<bf16*>(p); }
const bf16* h(const void* p) { return static_cast<const bf16*>(p); }
float* f(void* p) { return static_cast<float*>(p); }
const float* f(const void* p) { return static_cast<const float*>(p); }

// Regions of one growing device buffer, at aligned offsets.
class Scratch {
 public:
  explicit Scratch(Memory& memory) : memory_(memory) {}
  std::vector<void*> regions(std::initializer_list<std::size_t> sizes) {
    std::vector<std::size_t> offsets;
    std::size_t total = 0;
    for (std::size_t bytes : sizes) {
      offsets.push_back(total);
      total += (bytes + Memory::kAlignment - 1) / Memory::kAlignment * Memory::kAlignment;
    }
    if (total > buffer_.bytes()) buffer_ = Buffer(memory_, total);
    std::vector<void*> out;
    for (std::size_t offset : offsets) out.push_back(static_cast<std::byte*>(buffer_.data()) + offset);
    return out;
  }
  void* get(std::size_t bytes) { return regions({bytes})[0]; }
  std::size_t bytes() const { return buffer_.bytes(); }

 private:
  Memory& memory_;
  Buffer buffer_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int gpu) : device_(gpu), gemm_(device_), scratch_(device_) {}

  std::string name() const override { return "cuda"; }
  Device& device() override { return device_; }
  DType activation_dtype() const override { return DType::bf16; }
  DType weight_dtype() const override { return DType::bf16; }
  DType gradient_dtype() const override { return DType::f32; }
  BackendGuarantees guarantees() const override { return {.repeatable = true, .micro_batch_invariant = false}; }

  // A 4096³ BF16 GEMM through the same cuBLASLt path as the model's, on random (not zero) data, timed with events
  // over 10 back-to-back calls after 3 warm-up calls.
  double measure_gemm_flops() override {
    constexpr std::size_t n = 4096, calls = 10;
    std::vector<bf16> host(n * n);
    std::uint32_t state = 12345;
    for (bf16& x : host) {
      state = state * 1664525u + 1013904223u;
      x = to_bf16(float(int(state >> 9) % 2001 - 1000) * 1e-3f);
    }
    Buffer a(device_, n * n * sizeof(bf16)), b(device_, n * n * sizeof(bf16)), c(device_, n * n * sizeof(bf16));
    device_.upload(a.data(), host.data(), a.bytes());
    device_.upload(b.data(), host.data(), b.bytes());
    using R = GemmOperand;
    auto gemm = [&] {
      gemm_.run(matmul_forward_plan(n, n, n, false), {{R::weight, a.data()}, {R::in, b.data()}, {R::out, c.data()}},
                CUDA_R_16BF, stream());
    };
    for (int i = 0; i < 3; ++i) gemm();
    const Event start = device_.create_event(), end = device_.create_event();
    device_.record(start, device_.compute_stream());
    for (std::size_t i = 0; i < calls; ++i) gemm();
    device_.record(end, device_.compute_stream());
    device_.synchronize(end);
    const double seconds = device_.elapsed_seconds(start, end);
    device_.destroy(start);
    device_.destroy(end);
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

  // ---- the model -------------------------------------------------------------------------------------------
  void embedding_forward(void* out, const std::int32_t* tokens, const void* wte, const void* wpe, std::size_t N,
                         std::size_t T, std::size_t C) override {
    launch::embedding_forward(stream(), h(out), tokens, h(wte), h(wpe), N, T, C);
  }
  void embedding_backward(void* dwte, void* dwpe, const void* dout, const std::int32_t* tokens, std::size_t N,
                          std::size_t T, std::size_t C) override {
    launch::embedding_backward(stream(), f(dwte), f(dwpe), h(dout), tokens, N, T, C);
  }
  void layernorm_forward(void* out, float* mean, float* rstd, const void* in, const void* w, const void* b,
                         std::size_t N, std::size_t C) override {
    launch::layernorm_forward(stream(), h(out), mean, rstd, h(in), h(w), h(b), N, C);
  }
  void layernorm_backward(void* din, void* dw, void* db, const void* dout, const void* in, const void* w,
                          const float* mean, const float* rstd, std::size_t N, std::size_t C) override {
    launch::layernorm_backward(stream(), h(din), f(dw), f(db), h(dout), h(in), h(w), mean, rstd, N, C,
                               scratch_.get(launch::layernorm_backward_scratch_bytes(N, C)));
  }

  void matmul_forward(void* out, const void* in, const void* w, const void* bias, std::size_t N, std::size_t,
                      std::size_t C, std::size_t OC) override {
    using R = GemmOperand;
    gemm_.run(matmul_forward_plan(N, C, OC, bias != nullptr), {{R::weight, w}, {R::in, in}, {R::out, out}},
              CUDA_R_16BF, stream(), bias);
  }
  void matmul_backward(void* din, void* dw, void* dbias, const void* dout, const void* in, const void* w,
                       std::size_t N, std::size_t, std::size_t C, std::size_t OC) override {
    using R = GemmOperand;
    if (din)
      gemm_.run(matmul_backward_input_plan(N, C, OC), {{R::weight, w}, {R::dout, dout}, {R::din, din}}, CUDA_R_16BF,
                stream());
    gemm_.run(matmul_backward_weight_plan(N, C, OC), {{R::in, in}, {R::dout, dout}, {R::dweight, dw}}, CUDA_R_32F,
              stream());
    if (dbias)
      launch::bias_backward(stream(), f(dbias), h(dout), N, OC,
                            scratch_.get(launch::bias_backward_scratch_bytes(N, OC)));
  }

  // Attention as permute + strided-batched GEMMs over the B·NH heads + the causal softmax kernels.
  void attention_forward(void* out, void* probs, const void* qkv, std::size_t B, std::size_t T, std::size_t C,
                         std::size_t NH) override {
    const std::size_t heads = B * NH, N = B * T;
    const auto r = scratch_.regions({N * C * 2, N * C * 2, N * C * 2, N * C * 2, heads * T * T * 4});
    bf16 *q = h(r[0]), *k = h(r[1]), *v = h(r[2]), *y = h(r[3]);  // [B,NH,T,hs]
    float* scores = f(r[4]);                                       // [B,NH,T,T]
    launch::permute_qkv(stream(), q, k, v, h(qkv), B, T, C, NH);
    using R = GemmOperand;
    gemm_.run(attention_scores_plan(B, T, C, NH), {{R::q, q}, {R::k, k}, {R::scores, scores}}, CUDA_R_32F, stream());
    launch::causal_softmax_forward(stream(), h(probs), scores, heads, T);
    gemm_.run(attention_output_plan(B, T, C, NH), {{R::probs, probs}, {R::v, v}, {R::y, y}}, CUDA_R_16BF, stream());
    launch::unpermute(stream(), h(out), y, B, T, C, NH);
  }
  void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* probs, std::size_t B,
                          std::size_t T, std::size_t C, std::size_t NH) override {
    const std::size_t heads = B * NH, N = B * T, act = N * C * 2;
    const auto r = scratch_.regions({act, act, act, act, act, act, act, heads * T * T * 4, heads * T * T * 2});
    bf16 *q = h(r[0]), *k = h(r[1]), *v = h(r[2]), *dy = h(r[3]), *dq = h(r[4]), *dk = h(r[5]), *dv = h(r[6]);
    float* dprobs = f(r[7]);  // [B,NH,T,T]
    bf16* dscores = h(r[8]);  // [B,NH,T,T]
    launch::permute_qkv(stream(), q, k, v, h(qkv), B, T, C, NH);
    launch::permute_heads(stream(), dy, h(dout), B, T, C, NH);
    using R = GemmOperand;
    gemm_.run(attention_dprobs_plan(B, T, C, NH), {{R::dy, dy}, {R::v, v}, {R::dprobs, dprobs}}, CUDA_R_32F, stream());
    gemm_.run(attention_dv_plan(B, T, C, NH), {{R::probs, probs}, {R::dy, dy}, {R::dv, dv}}, CUDA_R_16BF, stream());
    launch::causal_softmax_backward(stream(), dscores, h(probs), dprobs, heads, T);
    gemm_.run(attention_dq_plan(B, T, C, NH), {{R::dscores, dscores}, {R::k, k}, {R::dq, dq}}, CUDA_R_16BF, stream());
    gemm_.run(attention_dk_plan(B, T, C, NH), {{R::dscores, dscores}, {R::q, q}, {R::dk, dk}}, CUDA_R_16BF, stream());
    launch::unpermute_accumulate_qkv(stream(), h(dqkv), dq, dk, dv, B, T, C, NH);
  }

  void gelu_forward(void* out, const void* in, std::size_t n) override {
    launch::gelu_forward(stream(), h(out), h(in), n);
  }
  void gelu_backward(void* din, const void* in, const void* dout, std::size_t n) override {
    launch::gelu_backward(stream(), h(din), h(in), h(dout), n);
  }
  void accumulate(void* out, const void* a, std::size_t n, DType dtype) override { reduce_add(out, a, n, dtype); }

  void softmax_cross_entropy_forward(void* logits, float* losses, const std::int32_t* targets, std::size_t N,
                                     std::size_t V, double* loss_sum) override {
    launch::classifier_forward(stream(), h(logits), losses, targets, N, V, loss_sum);
  }
  void softmax_cross_entropy_backward(void* probs, const float* losses, const std::int32_t* targets, float dloss,
                                      std::size_t N, std::size_t V) override {
    launch::classifier_backward(stream(), h(probs), losses, targets, dloss, N, V);
  }

  // ---- gradients and the optimizer -------------------------------------------------------------------------
  void cast(const void* in, DType from, void* out, DType to, std::size_t n) override {
    if (from == to) {
      device_.copy(out, in, n * element_size(from));
    } else if (from == DType::f32) {
      launch::cast_f32_to_bf16(stream(), h(out), f(in), n);
    } else {
      launch::cast_bf16_to_f32(stream(), f(out), h(in), n);
    }
  }
  void reduce_add(void* acc, const void* incoming, std::size_t n, DType dtype) override {
    if (dtype == DType::bf16) {
      launch::add_bf16(stream(), h(acc), h(incoming), n);
    } else {
      launch::add_f32(stream(), f(acc), f(incoming), n);
    }
  }
  void sum_of_squares(const void* grad, std::size_t n, DType dtype, double* acc) override {
    void* partials = scratch_.get(launch::sum_of_squares_scratch_bytes(n));
    if (dtype == DType::bf16) {
      launch::sum_of_squares_bf16(stream(), acc, h(grad), n, partials);
    } else {
      launch::sum_of_squares_f32(stream(), acc, f(grad), n, partials);
    }
  }
  void adamw(float* master, float* m, float* v, bf16* weights, const void* grad, DType dtype, std::size_t n,
             const AdamWParams& p) override {
    const launch::AdamWStep step{p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale, p.step};
    if (dtype == DType::bf16) {
      launch::adamw_bf16_grad(stream(), master, m, v, weights, h(grad), n, step);
    } else {
      launch::adamw_f32_grad(stream(), master, m, v, weights, f(grad), n, step);
    }
  }

 private:
  cudaStream_t stream() const { return device_.stream(); }

  CudaDevice device_;
  cuda::CublasLtGemm gemm_;
  Scratch scratch_;
  int reserved_views_ = 0;
  std::vector<const void*> live_views_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int gpu) { return std::make_unique<CudaBackend>(gpu); }

}  // namespace dptrain
