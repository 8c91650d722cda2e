// Bulk BF16 conversions (vectorised by the compiler; the scalar functions define the rounding).
#include "dptrain/core/bf16.hpp"

namespace dptrain {

void to_bf16(const float* in, bf16* out, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

void to_float(const bf16* in, float* out, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

}  // namespace dptrain
