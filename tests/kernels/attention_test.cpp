// The attention kernels of kernels/attention.cu, run on the CPU by cuda_on_cpu.hpp: each kernel alone against a
// host loop (the permutes bitwise: they only move data), and the whole attention forward and backward composed as
// the CUDA backend composes it, the kernels plus naive host GEMMs standing in for cuBLASLt (fp32 accumulation, the
// result rounded to BF16 where the GPU stores BF16), against the cpu backend's attention_forward/backward (fp32).
// Shapes: T = 1, T not a multiple of 32, one head, head sizes that are not multiples of 32.
//
// Tolerances, from the arithmetic (test_data.hpp: a BF16 rounding moves v by ≤ 2⁻⁸·|v|, an fp32 operation by
// ≤ 2⁻²⁴·|v|; u = 2⁻²⁴ below). Each test states its bound next to the check.
#include "cuda_on_cpu.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "dptrain/compute/backend.hpp"
#include "test_data.hpp"
#include "../../kernels/attention.cu"

namespace dptrain {
namespace {

using namespace kernel_tests;

struct Shape {
  std::size_t B, T, C, NH;
  std::size_t hs() const { return C / NH; }
  std::size_t heads() const { return B * NH; }
  std::size_t elements() const { return B * T * C; }  // of one [B,T,C] or [B,NH,T,hs] tensor
};

::testing::Message describe(const Shape& s) {
  return ::testing::Message() << "B " << s.B << " T " << s.T << " C " << s.C << " NH " << s.NH;
}

// T = 1; T = 37 and 70 (not multiples of 32, 70 above 64: three columns per lane); one head (twice) and two; two
// windows; head sizes 8, 12 and 40 (none a multiple of 32, 40 above it). Small: the harness starts a thread per
// CUDA thread (~0.1 ms each here).
const Shape kShapes[] = {{1, 1, 8, 1}, {2, 37, 24, 2}, {1, 70, 40, 1}};

// Where element (b, h, t, d) lives in a head-major tensor [B,NH,T,hs], and in part `part` of a row-major tensor
// [B,T,parts·C] (qkv: parts 3, part 0 q, 1 k, 2 v; out and dout: parts 1).
std::size_t head_major(const Shape& s, std::size_t b, std::size_t h, std::size_t t, std::size_t d) {
  return ((b * s.NH + h) * s.T + t) * s.hs() + d;
}
std::size_t row_major(const Shape& s, std::size_t parts, std::size_t part, std::size_t b, std::size_t h, std::size_t t,
                      std::size_t d) {
  return (b * s.T + t) * parts * s.C + part * s.C + h * s.hs() + d;
}

// f(b, h, t, d) for every element of a [B,NH,T,hs] tensor.
template <class F>
void for_each_element(const Shape& s, F f) {
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.NH; ++h)
      for (std::size_t t = 0; t < s.T; ++t)
        for (std::size_t d = 0; d < s.hs(); ++d) f(b, h, t, d);
}

::testing::AssertionResult same_bits(const std::vector<bf16>& got, const std::vector<bf16>& expected) {
  if (got.size() != expected.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i].bits != expected[i].bits)
      return ::testing::AssertionFailure() << "element " << i << ": " << to_float(got[i]) << " != "
                                           << to_float(expected[i]);
  return ::testing::AssertionSuccess();
}

// Head bh's matrix of a head-major BF16 tensor [heads, rows, cols], or its transpose: what a GEMM reads.
struct Heads {
  const std::vector<bf16>& x;
  std::size_t rows, cols;
  bool transposed = false;
  float operator()(std::size_t bh, std::size_t i, std::size_t j) const {
    return to_float(transposed ? x[(bh * rows + j) * cols + i] : x[(bh * rows + i) * cols + j]);
  }
  Heads t() const { return {x, rows, cols, !transposed}; }
};

// c[bh][M,N] = alpha·a[bh][M,K]·b[bh][K,N] for every head, accumulated in fp32: a cuBLASLt strided-batched GEMM
// with CUBLAS_COMPUTE_32F, up to the order of its sums.
std::vector<float> batched_gemm(std::size_t heads, std::size_t M, std::size_t N, std::size_t K, float alpha,
                                const Heads& a, const Heads& b) {
  std::vector<float> c(heads * M * N);
  for (std::size_t bh = 0; bh < heads; ++bh)
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j) {
        float acc = 0.0f;
        for (std::size_t l = 0; l < K; ++l) acc += a(bh, i, l) * b(bh, l, j);
        c[(bh * M + i) * N + j] = alpha * acc;
      }
  return c;
}

float attention_scale(const Shape& s) { return 1.0f / std::sqrt(float(s.hs())); }

// The attention forward as the CUDA backend does it: what it keeps for the backward and its output.
struct Forward {
  std::vector<bf16> q, k, v, probs, out;
};

Forward gpu_forward(const Shape& s, const std::vector<bf16>& qkv) {
  const kernels::Launch permute = kernels::attention_permute_launch(s.B, s.T, s.C);
  const std::size_t n = s.elements(), T = s.T, hs = s.hs();
  Forward f{std::vector<bf16>(n), std::vector<bf16>(n), std::vector<bf16>(n), std::vector<bf16>(s.heads() * T * T),
            std::vector<bf16>(n)};
  cuda_on_cpu::launch(kernels::permute_qkv, permute, f.q.data(), f.k.data(), f.v.data(), qkv.data(), s.B, T, s.C,
                      s.NH);
  const std::vector<float> scores =
      batched_gemm(s.heads(), T, T, hs, attention_scale(s), Heads{f.q, T, hs}, Heads{f.k, T, hs}.t());
  cuda_on_cpu::launch(kernels::causal_softmax_forward, kernels::causal_softmax_launch(s.heads(), T), f.probs.data(),
                      scores.data(), s.heads(), T);
  const std::vector<bf16> y =
      rounded_to_bf16(batched_gemm(s.heads(), T, hs, T, 1.0f, Heads{f.probs, T, T}, Heads{f.v, T, hs}));
  cuda_on_cpu::launch(kernels::unpermute, permute, f.out.data(), y.data(), s.B, T, s.C, s.NH);
  return f;
}

// The backward as the CUDA backend does it: dqkv = the gradient.
void gpu_backward(const Shape& s, const Forward& f, const std::vector<bf16>& dout, std::vector<bf16>& dqkv) {
  const kernels::Launch permute = kernels::attention_permute_launch(s.B, s.T, s.C);
  const std::size_t T = s.T, hs = s.hs();
  std::vector<bf16> dy(s.elements()), dscores(s.heads() * T * T);
  cuda_on_cpu::launch(kernels::permute_heads, permute, dy.data(), dout.data(), s.B, T, s.C, s.NH);
  const std::vector<float> dprobs = batched_gemm(s.heads(), T, T, hs, 1.0f, Heads{dy, T, hs}, Heads{f.v, T, hs}.t());
  const std::vector<bf16> dv =
      rounded_to_bf16(batched_gemm(s.heads(), T, hs, T, 1.0f, Heads{f.probs, T, T}.t(), Heads{dy, T, hs}));
  cuda_on_cpu::launch(kernels::causal_softmax_backward, kernels::causal_softmax_launch(s.heads(), T),
                      dscores.data(), f.probs.data(), dprobs.data(), s.heads(), T);
  const float scale = attention_scale(s);
  const std::vector<bf16> dq =
      rounded_to_bf16(batched_gemm(s.heads(), T, hs, T, scale, Heads{dscores, T, T}, Heads{f.k, T, hs}));
  const std::vector<bf16> dk =
      rounded_to_bf16(batched_gemm(s.heads(), T, hs, T, scale, Heads{dscores, T, T}.t(), Heads{f.q, T, hs}));
  cuda_on_cpu::launch(kernels::unpermute_qkv, permute, dqkv.data(), dq.data(), dk.data(), dv.data(), s.B, T, s.C,
                      s.NH);
}

class Attention : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  std::mt19937 rng{7};
};

TEST_F(Attention, PermutesMoveEveryElementBitwise) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const std::size_t n = s.elements();
    const kernels::Launch launch = kernels::attention_permute_launch(s.B, s.T, s.C);
    const std::vector<bf16> qkv = uniform_bf16(rng, 3 * n, -4, 4), y = uniform_bf16(rng, n, -4, 4);
    std::vector<bf16> q(n), k(n), v(n), q_expected(n), k_expected(n), v_expected(n), out_expected(n);
    for_each_element(s, [&](std::size_t b, std::size_t h, std::size_t t, std::size_t d) {
      q_expected[head_major(s, b, h, t, d)] = qkv[row_major(s, 3, 0, b, h, t, d)];
      k_expected[head_major(s, b, h, t, d)] = qkv[row_major(s, 3, 1, b, h, t, d)];
      v_expected[head_major(s, b, h, t, d)] = qkv[row_major(s, 3, 2, b, h, t, d)];
      out_expected[row_major(s, 1, 0, b, h, t, d)] = y[head_major(s, b, h, t, d)];
    });
    cuda_on_cpu::launch(kernels::permute_qkv, launch, q.data(), k.data(), v.data(), qkv.data(), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(same_bits(q, q_expected));
    EXPECT_TRUE(same_bits(k, k_expected));
    EXPECT_TRUE(same_bits(v, v_expected));

    std::vector<bf16> out(n), back(n);
    cuda_on_cpu::launch(kernels::unpermute, launch, out.data(), y.data(), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(same_bits(out, out_expected));
    // permute_heads is unpermute's inverse, unpermute_qkv permute_qkv's.
    cuda_on_cpu::launch(kernels::permute_heads, launch, back.data(), out.data(), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(same_bits(back, y));
    std::vector<bf16> qkv_back(3 * n, to_bf16(NAN));
    cuda_on_cpu::launch(kernels::unpermute_qkv, launch, qkv_back.data(), q.data(), k.data(), v.data(), s.B, s.T, s.C,
                        s.NH);
    EXPECT_TRUE(same_bits(qkv_back, qkv));

    // A grid of 3 blocks of 64 threads, smaller than the data: the grid-stride loops cover the rest.
    std::vector<bf16> q_small(n), k_small(n), v_small(n);
    cuda_on_cpu::launch(kernels::permute_qkv, dim3(3), dim3(64), q_small.data(), k_small.data(), v_small.data(),
                        qkv.data(), s.B, s.T, s.C, s.NH);
    EXPECT_TRUE(same_bits(q_small, q_expected));
    EXPECT_TRUE(same_bits(k_small, k_expected));
    EXPECT_TRUE(same_bits(v_small, v_expected));
  }
}

TEST_F(Attention, CausalSoftmaxForwardMatchesAHostLoop) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const std::size_t heads = s.heads(), T = s.T;
    // Scores in [−4, 4], and in [−400, 400] on odd heads (exp would overflow without the max subtracted, and most
    // probabilities underflow). The upper triangle is NaN: the kernel must not read it.
    std::uniform_real_distribution<float> draw(-4, 4);
    std::vector<float> scores(heads * T * T);
    for (std::size_t r = 0; r < heads * T; ++r)
      for (std::size_t j = 0; j < T; ++j) scores[r * T + j] = j <= r % T ? draw(rng) * (r / T % 2 ? 100 : 1) : NAN;
    std::vector<bf16> probs(heads * T * T, to_bf16(-1.0f));
    cuda_on_cpu::launch(kernels::causal_softmax_forward, kernels::causal_softmax_launch(heads, T), probs.data(),
                        scores.data(), heads, T);
    for (std::size_t r = 0; r < heads * T; ++r) {
      const std::size_t i = r % T;
      const float* row = scores.data() + r * T;
      double top = row[0], sum = 0;
      for (std::size_t j = 0; j <= i; ++j) top = std::max(top, double(row[j]));
      for (std::size_t j = 0; j <= i; ++j) sum += std::exp(double(row[j]) - top);
      for (std::size_t j = 0; j < T; ++j) {
        const float p = to_float(probs[r * T + j]);
        if (j > i) {
          ASSERT_EQ(probs[r * T + j].bits, 0) << "row " << r << " j " << j;  // exactly +0 above the diagonal
          continue;
        }
        // The kernel's fp32 value: expf (≤ 2 ulps), a lane's online sum of ≤ T/32 terms and five merges (≤ 3
        // roundings each), the reciprocal and the product: within (T + 32)·u relative of the exact; then one BF16
        // rounding. Below the smallest normal number only an absolute bound holds.
        const double exact = std::exp(double(row[j]) - top) / sum;
        ASSERT_NEAR(p, exact, (kBf16Rounding + (T + 32) * kFp32Rounding) * exact + kSmallestNormal)
            << "row " << r << " j " << j;
      }
      if (i == 0) {
        EXPECT_EQ(to_float(probs[r * T]), 1.0f) << "row " << r;  // a single key: exactly 1
      }
    }
  }
}

TEST_F(Attention, CausalSoftmaxBackwardMatchesAHostLoop) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const std::size_t heads = s.heads(), T = s.T;
    // Any probabilities and dprobs will do for the arithmetic; above the diagonal both are NaN, never to be read.
    std::uniform_real_distribution<float> unit(0, 1), grad(-2, 2);
    std::vector<bf16> probs(heads * T * T);
    std::vector<float> dprobs(heads * T * T);
    for (std::size_t r = 0; r < heads * T; ++r)
      for (std::size_t j = 0; j < T; ++j) {
        probs[r * T + j] = to_bf16(j <= r % T ? unit(rng) : NAN);
        dprobs[r * T + j] = j <= r % T ? grad(rng) : NAN;
      }
    std::vector<bf16> dscores(heads * T * T, to_bf16(-1.0f));
    cuda_on_cpu::launch(kernels::causal_softmax_backward, kernels::causal_softmax_launch(heads, T), dscores.data(),
                        probs.data(), dprobs.data(), heads, T);
    for (std::size_t r = 0; r < heads * T; ++r) {
      const std::size_t i = r % T;
      double dot = 0, magnitude = 0;  // Σ p·dP, Σ p·|dP|
      for (std::size_t j = 0; j <= i; ++j) {
        dot += double(to_float(probs[r * T + j])) * dprobs[r * T + j];
        magnitude += double(to_float(probs[r * T + j])) * std::abs(dprobs[r * T + j]);
      }
      for (std::size_t j = 0; j < T; ++j) {
        if (j > i) {
          ASSERT_EQ(dscores[r * T + j].bits, 0) << "row " << r << " j " << j;
          continue;
        }
        const double p = to_float(probs[r * T + j]), dp = dprobs[r * T + j], exact = p * (dp - dot);
        // The kernel's dot: a lane's sum of ≤ T/32 products and a five-level butterfly, within (T/32 + 6)·u·Σp|dP|;
        // the difference and the product add 2u·(|dP| + Σp|dP|)·p; then one BF16 rounding.
        ASSERT_NEAR(to_float(dscores[r * T + j]), exact,
                    kBf16Rounding * std::abs(exact) + (T + 16) * kFp32Rounding * p * (std::abs(dp) + magnitude) +
                        kSmallestNormal)
            << "row " << r << " j " << j;
      }
    }
  }
}

// Per element of out [B,T,C]: Σ_j p_ij·|v_jd|, the size of the terms of y = probs·v (probs from the cpu backend).
std::vector<double> output_magnitudes(const Shape& s, const std::vector<float>& probs, const std::vector<bf16>& v) {
  std::vector<double> m(s.elements());
  for_each_element(s, [&](std::size_t b, std::size_t h, std::size_t i, std::size_t d) {
    const std::size_t bh = b * s.NH + h;
    double sum = 0;
    for (std::size_t j = 0; j <= i; ++j)
      sum += probs[(bh * s.T + i) * s.T + j] * std::abs(to_float(v[head_major(s, b, h, j, d)]));
    m[row_major(s, 1, 0, b, h, i, d)] = sum;
  });
  return m;
}

// Per element of dqkv [B,T,3C]: the size of the terms that make its gradient. With dP = dy·vᵀ,
// E_ij = p_ij·(|dP_ij − Σ_l p_il·dP_il| + Σ_l p_il·|dP_il|) bounds what an error in p moves dS_ij by, relative;
// dq_i: scale·Σ_j E_ij·|k_j|, dk_j: scale·Σ_i E_ij·|q_i|, dv_j: Σ_i p_ij·|dy_i|.
std::vector<double> gradient_magnitudes(const Shape& s, const std::vector<float>& probs, const Forward& f,
                                        const std::vector<bf16>& dout) {
  const std::size_t T = s.T, hs = s.hs();
  const double scale = attention_scale(s);
  std::vector<double> m(3 * s.elements());
  std::vector<double> E(T * T);
  for (std::size_t b = 0; b < s.B; ++b)
    for (std::size_t h = 0; h < s.NH; ++h) {
      const float* p = probs.data() + (b * s.NH + h) * T * T;
      auto dy = [&](std::size_t t, std::size_t d) { return double(to_float(dout[row_major(s, 1, 0, b, h, t, d)])); };
      auto at = [&](const std::vector<bf16>& x, std::size_t t, std::size_t d) {
        return std::abs(double(to_float(x[head_major(s, b, h, t, d)])));
      };
      for (std::size_t i = 0; i < T; ++i) {
        std::vector<double> dP(i + 1);
        double dot = 0, sum = 0;
        for (std::size_t j = 0; j <= i; ++j) {
          for (std::size_t d = 0; d < hs; ++d) dP[j] += dy(i, d) * to_float(f.v[head_major(s, b, h, j, d)]);
          dot += p[i * T + j] * dP[j];
          sum += p[i * T + j] * std::abs(dP[j]);
        }
        for (std::size_t j = 0; j <= i; ++j) E[i * T + j] = p[i * T + j] * (std::abs(dP[j] - dot) + sum);
      }
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t d = 0; d < hs; ++d) {
          double dq = 0, dk = 0, dv = 0;
          for (std::size_t j = 0; j <= t; ++j) dq += E[t * T + j] * at(f.k, j, d);
          for (std::size_t i = t; i < T; ++i) {
            dk += E[i * T + t] * at(f.q, i, d);
            dv += p[i * T + t] * std::abs(dy(i, d));
          }
          m[row_major(s, 3, 0, b, h, t, d)] = scale * dq;
          m[row_major(s, 3, 1, b, h, t, d)] = scale * dk;
          m[row_major(s, 3, 2, b, h, t, d)] = dv;
        }
    }
  return m;
}

TEST_F(Attention, ForwardAndBackwardComposedAsOnTheGpuMatchTheCpuBackend) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(describe(s));
    const std::size_t n = s.elements(), T = s.T, hs = s.hs();
    const std::vector<bf16> qkv = uniform_bf16(rng, 3 * n, -1, 1);
    const Forward f = gpu_forward(s, qkv);
    const std::vector<float> qkv_f = as_floats(qkv);
    std::vector<float> out_ref(n), probs_ref(s.heads() * T * T);
    cpu->attention_forward(out_ref.data(), probs_ref.data(), qkv_f.data(), s.B, T, s.C, s.NH);

    // Probabilities. The scores differ from the reference's by the order of a sum of hs products: by
    // ≤ hs·u·scale·Σ|q·k| ≤ hs^1.5·u (|q|, |k| ≤ 1, scale = hs^-0.5); exp turns that into a relative error, twice
    // over (numerator, denominator); the kernel's and the reference's own softmax arithmetic add (T + 32)·u each.
    // Then one BF16 rounding.
    const double relative = 2 * std::pow(double(hs), 1.5) * kFp32Rounding + 2 * (T + 32) * kFp32Rounding;
    ASSERT_LT(relative, kBf16Rounding / 16);  // what the bounds below take for granted
    for (std::size_t r = 0; r < s.heads() * T; ++r)
      for (std::size_t j = 0; j < T; ++j) {
        const float p = to_float(f.probs[r * T + j]), ref = probs_ref[r * T + j];
        if (j > r % T) {
          ASSERT_EQ(f.probs[r * T + j].bits, 0) << "row " << r << " j " << j;
        } else {
          ASSERT_NEAR(p, ref, (kBf16Rounding + relative) * ref + kSmallestNormal) << "row " << r << " j " << j;
        }
      }

    // Output: y = Σ_j p̂_ij·v_j with p̂ within (2⁻⁸ + relative)·p of the reference's p, so y is within
    // ≈ 1.07·2⁻⁸·Σ_j p_ij|v_j| (the fp32 sums add T·u of that), and its BF16 rounding adds 2⁻⁸·|y|:
    // |out − ref| ≤ 2⁻⁸·(|ref| + 2·Σ_j p_ij|v_j|). The unpermute is exact.
    const std::vector<double> out_size = output_magnitudes(s, probs_ref, f.v);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_NEAR(to_float(f.out[i]), out_ref[i], kBf16Rounding * (std::abs(out_ref[i]) + 2 * out_size[i]))
          << "element " << i;

    // Backward, into a dqkv of NaN on both sides: each writes every element and reads none.
    const std::vector<bf16> dout = uniform_bf16(rng, n, -1, 1);
    std::vector<bf16> dqkv(3 * n, to_bf16(NAN));
    gpu_backward(s, f, dout, dqkv);
    const std::vector<float> dout_f = as_floats(dout);
    std::vector<float> dqkv_ref(3 * n, NAN);
    cpu->attention_backward(dqkv_ref.data(), dout_f.data(), qkv_f.data(), out_ref.data(), probs_ref.data(), s.B, T,
                            s.C, s.NH);
    // With p̂ = p(1 + ε), |ε| ≤ 2⁻⁸ + relative: the kernel's dot Σ p̂·dP moves by ≤ |ε|·Σ p|dP|, so its dS_ij moves
    // by ≤ |ε|·E_ij (E as in gradient_magnitudes), and its BF16 rounding adds 2⁻⁸·|dS| ≤ 2⁻⁸·E_ij: dŜ is within
    // 2.2·2⁻⁸·E_ij. The GEMM gives dq within 2.3·2⁻⁸·M (M = scale·Σ_j E_ij|k_j|; fp32 order adds T·u·M), dv within
    // 1.1·2⁻⁸·M (M = Σ_i p_ij|dy_i|), and storing the gradient in BF16 adds 2⁻⁸·(|ref| + that). Altogether
    // |dqkv − ref| ≤ 2⁻⁸·(|ref| + 3·M).
    const std::vector<double> size = gradient_magnitudes(s, probs_ref, f, dout);
    for (std::size_t i = 0; i < 3 * n; ++i)
      ASSERT_NEAR(to_float(dqkv[i]), dqkv_ref[i],
                  kBf16Rounding * (std::abs(dqkv_ref[i]) + 3 * size[i]) + kSmallestNormal)
          << "element " << i << " (part " << i / s.C % 3 << ")";
  }
}

}  // namespace
}  // namespace dptrain
