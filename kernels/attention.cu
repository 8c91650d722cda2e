// Attention's non-GEMM kernels: moving heads between the model's rows and the GEMMs' head-major layout (pure
// copies), and the causal softmax forward and backward, one warp per row with every lane's share and the butterfly
// in a fixed order, so every run gives the same bits.
#include "attention.cuh"

namespace dptrain::kernels {
namespace {

// Where element i of a head-major tensor [B,NH,T,hs] lives in a row-major one [B,T,ld] whose head h has its hs
// channels at h·hs (ld = C for out/dout, 3C for qkv, where k and v follow at +C and +2C).
__device__ __forceinline__ std::size_t row_major_offset(std::size_t i, std::size_t T, std::size_t C, std::size_t NH,
                                                        std::size_t ld) {
  const std::size_t hs = C / NH;
  const std::size_t d = i % hs, t = i / hs % T, bh = i / (hs * T);
  return (bh / NH * T + t) * ld + bh % NH * hs + d;
}

// The row (of the heads·T rows) that this thread's warp works on.
__device__ __forceinline__ std::size_t warp_row() {
  return std::size_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
}

}  // namespace

// Each permute copies runs of hs channels that are contiguous on both sides. Where hs and C are multiples of
// kVector and every pointer is 16-byte aligned, a run splits into whole vectors that are 16-byte aligned on both
// sides, and each thread moves kVector elements per 16-byte access with one offset computation; otherwise one
// element at a time (vectorized.cuh).
__device__ __forceinline__ bool head_runs_vectorize(std::size_t C, std::size_t NH) {
  return (C / NH) % kVector == 0 && C % kVector == 0;
}

__global__ void permute_qkv(bf16* q, bf16* k, bf16* v, const bf16* qkv, std::size_t B, std::size_t T, std::size_t C,
                            std::size_t NH) {
  const bool vectorized = head_runs_vectorize(C, NH) && aligned16(q, k, v, qkv);
  for_each_element(B * T * C, vectorized, [=](auto width, std::size_t i) {
    constexpr unsigned W = decltype(width)::value;
    const bf16* row = qkv + row_major_offset(i, T, C, NH, 3 * C);
    store_lanes<W>(q + i, load_lanes<W>(row));
    store_lanes<W>(k + i, load_lanes<W>(row + C));
    store_lanes<W>(v + i, load_lanes<W>(row + 2 * C));
  });
}

__global__ void unpermute(bf16* out, const bf16* y, std::size_t B, std::size_t T, std::size_t C, std::size_t NH) {
  const bool vectorized = head_runs_vectorize(C, NH) && aligned16(out, y);
  for_each_element(B * T * C, vectorized, [=](auto width, std::size_t i) {
    constexpr unsigned W = decltype(width)::value;
    store_lanes<W>(out + row_major_offset(i, T, C, NH, C), load_lanes<W>(y + i));
  });
}

__global__ void permute_heads(bf16* dy, const bf16* dout, std::size_t B, std::size_t T, std::size_t C,
                              std::size_t NH) {
  const bool vectorized = head_runs_vectorize(C, NH) && aligned16(dy, dout);
  for_each_element(B * T * C, vectorized, [=](auto width, std::size_t i) {
    constexpr unsigned W = decltype(width)::value;
    store_lanes<W>(dy + i, load_lanes<W>(dout + row_major_offset(i, T, C, NH, C)));
  });
}

__global__ void unpermute_qkv(bf16* dqkv, const bf16* dq, const bf16* dk, const bf16* dv, std::size_t B,
                              std::size_t T, std::size_t C, std::size_t NH) {
  const bool vectorized = head_runs_vectorize(C, NH) && aligned16(dqkv, dq, dk, dv);
  for_each_element(B * T * C, vectorized, [=](auto width, std::size_t i) {
    constexpr unsigned W = decltype(width)::value;
    bf16* row = dqkv + row_major_offset(i, T, C, NH, 3 * C);
    store_lanes<W>(row, load_lanes<W>(dq + i));
    store_lanes<W>(row + C, load_lanes<W>(dk + i));
    store_lanes<W>(row + 2 * C, load_lanes<W>(dv + i));
  });
}

__global__ void causal_softmax_forward(bf16* probs, const float* scores, std::size_t heads, std::size_t T) {
  const unsigned lane = threadIdx.x % 32;
  const std::size_t row = warp_row();
  if (row >= heads * T) return;  // a whole warp leaves together: shuffles stay full-mask
  const std::size_t n = row % T + 1;  // query i sees keys 0..i
  const float* s = scores + row * T;
  float m = -INFINITY, sum = 0.0f;
  for (std::size_t j = lane; j < n; j += 32) softmax_add(m, sum, s[j]);
  warp_softmax_merge(m, sum);
  const float inv = 1.0f / sum;
  bf16* p = probs + row * T;
  for (std::size_t j = lane; j < T; j += 32) p[j] = j < n ? to_bf16_rne(expf(s[j] - m) * inv) : bf16{0};
}

__global__ void causal_softmax_backward(bf16* dscores, const bf16* probs, const float* dprobs, std::size_t heads,
                                        std::size_t T) {
  const unsigned lane = threadIdx.x % 32;
  const std::size_t row = warp_row();
  if (row >= heads * T) return;
  const std::size_t n = row % T + 1;
  const bf16* p = probs + row * T;
  const float* dp = dprobs + row * T;
  float dot = 0.0f;
  for (std::size_t j = lane; j < n; j += 32) dot += to_f32(p[j]) * dp[j];
  dot = warp_sum(dot);
  bf16* ds = dscores + row * T;
  for (std::size_t j = lane; j < T; j += 32) ds[j] = j < n ? to_bf16_rne(to_f32(p[j]) * (dp[j] - dot)) : bf16{0};
}

}  // namespace dptrain::kernels
