// LayerNorm on BF16 rows with fp32 statistics (layernorm.cu).
#pragma once
#include "common.cuh"

namespace dptrain::kernels {

// out[N,C] = (in − mean)·rstd·w + b; mean[N], rstd[N] fp32; eps 1e-5. One warp per row.
__global__ void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* in, const bf16* w, const bf16* b,
                                  std::size_t N, std::size_t C);

constexpr unsigned kLayerNormWarpsPerBlock = 4;
inline Launch layernorm_forward_launch(std::size_t N) {
  return {dim3(ceil_div(N, kLayerNormWarpsPerBlock)), dim3(32 * kLayerNormWarpsPerBlock), 0};
}

}  // namespace dptrain::kernels
