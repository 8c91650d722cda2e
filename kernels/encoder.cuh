// The token + position embedding (encoder.cu): forward on BF16, backward into fp32 parameter gradients without
// atomics, every gradient element summed in row order (bitwise the cpu backend's loop).
#pragma once
#include "common.cuh"
#include "elementwise.cuh"

namespace dptrain::kernels {

// out[n,c] = bf16(wte[tokens[n],c] + wpe[n % T, c]), the sum in fp32. Precondition: 0 ≤ tokens[n] < V.
__global__ void embedding_forward(bf16* out, const std::int32_t* tokens, const bf16* wte, const bf16* wpe,
                                  std::size_t N, std::size_t T, std::size_t C);
inline Launch embedding_forward_launch(std::size_t N, std::size_t C) { return vectorized_launch(N * C); }

// dwte[V,C] += Σ_{n: tokens[n] = v} dout[n,c], fp32, the rows of each token added in row order.
__global__ void embedding_backward_wte(float* dwte, const bf16* dout, const std::int32_t* tokens, std::size_t N,
                                       std::size_t C);
// dwpe[T,C] += Σ_{n: n % T = t} dout[n,c], fp32, in row order.
__global__ void embedding_backward_wpe(float* dwpe, const bf16* dout, std::size_t N, std::size_t T, std::size_t C);

// embedding_backward_wte: a block owns kWteThreads channels (one per thread) of the tokens of one bucket
// (token % buckets) and scans every row in tiles of kWteThreads tokens; kWteSlots dwte rows per block are cached
// in shared memory (kWteSlots·kWteThreads fp32 = 16 KiB of dynamic shared memory, whatever C is).
constexpr unsigned kWteThreads = 256;
constexpr unsigned kWteSlots = 16;
constexpr unsigned kWteMaxBuckets = 256;

__host__ __device__ constexpr unsigned wte_channel_groups(std::size_t C) { return C == 0 ? 1 : ceil_div(C, kWteThreads); }
// One bucket per 256 rows, at most kWteMaxBuckets: each block's scan of all N tokens then costs about as much as
// its share of the additions.
constexpr unsigned wte_buckets(std::size_t N) {
  const unsigned b = ceil_div(N, 256);
  return b < 1 ? 1 : b > kWteMaxBuckets ? kWteMaxBuckets : b;
}
// Grid: wte_channel_groups(C) × wte_buckets(N) blocks, flattened (block = bucket·groups + group).
inline Launch embedding_backward_wte_launch(std::size_t N, std::size_t C) {
  return {dim3(wte_channel_groups(C) * wte_buckets(N)), dim3(kWteThreads), kWteSlots * kWteThreads * sizeof(float)};
}
// One thread per element of dwpe, each summing its N/T rows.
inline Launch embedding_backward_wpe_launch(std::size_t T, std::size_t C) { return grid_stride_launch(T * C); }

}  // namespace dptrain::kernels
