// LayerNorm on BF16 rows with fp32 statistics (layernorm.cu).
#pragma once
#include "common.cuh"
#include "reductions.cuh"
#include "vectorized.cuh"

namespace dptrain::kernels {

// out[N,C] = (in − mean)·rstd·w + b; mean[N], rstd[N] fp32; eps 1e-5. One warp per row.
__global__ void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* in, const bf16* w, const bf16* b,
                                  std::size_t N, std::size_t C);

constexpr unsigned kLayerNormWarpsPerBlock = 4;
// Chunks of 8 of a row whose loads a lane issues before it processes the first of them (forward and backward; 3
// is the whole row of 768 channels).
constexpr unsigned kLayerNormChunksAhead = 3;
inline Launch layernorm_forward_launch(std::size_t N) {
  return {dim3(ceil_div(N, kLayerNormWarpsPerBlock)), dim3(32 * kLayerNormWarpsPerBlock), 0};
}

// Backward, stage 1: din[N,C] += ∂/∂in (BF16, one rounding of the sum), and the parameter gradients' partials:
// block b of partial_row_blocks(N) takes the rows of reductions.cuh's partition and writes
// scratch[b][0, C) = Σ_rows dout·(in − mean)·rstd (dw) and scratch[b][C, 2C) = Σ_rows dout (db), fp32.
// Stage 2: sum_partials(dw, db, scratch, partial_row_blocks(N), C) with sum_partials_launch(2·C): dw, db += Σ.
// mean, rstd are the forward's.
__global__ void layernorm_backward(bf16* din, const bf16* dout, const bf16* in, const bf16* w, const float* mean,
                                   const float* rstd, std::size_t N, std::size_t C, float* scratch);
// A warp per row, kLayerNormBackwardWarps to a block. Rows of up to kLayerNormOnePassMaxC channels take one pass
// over dout and in: each warp adds its rows' dw, db terms into its own 2·C floats of dynamic shared memory (48 KiB
// at the largest C, the most a launch may ask without opting in); wider rows take a second pass for the column
// sums, with no shared memory.
constexpr unsigned kLayerNormBackwardWarps = 4;

constexpr std::size_t kLayerNormOnePassMaxC = 1536;
__host__ __device__ constexpr bool layernorm_backward_one_pass(std::size_t C) { return C <= kLayerNormOnePassMaxC; }
// A warp's shared floats in one pass: dw and db, each 8 × ⌈C/8⌉ (layernorm.cu lays them out by chunk).
__host__ __device__ constexpr std::size_t layernorm_backward_warp_floats(std::size_t C) {
  return 2 * std::size_t(kVector) * ceil_div(C, kVector);
}
inline Launch layernorm_backward_launch(std::size_t N, std::size_t C) {
  const std::size_t shared = layernorm_backward_one_pass(C)
                                 ? kLayerNormBackwardWarps * layernorm_backward_warp_floats(C) * sizeof(float)
                                 : 0;
  return {dim3(partial_row_blocks(N)), dim3(32 * kLayerNormBackwardWarps), shared};
}
inline std::size_t layernorm_backward_scratch_bytes(std::size_t N, std::size_t C) {
  return std::size_t(partial_row_blocks(N)) * 2 * C * sizeof(float);
}

}  // namespace dptrain::kernels
