// LayerNorm forward on BF16 rows with fp32 statistics: one warp per row, the mean and the variance each a
// warp-wide sum (lanes stride over the row, then a butterfly), so every run gives the same bits. Two passes over
// the row (mean, then Σ(x − mean)²) as the CPU backend does: no catastrophic cancellation on rows far from zero.
#include "layernorm.cuh"

namespace dptrain::kernels {

// out[N,C] = (in − mean)·rstd·w + b; mean[N], rstd[N] fp32. Block of warps_per_block·32 threads, one row per warp.
__global__ void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* in, const bf16* w, const bf16* b,
                                  std::size_t N, std::size_t C) {
  const unsigned lane = threadIdx.x % 32, warps_per_block = blockDim.x / 32;
  const std::size_t row = std::size_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  if (row >= N) return;  // a whole warp leaves together: shuffles stay full-mask
  const bf16* x = in + row * C;
  float sum = 0.0f;
  for (std::size_t c = lane; c < C; c += 32) sum += to_f32(x[c]);
  const float m = warp_sum(sum) / float(C);
  float squares = 0.0f;
  for (std::size_t c = lane; c < C; c += 32) {
    const float d = to_f32(x[c]) - m;
    squares += d * d;
  }
  const float s = rsqrtf(warp_sum(squares) / float(C) + 1e-5f);
  bf16* o = out + row * C;
  for (std::size_t c = lane; c < C; c += 32) o[c] = to_bf16_rne((to_f32(x[c]) - m) * s * to_f32(w[c]) + to_f32(b[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

}  // namespace dptrain::kernels
