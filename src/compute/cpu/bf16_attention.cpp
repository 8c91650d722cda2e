#include "bf16_attention.hpp"

#include <omp.h>

#include "dptrain/core/bf16.hpp"
#include "vector_math.hpp"

namespace dptrain::cpu {
namespace {

constexpr std::size_t kAlignment = 64;  // each scratch part starts on a cache line

std::size_t aligned(std::size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// One thread's scratch, cut into the window's operands: per head dense [NH,T,hs] copies in BF16 of q, k, v and dO;
// the probabilities and dS in BF16 [NH,T,T]; dP then dS in fp32 [NH,T,T]; one fp32 [NH,T,hs] product.
struct WindowScratch {
  bf16 *q, *k, *v, *dout, *p, *ds;
  float *dp, *product;

  static std::size_t bytes(const AttentionShape& s) {
    const std::size_t heads_bf16 = aligned(s.T * s.C * sizeof(bf16)), tt = s.NH * s.T * s.T;
    return 4 * heads_bf16 + 2 * aligned(tt * sizeof(bf16)) + aligned(tt * sizeof(float)) +
           aligned(s.T * s.C * sizeof(float));
  }

  WindowScratch(const AttentionShape& s, std::byte* scratch) {
    std::byte* at = scratch + std::size_t(omp_get_thread_num()) * bytes(s);
    const auto take = [&at](std::size_t size) {
      std::byte* part = at;
      at += aligned(size);
      return part;
    };
    const std::size_t tt = s.NH * s.T * s.T;
    for (bf16** part : {&q, &k, &v, &dout}) *part = reinterpret_cast<bf16*>(take(s.T * s.C * sizeof(bf16)));
    for (bf16** part : {&p, &ds}) *part = reinterpret_cast<bf16*>(take(tt * sizeof(bf16)));
    dp = reinterpret_cast<float*>(take(tt * sizeof(float)));
    product = reinterpret_cast<float*>(take(s.T * s.C * sizeof(float)));
  }
};

// heads[h,t,:] = bf16(x[t, h·hs : (h+1)·hs]) for a window's x [T, ld] whose first C columns are the NH heads.
void gather_heads(const float* x, std::size_t ld, const AttentionShape& s, bf16* heads) {
  const std::size_t hs = s.C / s.NH;
  for (std::size_t h = 0; h < s.NH; ++h)
    for (std::size_t t = 0; t < s.T; ++t) to_bf16(x + t * ld + h * hs, heads + (h * s.T + t) * hs, hs);
}

// q, k and v of a window's qkv x [T, 3C], each as dense BF16 heads.
void gather_qkv(const float* x, const AttentionShape& s, const WindowScratch& w) {
  gather_heads(x, 3 * s.C, s, w.q);
  gather_heads(x + s.C, 3 * s.C, s, w.k);
  gather_heads(x + 2 * s.C, 3 * s.C, s, w.v);
}

// x[t, h·hs + j] = heads[h,t,j], the inverse of gather_heads in fp32.
void scatter_heads(const float* heads, float* x, std::size_t ld, const AttentionShape& s) {
  const std::size_t hs = s.C / s.NH;
  for (std::size_t h = 0; h < s.NH; ++h)
    for (std::size_t t = 0; t < s.T; ++t) {
      const float* from = heads + (h * s.T + t) * hs;
      float* to = x + t * ld + h * hs;
#pragma omp simd
      for (std::size_t j = 0; j < hs; ++j) to[j] = from[j];
    }
}

}  // namespace

std::size_t bf16_attention_scratch_bytes(const AttentionShape& shape) { return WindowScratch::bytes(shape); }

void bf16_attention_forward(BatchedBf16GemmFunction gemm, float* out, float* probs, const float* qkv, std::size_t B,
                            const AttentionShape& s, std::byte* scratch) {
  const int NH = int(s.NH), T = int(s.T), hs = int(s.C / s.NH);
  const float scale = s.scale();
#pragma omp parallel for schedule(static)
  for (std::size_t b = 0; b < B; ++b) {
    const WindowScratch w(s, scratch);
    gather_qkv(qkv + b * s.T * 3 * s.C, s, w);
    float* p = probs + b * s.NH * s.T * s.T;  // [NH,T,T]
    gemm(false, true, NH, T, T, hs, scale, w.q, w.k, 0.0f, p);  // scores[h] = q[h]·k[h]ᵀ·scale
    for (std::size_t row = 0; row < s.NH * s.T; ++row) {
      causal_softmax_row(p + row * s.T, row % s.T, s.T);
      to_bf16(p + row * s.T, w.p + row * s.T, s.T);  // while the row is in L1
    }
    gemm(false, false, NH, T, hs, T, 1.0f, w.p, w.v, 0.0f, w.product);  // out[h] = p[h]·v[h]
    scatter_heads(w.product, out + b * s.T * s.C, s.C, s);
  }
}

void bf16_attention_backward(BatchedBf16GemmFunction gemm, float* dqkv, const float* dout, const float* qkv,
                             const float* probs, std::size_t B, const AttentionShape& s, std::byte* scratch) {
  const int NH = int(s.NH), T = int(s.T), hs = int(s.C / s.NH);
  const float scale = s.scale();
#pragma omp parallel for schedule(static)
  for (std::size_t b = 0; b < B; ++b) {
    const WindowScratch w(s, scratch);
    float* dx = dqkv + b * s.T * 3 * s.C;  // [T, 3C]
    gather_qkv(qkv + b * s.T * 3 * s.C, s, w);
    gather_heads(dout + b * s.T * s.C, s.C, s, w.dout);
    const float* p = probs + b * s.NH * s.T * s.T;  // [NH,T,T]
    // dP[h] = dO[h]·v[h]ᵀ; then row by row, one pass over p: p in BF16, and dS = p ⊙ (dP − Σ_j p·dP) on the
    // causal part in place of dP, then in BF16.
    gemm(false, true, NH, T, T, hs, 1.0f, w.dout, w.v, 0.0f, w.dp);
    for (std::size_t row = 0; row < s.NH * s.T; ++row) {
      to_bf16(p + row * s.T, w.p + row * s.T, s.T);
      causal_softmax_backward_row(p + row * s.T, w.dp + row * s.T, row % s.T, s.T);
      to_bf16(w.dp + row * s.T, w.ds + row * s.T, s.T);
    }
    // dv[h] = p[h]ᵀ·dO[h]; dq[h] = dS[h]·k[h]·scale; dk[h] = dS[h]ᵀ·q[h]·scale
    gemm(true, false, NH, T, hs, T, 1.0f, w.p, w.dout, 0.0f, w.product);
    scatter_heads(w.product, dx + 2 * s.C, 3 * s.C, s);
    gemm(false, false, NH, T, hs, T, scale, w.ds, w.k, 0.0f, w.product);
    scatter_heads(w.product, dx, 3 * s.C, s);
    gemm(true, false, NH, T, hs, T, scale, w.ds, w.q, 0.0f, w.product);
    scatter_heads(w.product, dx + s.C, 3 * s.C, s);
  }
}

}  // namespace dptrain::cpu
