// Deterministic reductions over rows and over whole arrays (reductions.cu), each in two stages with a grid that
// depends on the shape only: stage 1 writes one partial per block into scratch memory, stage 2 sums the partials
// in block order. No atomics, so a run gives the same bits every time.
#pragma once
#include "common.cuh"

namespace dptrain::kernels {

// ---- column sums over rows (the bias gradient; LayerNorm's dw, db use the same partition and stage 2) --------
// Stage 1 splits the N rows into partial_row_blocks(N) contiguous ranges of partial_rows(N, blocks) rows, one per
// block, in order; each block writes its column sums as one row of a [blocks][width] array of partials.
constexpr unsigned kPartialThreads = 256;
// Rows whose loads a thread issues before adding them, in order (memory-level parallelism; the same bits).
constexpr unsigned kRowBatch = 4;
constexpr unsigned kPartialMaxBlocks = 512;
constexpr std::size_t kPartialMinRows = 32;
constexpr unsigned partial_row_blocks(std::size_t N) {
  const unsigned b = ceil_div(N, kPartialMinRows);
  return b < 1 ? 1 : b > kPartialMaxBlocks ? kPartialMaxBlocks : b;
}
__host__ __device__ constexpr std::size_t partial_rows(std::size_t N, unsigned blocks) { return (N + blocks - 1) / blocks; }

// Stage 2: out0[i] += Σ_p partials[p·width + i] and, where out1 is not null,
// out1[i] += Σ_p partials[p·width + n + i], for i < n; width = n, or 2n with out1. The order of the additions is
// fixed by the launch (shares of the parts in order, then the shares in order), so the bits are too.
__global__ void sum_partials(float* out0, float* out1, const float* partials, std::size_t parts, std::size_t n);
// A block of kSumPartialsWarps warps per 32 columns, each warp adding a share of the parts (reductions.cu).
constexpr unsigned kSumPartialsWarps = 8;
inline Launch sum_partials_launch(std::size_t width) {
  return {dim3(width == 0 ? 1 : ceil_div(width, 32)), dim3(32 * kSumPartialsWarps), 0};
}

// Bias gradient, stage 1: partials[b][o] = Σ over block b's rows of dout[row, o] (fp32; rows ld ≥ OC apart). Then
// sum_partials(dbias, nullptr, partials, partial_row_blocks(N), OC) with sum_partials_launch(OC): dbias += Σ_rows dout.
__global__ void bias_backward(float* partials, const bf16* dout, std::size_t N, std::size_t OC, std::size_t ld);
// Grid: partial_row_blocks(N) row blocks × the column tiles of kPartialThreads chunks of 8 that OC needs, so that no
// thread takes a second chunk while others of its block idle (OC = 2,304 is 288 chunks: 256 + 32).
inline Launch bias_backward_launch(std::size_t N, std::size_t OC) {
  const unsigned tiles = OC == 0 ? 1 : ceil_div(ceil_div(OC, 8), kPartialThreads);
  return {dim3(partial_row_blocks(N), tiles), dim3(kPartialThreads), 0};
}
inline std::size_t bias_backward_scratch_bytes(std::size_t N, std::size_t OC) {
  return std::size_t(partial_row_blocks(N)) * OC * sizeof(float);
}

// ---- Σ g² over a whole array (the global gradient norm) -------------------------------------------------------
// Stage 1: partials[b] = Σ over block b's grid-stride share of g² (double), sum_squares_blocks(n) blocks.
__global__ void sum_squares_f32(double* partials, const float* g, std::size_t n);
__global__ void sum_squares_bf16(double* partials, const bf16* g, std::size_t n);
// Stage 2, one block: *acc += Σ_b partials[b], b < parts = sum_squares_blocks(n).
__global__ void sum_squares_finish(double* acc, const double* partials, unsigned parts);

constexpr unsigned kSumSquaresThreads = 256;
constexpr unsigned kSumSquaresMaxBlocks = 512;
// At least 8 elements per thread, at most kSumSquaresMaxBlocks blocks (enough threads to keep HBM busy).
constexpr unsigned sum_squares_blocks(std::size_t n) {
  const unsigned b = ceil_div(n, 8 * kSumSquaresThreads);
  return b < 1 ? 1 : b > kSumSquaresMaxBlocks ? kSumSquaresMaxBlocks : b;
}
inline Launch sum_squares_launch(std::size_t n) { return {dim3(sum_squares_blocks(n)), dim3(kSumSquaresThreads), 0}; }
inline Launch sum_squares_finish_launch() { return {dim3(1), dim3(32), 0}; }
inline std::size_t sum_squares_scratch_bytes(std::size_t n) { return sum_squares_blocks(n) * sizeof(double); }

}  // namespace dptrain::kernels
