// The CPU backend: an sgemm library (OpenBLAS, oneDNN, or oneDNN on BF16-rounded operands: cpu_gemm.hpp) for
// every matrix product (attention included, one product per head and block of rows, or under onednn-bf16 one
// batched product per window: bf16_attention.hpp), plain loops with OpenMP elsewhere, on the cpu
// Device (host memory). Activations, compute weights and gradients are fp32: BF16 weights are expanded into an fp32
// mirror (the weight views). Every reduction runs in a fixed order for a given thread count, so a run is bitwise
// repeatable.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/compute/cpu_gemm.hpp"
#include "dptrain/core/error.hpp"
#include "dptrain/core/reduce_add.hpp"
#include "dptrain/core/timer.hpp"
#include "bf16_attention.hpp"
#include "vector_math.hpp"

namespace dptrain {
namespace {

using cpu::lane_sum;
using cpu::softmax_in_place;
using cpu::tanh_rational;

constexpr float kLayerNormEps = 1e-5f;
// Attention computes its causal products in blocks of this many query rows (key columns in the backward).
constexpr std::size_t kCausalRows = 32;
const float kGeluScale = std::sqrt(2.0f / std::numbers::pi_v<float>);

// Where head bh = (window b, head h) lives: its q in qkv [B,T,3C] (k and v follow at +C and +2C, rows 3C
// apart), its slice of the attention output [B,T,C] (rows C apart) and its probabilities [T,T].
struct HeadLayout {
  std::size_t T, C, NH, hs;
  float scale;  // 1/sqrt(head size)
  int ld_qkv;
  HeadLayout(std::size_t T, std::size_t C, std::size_t NH)
      : T(T), C(C), NH(NH), hs(C / NH), scale(cpu::AttentionShape{T, C, NH}.scale()), ld_qkv(int(3 * C)) {}
  std::size_t qkv(std::size_t bh) const { return (bh / NH) * T * 3 * C + (bh % NH) * hs; }
  std::size_t out(std::size_t bh) const { return (bh / NH) * T * C + (bh % NH) * hs; }
  std::size_t probs(std::size_t bh) const { return bh * T * T; }
};

// The rows of a weight gradient dw[OC,C] cut into one block per thread, each a multiple of 16 rows but the last:
// each thread sums its block's terms window after window with single-threaded sgemm calls (OpenBLAS runs on the
// calling thread inside a parallel region). The blocks depend on the thread count and OC only, never on how many
// windows share the call, so a micro-batch makes the same GEMM calls for its windows as the whole batch (OpenBLAS
// may give other bits for another row count: docs/overlap.md); tests/compute/cpu_matmul_tiles_test.cpp checks 1-4
// threads and several groupings of windows.
struct RowBlocks {
  std::size_t rows, width, count;
  RowBlocks(std::size_t rows, std::size_t parts)
      : rows(rows),
        width(std::min(rows, ((rows + parts - 1) / parts + 15) / 16 * 16)),
        count((rows + width - 1) / width) {}
  std::size_t begin(std::size_t i) const { return i * width; }
  std::size_t end(std::size_t i) const { return std::min(rows, (i + 1) * width); }
};

float* f(void* p) { return static_cast<float*>(p); }
const float* f(const void* p) { return static_cast<const float*>(p); }

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<const CpuGemm> gemm) : device_(make_cpu_device()), gemm_(std::move(gemm)) {}

  std::string name() const override { return "cpu"; }
  Device& device() override { return *device_; }
  DType activation_dtype() const override { return DType::f32; }
  DType weight_dtype() const override { return DType::f32; }
  DType gradient_dtype() const override { return DType::f32; }
  // The sgemm libraries pick their kernels by shape and CPU, not by timing, and every loop below sums in a fixed
  // order; GEMMs run window by window (matmul_backward), so a batch split into micro-batches gives the same bits.
  BackendGuarantees guarantees() const override {
    return {.repeatable = true, .micro_batch_invariant = true, .row_length_invariant = true};
  }

  // The rate the backend's own calls reach: every thread of the team multiplying its own square matrices at once,
  // each call single-threaded, as matmul and attention call the library (about 0.1 s). n = 512 and 1024, 2 GFLOP
  // per thread and round, the best round after a warm-up. (One multithreaded library call on the same matrices
  // read up to 20-40 % lower for OpenBLAS at 512, and for onednn-bf16 left its operands' rounding to one thread.)
  double measure_gemm_flops() override {
    const int threads = omp_get_max_threads();
    double best = 0.0;
    for (const int n : {512, 1024}) {
      const int calls = (1024 / n) * (1024 / n) * (1024 / n);
      std::vector<std::vector<float>> a(std::size_t(threads), std::vector<float>(std::size_t(n) * n, 0.5f)), c = a;
      for (int round = 0; round < 4; ++round) {
        const Stopwatch watch;
#pragma omp parallel num_threads(threads)
        {
          const auto t = std::size_t(omp_get_thread_num());
          for (int i = 0; i < calls; ++i)
            sgemm(false, false, n, n, n, 1.0f, a[t].data(), n, a[t].data(), n, 0.0f, c[t].data(), n);
        }
        if (round > 0) best = std::max(best, 2.0 * n * n * double(n) * calls * threads / watch.seconds());
      }
    }
    return best;
  }

  void reserve_weight_views(std::size_t elements, int views) override {
    DP_ASSERT(in_use_.empty() || std::none_of(in_use_.begin(), in_use_.end(), [](bool b) { return b; }));
    mirrors_.clear();
    for (int i = 0; i < views; ++i) mirrors_.emplace_back(*device_, elements * sizeof(float));
    in_use_.assign(std::size_t(views), false);
    sources_.assign(std::size_t(views), nullptr);
    view_elements_ = elements;
  }

  const void* acquire_weights(const bf16* w, std::size_t n) override {
    DP_ASSERT(n <= view_elements_);
    for (std::size_t i = 0; i < mirrors_.size(); ++i) {
      if (in_use_[i]) continue;
      in_use_[i] = true;
      sources_[i] = w;
      to_float(w, mirrors_[i].as<float>(), n);
      return mirrors_[i].data();
    }
    throw std::logic_error("cpu backend: every reserved weight view is in use");
  }

  void release_weights(const void* view) override {
    for (std::size_t i = 0; i < mirrors_.size(); ++i)
      if (mirrors_[i].data() == view) {
        DP_ASSERT(in_use_[i]);
        in_use_[i] = false;
        sources_[i] = nullptr;
        return;
      }
    throw std::logic_error("cpu backend: release of a weight view it did not hand out");
  }

  std::size_t weight_view_bytes() const override { return mirrors_.size() * view_elements_ * sizeof(float); }

  // Attention backward's [T,T] per thread (or the batched BF16 attention's window scratch), reserved with the
  // activations so that no step allocates.
  void reserve_scratch(const ModelConfig& config, std::size_t rows) override {
    if (gemm_->batched_bf16) {
      bf16_attention_scratch({std::size_t(config.seq), std::size_t(config.width), std::size_t(config.heads)});
    } else {
      attention_scratch(config.seq);
    }
  }
  std::size_t scratch_bytes() const override {
    return attention_scratch_.size() * sizeof(float) + bf16_attention_scratch_.size();
  }

  void embedding_forward(void* out_, const std::int32_t* tokens, const void* wte_, const void* wpe_, std::size_t N,
                         std::size_t T, std::size_t C) override {
    float* out = f(out_);
    const float *wte = f(wte_), *wpe = f(wpe_);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      const float* e = wte + std::size_t(tokens[i]) * C;
      const float* p = wpe + (i % T) * C;
      float* o = out + i * C;
      for (std::size_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }

  void embedding_backward(void* dwte_, void* dwpe_, const void* dout_, const std::int32_t* tokens, std::size_t N,
                          std::size_t T, std::size_t C) override {
    float *dwte = f(dwte_), *dwpe = f(dwpe_);
    const float* dout = f(dout_);
    // Parallel over channels: every thread owns whole columns, so repeated tokens never race and the
    // accumulation order (row order) is fixed.
#pragma omp parallel for schedule(static)
    for (std::size_t c0 = 0; c0 < C; c0 += 16) {
      const std::size_t c1 = std::min(C, c0 + 16);
      for (std::size_t i = 0; i < N; ++i) {
        const float* d = dout + i * C;
        float* e = dwte + std::size_t(tokens[i]) * C;
        float* p = dwpe + (i % T) * C;
        for (std::size_t c = c0; c < c1; ++c) {
          e[c] += d[c];
          p[c] += d[c];
        }
      }
    }
  }

  void layernorm_forward(void* out_, float* mean, float* rstd, const void* in_, const void* w_, const void* b_,
                         std::size_t N, std::size_t C) override {
    float* out = f(out_);
    const float *in = f(in_), *w = f(w_), *b = f(b_);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      const float* x = in + i * C;
      const float m = lane_sum(C, [x](std::size_t c) { return x[c]; }) / float(C);
      const float var = lane_sum(C, [x, m](std::size_t c) { return (x[c] - m) * (x[c] - m); }) / float(C);
      const float s = 1.0f / std::sqrt(var + kLayerNormEps);
      float* o = out + i * C;
      for (std::size_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
      mean[i] = m;
      rstd[i] = s;
    }
  }

  void layernorm_backward(void* din_, void* dw_, void* db_, const void* dout_, const void* in_, const void* w_,
                          const float* mean, const float* rstd, std::size_t N, std::size_t C) override {
    float *din = f(din_), *dw = f(dw_), *db = f(db_);
    const float *dout = f(dout_), *in = f(in_), *w = f(w_);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      const float* d = dout + i * C;
      const float* x = in + i * C;
      const float mu = mean[i], r = rstd[i];
      const float dnorm_mean = lane_sum(C, [w, d](std::size_t c) { return w[c] * d[c]; }) / float(C);
      const float dnorm_norm_mean =
          lane_sum(C, [w, d, x, mu, r](std::size_t c) { return w[c] * d[c] * ((x[c] - mu) * r); }) / float(C);
      float* dx = din + i * C;
      for (std::size_t c = 0; c < C; ++c) {
        const float norm = (x[c] - mu) * r;
        dx[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * r;
      }
    }
    // Parameter gradients: each thread owns blocks of kColumns channels and sums the rows in order into local
    // arrays (through dw and db, which the compiler must assume may alias dout, every row loaded and stored them).
    constexpr std::size_t kColumns = 32;
#pragma omp parallel for schedule(static)
    for (std::size_t c0 = 0; c0 < C; c0 += kColumns) {
      const std::size_t n = std::min(C - c0, kColumns);
      float sw[kColumns], sb[kColumns];
      std::copy_n(dw + c0, n, sw);
      std::copy_n(db + c0, n, sb);
      for (std::size_t i = 0; i < N; ++i) {
        const float* d = dout + i * C + c0;
        const float* x = in + i * C + c0;
        const float mu = mean[i], r = rstd[i];
        for (std::size_t c = 0; c < n; ++c) {
          sw[c] += d[c] * (x[c] - mu) * r;
          sb[c] += d[c];
        }
      }
      std::copy_n(sw, n, dw + c0);
      std::copy_n(sb, n, db + c0);
    }
  }

  void matmul_forward(void* out_, const void* in_, const void* w_, const void* bias_, std::size_t N, std::size_t T,
                      std::size_t C, std::size_t OC, std::size_t ld_out) override {
    float* out = f(out_);
    const float *in = f(in_), *w = f(w_), *bias = f(bias_);
    const bf16* w16 = bf16_weights(w, false, true);
    DP_ASSERT(T > 0 && N % T == 0 && ld_out >= OC);
    // out_w[T,OC] = in_w[T,C]·wᵀ (+ bias) window by window, the windows shared among the threads (a window's
    // product is not split: splitting its columns measured 20-30 % slower).
#pragma omp parallel for schedule(static)
    for (std::size_t window = 0; window < N / T; ++window) {
      float* o = out + window * T * ld_out;
      if (bias)
        for (std::size_t r = 0; r < T; ++r) std::memcpy(o + r * ld_out, bias, OC * sizeof(float));
      weight_gemm(true, int(T), int(OC), int(C), in + window * T * C, int(C), w, w16, bias ? 1.0f : 0.0f, o,
                  int(ld_out));
    }
  }

  void matmul_backward(void* din_, void* dw_, void* dbias_, const void* dout_, const void* in_, const void* w_,
                       std::size_t N, std::size_t T, std::size_t C, std::size_t OC, std::size_t ld_out) override {
    float *din = f(din_), *dw = f(dw_), *dbias = f(dbias_);
    const float *dout = f(dout_), *in = f(in_), *w = f(w_);
    DP_ASSERT(T > 0 && N % T == 0 && ld_out >= OC);
    const std::size_t windows = N / T;
    if (din) {
      // din_w[T,C] = dout_w[T,OC]·w[OC,C] window by window.
      const bf16* w16 = bf16_weights(w, false, false);
#pragma omp parallel for schedule(static)
      for (std::size_t window = 0; window < windows; ++window)
        weight_gemm(false, int(T), int(C), int(OC), dout + window * T * ld_out, int(ld_out), w, w16, 0.0f,
                    din + window * T * C, int(C));
    }
    // dw[rows,C] += dout_w[T,rows]ᵀ·in_w[T,C] and dbias[rows] += Σ_t dout_w[t,rows], window after window: each
    // thread owns a block of rows, so every element sums its windows (and dbias its rows) in order, and the bias
    // reads the window's dout right after the GEMM did.
    const RowBlocks blocks(OC, std::size_t(omp_get_max_threads()));
#pragma omp parallel for schedule(static)
    for (std::size_t block = 0; block < blocks.count; ++block) {
      const std::size_t o0 = blocks.begin(block), o1 = blocks.end(block);
      for (std::size_t window = 0; window < windows; ++window) {
        const float* dout_w = dout + window * T * ld_out;
        sgemm(true, false, int(o1 - o0), int(C), int(T), 1.0f, dout_w + o0, int(ld_out), in + window * T * C,
              int(C), 1.0f, dw + o0 * C, int(C));
        if (dbias)
          for (std::size_t t = 0; t < T; ++t)
            for (std::size_t o = o0; o < o1; ++o) dbias[o] += dout_w[t * ld_out + o];
      }
    }
  }

  void attention_forward(void* out_, void* probs_, const void* qkv_, std::size_t B, std::size_t T, std::size_t C,
                         std::size_t NH) override {
    float *out = f(out_), *probs = f(probs_);
    const float* qkv = f(qkv_);
    if (gemm_->batched_bf16)
      return cpu::bf16_attention_forward(gemm_->batched_bf16, out, probs, qkv, B, {T, C, NH},
                                         bf16_attention_scratch({T, C, NH}));
    const HeadLayout head(T, C, NH);
    const std::size_t hs = head.hs;
    const float scale = head.scale;
    const int ld = head.ld_qkv;
#pragma omp parallel for schedule(static)
    for (std::size_t bh = 0; bh < B * NH; ++bh) {
      const float* q = qkv + head.qkv(bh);
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* p = probs + head.probs(bh);
      // Row block [r0,r1) of the scores needs keys 0…r1-1 only: scores[r0:r1, 0:r1] = q[r0:r1]·k[0:r1]ᵀ·scale,
      // then out[r0:r1] = p[r0:r1, 0:r1]·v[0:r1]. Blocks of kCausalRows rows compute 5/8 of the full T×T products
      // at T = 128 (the diagonal blocks' upper triangles are computed and then masked).
      for (std::size_t r0 = 0; r0 < T; r0 += kCausalRows) {
        const std::size_t r1 = std::min(T, r0 + kCausalRows);
        sgemm(false, true, int(r1 - r0), int(r1), int(hs), scale, q + r0 * ld, ld, k, ld, 0.0f, p + r0 * T, int(T));
        for (std::size_t i = r0; i < r1; ++i) cpu::causal_softmax_row(p + i * T, i, T);
        sgemm(false, false, int(r1 - r0), int(hs), int(r1), 1.0f, p + r0 * T, int(T), v, ld, 0.0f,
              out + head.out(bh) + r0 * C, int(C));
      }
    }
  }

  void attention_backward(void* dqkv_, const void* dout_, const void* qkv_, const void* /*out*/, const void* probs_,
                          std::size_t B, std::size_t T, std::size_t C, std::size_t NH) override {
    float* dqkv = f(dqkv_);
    const float *dout = f(dout_), *qkv = f(qkv_), *probs = f(probs_);
    if (gemm_->batched_bf16)
      return cpu::bf16_attention_backward(gemm_->batched_bf16, dqkv, dout, qkv, probs, B, {T, C, NH},
                                          bf16_attention_scratch({T, C, NH}));
    const HeadLayout head(T, C, NH);
    const std::size_t hs = head.hs;
    const float scale = head.scale;
    const int ld = head.ld_qkv;
    float* scratch = attention_scratch(T);  // dP then dS, [T,T] per thread
#pragma omp parallel for schedule(static)
    for (std::size_t bh = 0; bh < B * NH; ++bh) {
      const float* q = qkv + head.qkv(bh);
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + head.qkv(bh);
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* p = probs + head.probs(bh);
      const float* dO = dout + head.out(bh);
      float* ds = scratch + std::size_t(omp_get_thread_num()) * T * T;
      // By row blocks, as in the forward: dP[r0:r1, 0:r1] = dO[r0:r1]·v[0:r1]ᵀ; the softmax backward on the
      // causal part, dS = p ⊙ (dP − Σ_j p·dP); dq[r0:r1] = dS[r0:r1, 0:r1]·k[0:r1]·scale.
      for (std::size_t r0 = 0; r0 < T; r0 += kCausalRows) {
        const std::size_t r1 = std::min(T, r0 + kCausalRows);
        sgemm(false, true, int(r1 - r0), int(r1), int(hs), 1.0f, dO + r0 * C, int(C), v, ld, 0.0f, ds + r0 * T,
              int(T));
        for (std::size_t i = r0; i < r1; ++i) cpu::causal_softmax_backward_row(p + i * T, ds + i * T, i, r1);
        sgemm(false, false, int(r1 - r0), int(hs), int(r1), scale, ds + r0 * T, int(T), k, ld, 0.0f, dq + r0 * ld,
              ld);
      }
      // By column blocks: key c gets terms from queries c…T-1 only. dv[c0:c1] = p[c0:T, c0:c1]ᵀ·dO[c0:T];
      // dk[c0:c1] = dS[c0:T, c0:c1]ᵀ·q[c0:T]·scale.
      for (std::size_t c0 = 0; c0 < T; c0 += kCausalRows) {
        const std::size_t c1 = std::min(T, c0 + kCausalRows);
        sgemm(true, false, int(c1 - c0), int(hs), int(T - c0), 1.0f, p + c0 * T + c0, int(T), dO + c0 * C, int(C),
              0.0f, dv + c0 * ld, ld);
        sgemm(true, false, int(c1 - c0), int(hs), int(T - c0), scale, ds + c0 * T + c0, int(T), q + c0 * ld, ld, 0.0f,
              dk + c0 * ld, ld);
      }
    }
  }

  void gelu_forward(void* out_, const void* in_, std::size_t n) override {
    float* out = f(out_);
    const float* in = f(in_);
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      const float x = in[i];
      out[i] = 0.5f * x * (1.0f + tanh_rational(kGeluScale * (x + 0.044715f * x * x * x)));
    }
  }

  void gelu_backward(void* din_, const void* in_, const void* dout_, std::size_t n) override {
    float* din = f(din_);
    const float *in = f(in_), *dout = f(dout_);
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      const float x = in[i];
      const float t = tanh_rational(kGeluScale * (x + 0.044715f * x * x * x));
      const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
      din[i] = dout[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
    }
  }

  void accumulate(void* out_, const void* a_, std::size_t n, DType dtype) override {
    DP_ASSERT(dtype == DType::f32);
    float* out = f(out_);
    const float* a = f(a_);
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) out[i] += a[i];
  }

  void softmax_cross_entropy(void* logits_, float* losses, const std::int32_t* targets, std::size_t N, std::size_t V,
                             std::size_t ld, float dloss, double* loss_sum) override {
    float* logits = f(logits_);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      float* row = logits + i * ld;
      softmax_in_place(row, V);
      losses[i] = -std::log(std::max(row[targets[i]], 1e-30f));
      if (dloss == 0.0f) continue;  // evaluation: the probabilities stay
      row[targets[i]] -= 1.0f;      // fp32 probabilities are exact enough for p − 1
      for (std::size_t j = 0; j < V; ++j) row[j] *= dloss;
    }
    double total = 0.0;
    for (std::size_t i = 0; i < N; ++i) total += losses[i];
    *loss_sum += total;
  }

  void cast(const void* in, DType from, void* out, DType to, std::size_t n) override {
    if (from == to) {
      std::memcpy(out, in, n * element_size(from));
    } else if (from == DType::f32) {
      to_bf16(f(in), static_cast<bf16*>(out), n);
    } else {
      to_float(static_cast<const bf16*>(in), f(out), n);
    }
  }

  void reduce_add(void* acc, const void* incoming, std::size_t n, DType dtype) override {
    host_reduce_add(acc, incoming, n, dtype);
  }

  void sum_of_squares(const void* grad, std::size_t n, DType dtype, double* acc) override {
    // Fixed-size blocks, each in 8 double lanes (vector_math.hpp), summed in order: the same result for any thread
    // count. One loop per gradient type, so that the loop body has no branch and vectorizes.
    constexpr std::size_t kBlock = 4096;
    const std::size_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<double> partial(blocks);
    auto sum = [&](auto gradient) {
#pragma omp parallel for schedule(static)
      for (std::size_t k = 0; k < blocks; ++k) {
        const std::size_t begin = k * kBlock;
        partial[k] = lane_sum<double>(std::min(n, begin + kBlock) - begin, [&](std::size_t i) {
          const double g = gradient(begin + i);
          return g * g;
        });
      }
    };
    if (dtype == DType::f32) {
      const float* g = static_cast<const float*>(grad);
      sum([g](std::size_t i) { return g[i]; });
    } else {
      const bf16* g = static_cast<const bf16*>(grad);
      sum([g](std::size_t i) { return to_float(g[i]); });
    }
    double total = 0.0;
    for (double s : partial) total += s;
    *acc += total;
  }

  void adamw(float* master, float* m, float* v, bf16* weights, const void* grad, DType dtype, std::size_t n,
             const AdamWParams& p) override {
    const float correction1 = 1.0f - std::pow(p.beta1, float(p.step));
    const float correction2 = 1.0f - std::pow(p.beta2, float(p.step));
    // One loop per gradient type, so that the loop body has no branch and vectorizes.
    auto update = [&](auto gradient) {
#pragma omp parallel for simd schedule(static)
      for (std::size_t i = 0; i < n; ++i) {
        const float g = p.grad_scale * gradient(i);
        m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
        v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
        const float m_hat = m[i] / correction1;
        const float v_hat = v[i] / correction2;
        master[i] -= p.lr * (m_hat / (std::sqrt(v_hat) + p.eps) + p.weight_decay * master[i]);
        weights[i] = to_bf16(master[i]);
      }
    };
    if (dtype == DType::f32) {
      update([g = static_cast<const float*>(grad)](std::size_t i) { return g[i]; });
    } else {
      update([g = static_cast<const bf16*>(grad)](std::size_t i) { return to_float(g[i]); });
    }
  }

 private:
  // Row-major C[m,n] = alpha·op(A)·op(B) + beta·C through the chosen library (cpu_gemm.hpp).
  void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
             int ldb, float beta, float* c, int ldc) const {
    gemm_->sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }

  // The BF16 weights the view holding `w` was made from, at w's offset, where the library takes B in BF16 for this
  // kind of call (onednn-bf16); null otherwise, and where `w` is not in a view (a caller's own fp32 array).
  const bf16* bf16_weights(const float* w, bool trans_a, bool trans_b) const {
    if (!gemm_->takes_bf16_b(trans_a, trans_b)) return nullptr;
    const auto address = reinterpret_cast<std::uintptr_t>(w);
    for (std::size_t i = 0; i < mirrors_.size(); ++i) {
      const auto base = reinterpret_cast<std::uintptr_t>(mirrors_[i].data());
      if (in_use_[i] && address >= base && address < base + view_elements_ * sizeof(float))
        return sources_[i] + (address - base) / sizeof(float);
    }
    return nullptr;
  }

  // C[m,n] = A·op(w) + beta·C for a weight w [OC,C] (op = transpose where trans_w), from its BF16 copy w16 where
  // there is one (bf16_weights), else from w.
  void weight_gemm(bool trans_w, int m, int n, int k, const float* a, int lda, const float* w, const bf16* w16,
                   float beta, float* c, int ldc) const {
    const int ldw = trans_w ? k : n;
    if (w16) {
      gemm_->gemm_bf16_b(false, trans_w, m, n, k, 1.0f, a, lda, w16, ldw, beta, c, ldc);
    } else {
      sgemm(false, trans_w, m, n, k, 1.0f, a, lda, w, ldw, beta, c, ldc);
    }
  }

  // Grows only where the thread count or T exceeds what was reserved (a caller that never reserved).
  float* attention_scratch(std::size_t T) { return per_thread(attention_scratch_, T * T); }
  std::byte* bf16_attention_scratch(const cpu::AttentionShape& shape) {
    return per_thread(bf16_attention_scratch_, cpu::bf16_attention_scratch_bytes(shape));
  }
  // `scratch` grown (never shrunk) to `each` elements for every thread of the team.
  template <typename T>
  static T* per_thread(std::vector<T>& scratch, std::size_t each) {
    const std::size_t needed = std::size_t(omp_get_max_threads()) * each;
    if (scratch.size() < needed) scratch.resize(needed);
    return scratch.data();
  }

  std::unique_ptr<Device> device_;
  std::shared_ptr<const CpuGemm> gemm_;
  std::vector<float> attention_scratch_;
  std::vector<std::byte> bf16_attention_scratch_;
  std::vector<Buffer> mirrors_;  // the weight views, view_elements_ fp32 each
  std::vector<bool> in_use_;
  std::vector<const bf16*> sources_;  // the BF16 weights each view in use was made from
  std::size_t view_elements_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<const CpuGemm> gemm) {
  return std::make_unique<CpuBackend>(std::move(gemm));
}

std::unique_ptr<Backend> make_cpu_backend(std::string_view gemm) {
  return make_cpu_backend(std::make_shared<const CpuGemm>(make_cpu_gemm(gemm)));
}

}  // namespace dptrain
