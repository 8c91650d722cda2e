// Deterministic two-stage reductions: column sums over row ranges (bias gradient; stage 2 shared with LayerNorm's
// backward) and the squared norm of a gradient array in double. Every partial is computed by a fixed set of
// threads in a fixed order, and the grids depend on the shape only, so the bits do not depend on timing or on the
// device.
#include "reductions.cuh"

namespace dptrain::kernels {

__global__ void sum_partials(float* out0, float* out1, const float* partials, std::size_t parts, std::size_t n) {
  const std::size_t width = out1 ? 2 * n : n;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < width;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float sum = 0.0f;
    for (std::size_t p = 0; p < parts; ++p) sum += partials[p * width + i];
    if (i < n)
      out0[i] += sum;
    else
      out1[i - n] += sum;
  }
}

// A thread per column (columns tid, tid + blockDim, …), the block's rows in order.
__global__ void bias_backward(float* partials, const bf16* dout, std::size_t N, std::size_t OC, std::size_t ld) {
  const std::size_t rows = partial_rows(N, gridDim.x), first = std::size_t(blockIdx.x) * rows;
  const std::size_t last = first + rows < N ? first + rows : N;
  for (std::size_t o = threadIdx.x; o < OC; o += blockDim.x) {
    float sum = 0.0f;
    for (std::size_t r = first; r < last; ++r) sum += to_f32(dout[r * ld + o]);
    partials[std::size_t(blockIdx.x) * OC + o] = sum;
  }
}

namespace {

// Σ over the block of each thread's x, in a fixed order: a butterfly per warp, then the warps in order. The block's
// first thread gets the total. `warp_totals` has room for one value per warp.
__device__ __forceinline__ double block_sum_to_first(double x, double* warp_totals) {
  x = warp_sum(x);
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = x;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += warp_totals[w];
  return total;
}

template <typename G>
__device__ __forceinline__ void sum_squares(double* partials, const G* g, std::size_t n) {
  __shared__ double warp_totals[kSumSquaresThreads / 32];
  double sum = 0.0;
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const double x = to_f32(g[i]);
    sum += x * x;  // exact: a 24-bit significand squared fits in double's 53
  }
  const double total = block_sum_to_first(sum, warp_totals);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

}  // namespace

__global__ void sum_squares_f32(double* partials, const float* g, std::size_t n) { sum_squares(partials, g, n); }
__global__ void sum_squares_bf16(double* partials, const bf16* g, std::size_t n) { sum_squares(partials, g, n); }

// One warp: lane l sums partials l, l + 32, …, then a butterfly.
__global__ void sum_squares_finish(double* acc, const double* partials, unsigned parts) {
  double sum = 0.0;
  for (unsigned p = threadIdx.x; p < parts; p += blockDim.x) sum += partials[p];
  sum = warp_sum(sum);
  if (threadIdx.x == 0) *acc += sum;
}

}  // namespace dptrain::kernels
