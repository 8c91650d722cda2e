// Deterministic two-stage reductions: column sums over row ranges (bias gradient; stage 2 shared with LayerNorm's
// backward) and the squared norm of a gradient array in double. Every partial is computed by a fixed set of
// threads in a fixed order, and the grids depend on the shape only, so the bits do not depend on timing or on the
// device.
#include "reductions.cuh"
#include "vectorized.cuh"

namespace dptrain::kernels {

// A warp per 32 adjacent columns (coalesced) and per share of the parts: warp w adds parts [w·share, (w+1)·share)
// in order, kBatch loads in flight at a time (the sum is latency-bound otherwise); then the block adds the warps'
// sums in warp order. Each thread adds ⌈parts / warps⌉ partials instead of all of them, and a launch has a block
// per 32 columns instead of per 128.
__global__ void sum_partials(float* out0, float* out1, const float* partials, std::size_t parts, std::size_t n) {
  constexpr std::size_t kBatch = 8;
  __shared__ float warp_sums[kSumPartialsWarps][32];
  const std::size_t width = out1 ? 2 * n : n;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const std::size_t share = (parts + warps - 1) / warps;
  const std::size_t first = warp * share < parts ? warp * share : parts;
  const std::size_t last = first + share < parts ? first + share : parts;
  for (std::size_t base = std::size_t(blockIdx.x) * 32; base < width; base += std::size_t(gridDim.x) * 32) {
    const std::size_t i = base + lane;
    float sum = 0.0f;
    if (i < width) {
      std::size_t p = first;
      for (; p + kBatch <= last; p += kBatch) {
        float x[kBatch];
        for (std::size_t b = 0; b < kBatch; ++b) x[b] = partials[(p + b) * width + i];
        for (std::size_t b = 0; b < kBatch; ++b) sum += x[b];
      }
      for (; p < last; ++p) sum += partials[p * width + i];
    }
    warp_sums[warp][lane] = sum;
    __syncthreads();
    if (warp == 0 && i < width) {
      float total = warp_sums[0][lane];
      for (unsigned v = 1; v < warps; ++v) total += warp_sums[v][lane];
      if (i < n)
        out0[i] += total;
      else
        out1[i - n] += total;
    }
    __syncthreads();  // warp_sums is written again by the next columns
  }
}

// Each thread sums W adjacent columns (one 16-byte access per row where W = 8): thread t of column tile y
// (blockIdx.y, a grid row of its own) takes columns [(y·blockDim + t)·W, … + W), then the same a whole grid's columns
// further on; each column over the block's rows in order, kRowBatch rows loaded before they are added (independent
// loads in flight), so each column's sum has the bits of the plain loop on either path and whatever the tiles.
template <unsigned W>
__device__ void bias_columns(float* out, const bf16* dout, std::size_t first, std::size_t last, std::size_t OC,
                             std::size_t ld) {
  for (std::size_t o = (std::size_t(blockIdx.y) * blockDim.x + threadIdx.x) * W; o < OC;
       o += std::size_t(gridDim.y) * blockDim.x * W) {
    float sum[W] = {};
    std::size_t r = first;
    for (; r + kRowBatch <= last; r += kRowBatch) {
      Lanes<bf16, W> x[kRowBatch];
      for (unsigned b = 0; b < kRowBatch; ++b) x[b] = load_lanes<W>(dout + (r + b) * ld + o);
      for (unsigned b = 0; b < kRowBatch; ++b)
        for (unsigned k = 0; k < W; ++k) sum[k] += to_f32(x[b].at[k]);
    }
    for (; r < last; ++r) {
      const Lanes<bf16, W> x = load_lanes<W>(dout + r * ld + o);
      for (unsigned k = 0; k < W; ++k) sum[k] += to_f32(x.at[k]);
    }
    for (unsigned k = 0; k < W; ++k) out[o + k] = sum[k];
  }
}

__global__ void bias_backward(float* partials, const bf16* dout, std::size_t N, std::size_t OC, std::size_t ld) {
  const std::size_t rows = partial_rows(N, gridDim.x), first = std::size_t(blockIdx.x) * rows;
  const std::size_t last = first + rows < N ? first + rows : N;
  float* out = partials + std::size_t(blockIdx.x) * OC;
  if (aligned16(dout) && OC % 8 == 0 && ld % 8 == 0) {  // every row's chunks of 8 are 16-byte aligned
    bias_columns<8>(out, dout, first, last, OC, ld);
  } else {
    bias_columns<1>(out, dout, first, last, OC, ld);
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
