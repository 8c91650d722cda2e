// What every kernel file includes: the CUDA runtime under nvcc, or the CPU harness that the kernel tests include
// first (tests/kernels/cuda_on_cpu.hpp) under g++; warp reductions; BF16 conversions usable on both sides; the online
// softmax denominator of the softmax kernels.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#elif !defined(DPTRAIN_CUDA_ON_CPU)
#error "kernels/ are compiled by nvcc, or by g++ after tests/kernels/cuda_on_cpu.hpp"
#endif

#include "dptrain/core/bf16_type.hpp"

namespace dptrain::kernels {

constexpr unsigned kFullMask = 0xffffffffu;

// How a kernel is launched: grid, block and bytes of dynamic shared memory. Each kernel file's host-side launch
// functions compute it from the shape, so the CUDA backend and the kernel tests launch every kernel alike. Grids
// never depend on the device (its SM count): the bits a kernel computes must not either.
struct Launch {
  dim3 grid, block;
  std::size_t shared_bytes = 0;
};

__host__ __device__ constexpr unsigned ceil_div(std::size_t a, std::size_t b) { return unsigned((a + b - 1) / b); }

// BF16 ↔ fp32 with the rounding of core/bf16.hpp (nearest, ties to even; NaN stays a quiet NaN).
__host__ __device__ __forceinline__ float to_f32(bf16 x) {
  const std::uint32_t u = std::uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The identity on fp32, so that code templated on the element type reads BF16 and fp32 alike.
__host__ __device__ __forceinline__ float to_f32(float x) { return x; }

__host__ __device__ __forceinline__ bf16 to_bf16_rne(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return bf16{std::uint16_t((u >> 16) | 0x0040u)};
  return bf16{std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

// fp32 as T: BF16 rounded by to_bf16_rne, fp32 as it is.
template <typename T>
__host__ __device__ __forceinline__ T from_f32(float x) {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, float>);
  if constexpr (std::is_same_v<T, bf16>) {
    return to_bf16_rne(x);
  } else {
    return x;
  }
}

// Σ over the 32 lanes of a warp, every lane getting the same bits (a butterfly: the same additions in the same
// order on every lane). For float, double and the integer types.
template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// An online softmax denominator over a stream of values: m, the largest value seen, and s = Σ exp(x − m) over
// the values seen (m = −∞, s = 0 before the first). Softmaxes keep one per thread, then merge them.
__device__ __forceinline__ void softmax_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;
    m = x;
  } else {
    s += expf(x - m);
  }
}

constexpr float kLog2e = 1.44269504088896341f;

// e^(x − top) as 2^(x·log₂e − top_log2) with top_log2 = top·log₂e: one fused multiply-add and exp2f. The
// exponent's one rounding moves the result by ≤ |x − top|·log₂e·2⁻²⁴·ln 2 relative, beside exp2f's own error:
// negligible where the term matters (x near top), and the terms far below top are tiny.
__device__ __forceinline__ float exp2_of(float x, float top_log2) { return exp2f(fmaf(x, kLog2e, -top_log2)); }

// softmax_add over W values at once: their maximum first, so that the sum is rescaled once per chunk at most and
// each value costs one exponential and no branch. −∞ values add nothing; a NaN makes s NaN.
template <unsigned W>
__device__ __forceinline__ void softmax_add_chunk(float& m, float& s, const float (&v)[W]) {
  float top = v[0];
  for (unsigned k = 1; k < W; ++k) top = fmaxf(top, v[k]);  // fmaxf skips a NaN: it reaches s below
  if (top == -INFINITY) {  // nothing but −∞ and NaN: e^(x − m) would be NaN for −∞ where m = −∞
    for (unsigned k = 0; k < W; ++k)
      if (v[k] != v[k]) s = v[k];
    return;
  }
  if (top > m) {
    s *= exp2_of(m, top * kLog2e);  // m = −∞ gives 0, s being 0 then
    m = top;
  }
  const float m_log2 = m * kLog2e;
  for (unsigned k = 0; k < W; ++k) s += exp2_of(v[k], m_log2);
}

// (m, s) ⊕ (m2, s2). Symmetric to the bit: the two operands are put in one order first (the larger maximum, or
// on a tie the larger sum, on the left), so both lanes of a butterfly evaluate the same expression on the same
// values whichever side each holds.
__device__ __forceinline__ void softmax_merge(float& m, float& s, float m2, float s2) {
  if (m2 > m || (m2 == m && s2 > s)) {
    const float m1 = m, s1 = s;
    m = m2, s = s2, m2 = m1, s2 = s1;
  }
  if (m2 == -INFINITY) return;  // that side saw nothing (and m = −∞ only if neither did): exp(−∞ + ∞) is NaN
  s += s2 * expf(m2 - m);
}

// The merge over the 32 lanes of a warp, every lane getting the same bits.
__device__ __forceinline__ void warp_softmax_merge(float& m, float& s) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m2 = __shfl_xor_sync(kFullMask, m, offset), s2 = __shfl_xor_sync(kFullMask, s, offset);
    softmax_merge(m, s, m2, s2);
  }
}

}  // namespace dptrain::kernels

// The block's dynamic shared memory (Launch::shared_bytes of it) as an array of `type`, 16-byte aligned. One
// buffer per block, whatever the kernel calls it.
#if defined(__CUDACC__)
#define DPTRAIN_DYNAMIC_SHARED(type, name)                         \
  extern __shared__ __align__(16) unsigned char dptrain_shared[]; \
  type* name = reinterpret_cast<type*>(dptrain_shared)
#else
#define DPTRAIN_DYNAMIC_SHARED(type, name) type* name = cuda_on_cpu::dynamic_shared<type>()
#endif
