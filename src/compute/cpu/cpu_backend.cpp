// The CPU backend: OpenBLAS sgemm for every matrix product (attention included, one product per head), plain
// loops with OpenMP elsewhere. Every reduction runs in a fixed order for a given thread count, so a run is
// bitwise repeatable.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "dptrain/core/error.hpp"

namespace dptrain {
namespace {

constexpr float kLayerNormEps = 1e-5f;
const float kGeluScale = std::sqrt(2.0f / std::numbers::pi_v<float>);

// Where head bh = (window b, head h) lives: its q in qkv [B,T,3C] (k and v follow at +C and +2C, rows 3C
// apart), its slice of the attention output [B,T,C] (rows C apart) and its probabilities [T,T].
struct HeadLayout {
  std::size_t T, C, NH, hs;
  float scale;  // 1/sqrt(head size)
  int ld_qkv;
  HeadLayout(std::size_t T, std::size_t C, std::size_t NH)
      : T(T), C(C), NH(NH), hs(C / NH), scale(1.0f / std::sqrt(float(C / NH))), ld_qkv(int(3 * C)) {}
  std::size_t qkv(std::size_t bh) const { return (bh / NH) * T * 3 * C + (bh % NH) * hs; }
  std::size_t out(std::size_t bh) const { return (bh / NH) * T * C + (bh % NH) * hs; }
  std::size_t probs(std::size_t bh) const { return bh * T * T; }
};

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe,
                         std::size_t N, std::size_t T, std::size_t C) override {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      const float* e = wte + std::size_t(tokens[i]) * C;
      const float* p = wpe + (i % T) * C;
      float* o = out + i * C;
      for (std::size_t c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }

  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tokens,
                          std::size_t N, std::size_t T, std::size_t C) override {
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

  void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* w, const float* b,
                         std::size_t N, std::size_t C) override {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      const float* x = in + i * C;
      float m = 0.0f;
      for (std::size_t c = 0; c < C; ++c) m += x[c];
      m /= float(C);
      float var = 0.0f;
      for (std::size_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
      var /= float(C);
      const float s = 1.0f / std::sqrt(var + kLayerNormEps);
      float* o = out + i * C;
      for (std::size_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
      mean[i] = m;
      rstd[i] = s;
    }
  }

  void layernorm_backward(float* din, float* dw, float* db, const float* dout, const float* in, const float* w,
                          const float* mean, const float* rstd, std::size_t N, std::size_t C) override {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      const float* d = dout + i * C;
      const float* x = in + i * C;
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
      for (std::size_t c = 0; c < C; ++c) {
        const float norm = (x[c] - mean[i]) * rstd[i];
        const float dnorm = w[c] * d[c];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= float(C);
      dnorm_norm_mean /= float(C);
      float* dx = din + i * C;
      for (std::size_t c = 0; c < C; ++c) {
        const float norm = (x[c] - mean[i]) * rstd[i];
        dx[c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd[i];
      }
    }
    // Parameter gradients: each thread owns a block of channels and sums the rows in order.
#pragma omp parallel for schedule(static)
    for (std::size_t c0 = 0; c0 < C; c0 += 16) {
      const std::size_t c1 = std::min(C, c0 + 16);
      for (std::size_t i = 0; i < N; ++i) {
        const float* d = dout + i * C;
        const float* x = in + i * C;
        for (std::size_t c = c0; c < c1; ++c) {
          dw[c] += d[c] * (x[c] - mean[i]) * rstd[i];
          db[c] += d[c];
        }
      }
    }
  }

  void matmul_forward(float* out, const float* in, const float* w, const float* bias, std::size_t N, std::size_t T,
                      std::size_t C, std::size_t OC) override {
    DP_ASSERT(T > 0 && N % T == 0);
    if (bias) {
#pragma omp parallel for schedule(static)
      for (std::size_t i = 0; i < N; ++i) std::memcpy(out + i * OC, bias, OC * sizeof(float));
    }
    for (std::size_t row = 0; row < N; row += T)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(OC), int(C), 1.0f, in + row * C, int(C), w,
                  int(C), bias ? 1.0f : 0.0f, out + row * OC, int(OC));
  }

  void matmul_backward(float* din, float* dw, float* dbias, const float* dout, const float* in, const float* w,
                       std::size_t N, std::size_t T, std::size_t C, std::size_t OC) override {
    DP_ASSERT(T > 0 && N % T == 0);
    for (std::size_t row = 0; row < N; row += T) {
      if (din)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(T), int(C), int(OC), 1.0f, dout + row * OC,
                    int(OC), w, int(C), 1.0f, din + row * C, int(C));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(OC), int(C), int(T), 1.0f, dout + row * OC, int(OC),
                  in + row * C, int(C), 1.0f, dw, int(C));
    }
    if (dbias) {
#pragma omp parallel for schedule(static)
      for (std::size_t o0 = 0; o0 < OC; o0 += 16) {
        const std::size_t o1 = std::min(OC, o0 + 16);
        for (std::size_t i = 0; i < N; ++i)
          for (std::size_t o = o0; o < o1; ++o) dbias[o] += dout[i * OC + o];
      }
    }
  }

  void attention_forward(float* out, float* probs, const float* qkv, std::size_t B, std::size_t T,
                         std::size_t C, std::size_t NH) override {
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
      // Scores [T,T] = q·kᵀ·scale; the upper triangle is computed and then masked (one GEMM beats T dot
      // products even at twice the arithmetic).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(T), int(hs), scale, q, ld, k, ld, 0.0f, p,
                  int(T));
      for (std::size_t i = 0; i < T; ++i) {
        float* row = p + i * T;
        float maxv = row[0];
        for (std::size_t j = 1; j <= i; ++j) maxv = std::max(maxv, row[j]);
        float sum = 0.0f;
        for (std::size_t j = 0; j <= i; ++j) {
          row[j] = std::exp(row[j] - maxv);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (std::size_t j = 0; j <= i; ++j) row[j] *= inv;
        for (std::size_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(T), int(hs), int(T), 1.0f, p, int(T), v, ld, 0.0f,
                  out + head.out(bh), int(C));
    }
  }

  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* probs, std::size_t B,
                          std::size_t T, std::size_t C, std::size_t NH) override {
    const HeadLayout head(T, C, NH);
    const std::size_t hs = head.hs;
    const float scale = head.scale;
    const int ld = head.ld_qkv;
    std::vector<float> scratch(std::size_t(omp_get_max_threads()) * T * T);  // dP then dS, per thread
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
      float* ds = scratch.data() + std::size_t(omp_get_thread_num()) * T * T;
      // dP = dO·vᵀ; dv += pᵀ·dO
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(T), int(hs), 1.0f, dO, int(C), v, ld, 0.0f,
                  ds, int(T));
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(T), int(hs), int(T), 1.0f, p, int(T), dO, int(C),
                  1.0f, dv, ld);
      // Softmax backward on the causal part: dS = p ⊙ (dP − Σ_j p·dP).
      for (std::size_t i = 0; i < T; ++i) {
        const float* pr = p + i * T;
        float* row = ds + i * T;
        float dot = 0.0f;
        for (std::size_t j = 0; j <= i; ++j) dot += pr[j] * row[j];
        for (std::size_t j = 0; j <= i; ++j) row[j] = pr[j] * (row[j] - dot);
        for (std::size_t j = i + 1; j < T; ++j) row[j] = 0.0f;
      }
      // dq += dS·k·scale; dk += dSᵀ·q·scale
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(T), int(hs), int(T), scale, ds, int(T), k, ld,
                  1.0f, dq, ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(T), int(hs), int(T), scale, ds, int(T), q, ld, 1.0f,
                  dk, ld);
    }
  }

  void gelu_forward(float* out, const float* in, std::size_t n) override {
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      const float x = in[i];
      out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + 0.044715f * x * x * x)));
    }
  }

  void gelu_backward(float* din, const float* in, const float* dout, std::size_t n) override {
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      const float x = in[i];
      const float t = std::tanh(kGeluScale * (x + 0.044715f * x * x * x));
      const float dt = (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
      din[i] += dout[i] * (0.5f * (1.0f + t) + 0.5f * x * dt);
    }
  }

  void add(float* out, const float* a, const float* b, std::size_t n) override {
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }

  void accumulate(float* out, const float* a, std::size_t n) override {
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) out[i] += a[i];
  }

  double softmax_cross_entropy_forward(float* logits, float* losses, const std::int32_t* targets, std::size_t N,
                                       std::size_t V) override {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      float* row = logits + i * V;
      const float maxv = *std::max_element(row, row + V);
      float sum = 0.0f;
      for (std::size_t j = 0; j < V; ++j) {
        row[j] = std::exp(row[j] - maxv);
        sum += row[j];
      }
      const float inv = 1.0f / sum;
      for (std::size_t j = 0; j < V; ++j) row[j] *= inv;
      losses[i] = -std::log(std::max(row[targets[i]], 1e-30f));
    }
    double total = 0.0;
    for (std::size_t i = 0; i < N; ++i) total += losses[i];
    return total;
  }

  void softmax_cross_entropy_backward(float* probs, const std::int32_t* targets, float dloss, std::size_t N,
                                      std::size_t V) override {
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < N; ++i) {
      float* row = probs + i * V;
      row[targets[i]] -= 1.0f;
      for (std::size_t j = 0; j < V; ++j) row[j] *= dloss;
    }
  }

  void cast(const float* in, bf16* out, std::size_t n) override { to_bf16(in, out, n); }
  void cast(const bf16* in, float* out, std::size_t n) override { to_float(in, out, n); }

  void reduce_add(void* acc, const void* incoming, std::size_t n, DType dtype) override {
    if (dtype == DType::f32) {
      accumulate(static_cast<float*>(acc), static_cast<const float*>(incoming), n);
      return;
    }
    auto* a = static_cast<bf16*>(acc);
    const auto* b = static_cast<const bf16*>(incoming);
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) a[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
  }

  double sum_of_squares(const void* grad, std::size_t n, DType dtype) override {
    // Fixed-size blocks summed in order: the same result for any thread count.
    constexpr std::size_t kBlock = 4096;
    const std::size_t blocks = (n + kBlock - 1) / kBlock;
    std::vector<double> partial(blocks);
#pragma omp parallel for schedule(static)
    for (std::size_t k = 0; k < blocks; ++k) {
      double s = 0.0;
      for (std::size_t i = k * kBlock; i < std::min(n, (k + 1) * kBlock); ++i) {
        const double g = dtype == DType::f32 ? static_cast<const float*>(grad)[i]
                                             : to_float(static_cast<const bf16*>(grad)[i]);
        s += g * g;
      }
      partial[k] = s;
    }
    double total = 0.0;
    for (double s : partial) total += s;
    return total;
  }

  void adamw(float* master, float* m, float* v, bf16* weights, const void* grad, DType dtype, std::size_t n,
             const AdamWParams& p) override {
    const float correction1 = 1.0f - std::pow(p.beta1, float(p.step));
    const float correction2 = 1.0f - std::pow(p.beta2, float(p.step));
#pragma omp parallel for simd schedule(static)
    for (std::size_t i = 0; i < n; ++i) {
      const float g = p.grad_scale * (dtype == DType::f32 ? static_cast<const float*>(grad)[i]
                                                          : to_float(static_cast<const bf16*>(grad)[i]));
      m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
      v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
      const float m_hat = m[i] / correction1;
      const float v_hat = v[i] / correction2;
      master[i] -= p.lr * (m_hat / (std::sqrt(v_hat) + p.eps) + p.weight_decay * master[i]);
      weights[i] = to_bf16(master[i]);
    }
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace dptrain
