// Bulk BF16 conversions (vectorised by the compiler; the scalar functions define the rounding). Where the CPU has
// AVX512_BF16, fp32 → BF16 runs on its VCVTNEPS2BF16 (16 values per instruction, about 10× the portable loop on
// data in cache), which rounds to nearest even as to_bf16() does and agrees with it on every input but the
// subnormals, which it flushes to zero: the lanes holding one (rare) are redone by to_bf16(), so both paths give
// the same bits for every input (tests/core/bf16_test.cpp compares them on random bit patterns).
#include "dptrain/core/bf16.hpp"

#include <immintrin.h>

namespace dptrain {
namespace {

void to_bf16_portable(const float* in, bf16* out, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) void to_bf16_avx512(const float* in, bf16* out,
                                                                                    std::size_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), magnitude = _mm512_set1_epi32(0x7fffffff);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    const __m512i bits = _mm512_castps_si512(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
    // Subnormal: exponent bits 0 and not ±0.
    const __mmask16 subnormal = _mm512_cmpeq_epi32_mask(_mm512_and_si512(bits, exponent), _mm512_setzero_si512()) &
                                _mm512_cmpneq_epi32_mask(_mm512_and_si512(bits, magnitude), _mm512_setzero_si512());
    if (subnormal)
      for (int lane = 0; lane < 16; ++lane)
        if (subnormal >> lane & 1) out[i + lane] = to_bf16(in[i + lane]);
  }
  to_bf16_portable(in + i, out + i, n - i);
}

using RoundFunction = void (*)(const float*, bf16*, std::size_t);

RoundFunction round_function() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16") ? to_bf16_avx512 : to_bf16_portable;
}

}  // namespace

void to_bf16(const float* in, bf16* out, std::size_t n) {
  static const RoundFunction round = round_function();
  round(in, out, n);
}

void to_float(const bf16* in, float* out, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

}  // namespace dptrain
