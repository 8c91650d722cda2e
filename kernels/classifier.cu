// The fused classifier: softmax cross-entropy and the logits' gradient over the logits, one block per row, the row
// in 16-byte accesses where aligned; the loss sum in one block. Every reduction has a fixed order (each thread's
// chunks of 8 in turn, a butterfly per warp, the warps in order; a halving tree for the loss sum), so every run
// gives the same bits, on either access path.
#include "classifier.cuh"
#include "vectorized.cuh"

namespace dptrain::kernels {
namespace {

// (m, s) merged over the block, every thread getting the same bits: a butterfly per warp, then each thread merges
// the warps' results in warp order.
__device__ void block_softmax_merge(float& m, float& s) {
  __shared__ float warp_m[32], warp_s[32];
  warp_softmax_merge(m, s);
  if (threadIdx.x % 32 == 0) {
    warp_m[threadIdx.x / 32] = m;
    warp_s[threadIdx.x / 32] = s;
  }
  __syncthreads();
  m = warp_m[0];
  s = warp_s[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) softmax_merge(m, s, warp_m[w], warp_s[w]);
}

}  // namespace

// At most 32 registers, so that 4 blocks of 512 threads fit an SM (ptxas would take 35 and fit 3).
__global__ void __launch_bounds__(kClassifierThreads, 4)
    classifier(bf16* logits, float* losses, const std::int32_t* targets, float dloss, std::size_t N, std::size_t V,
               std::size_t ld) {
  const std::size_t n = blockIdx.x;
  if (n >= N) return;  // the whole block
  bf16* row = logits + n * ld;
  const std::size_t target = std::size_t(targets[n]);
  // Read before the merge's __syncthreads: after it the row is overwritten.
  const float x_target = to_f32(row[target]);
  // The denominator over every logit but the target's, which is added at the end: then the loss is
  // log(1 + Σ_{j≠t} exp(x_j − x_t)), accurate however small that sum is (as p[target] nears 1). The row in 16-byte
  // accesses where it starts 16-byte aligned (rows of a multiple of 8 elements: the padded logits).
  const bool vectorized = aligned16(row);
  float m = -INFINITY, s = 0.0f;
  auto load = [row](auto width, std::size_t j) { return load_lanes<decltype(width)::value>(row + j); };
  for_each_loaded_chunk<kClassifierLoadsAhead>(
      threadIdx.x, blockDim.x, V, vectorized, load, [&](auto width, std::size_t j, const auto& x) {
        constexpr unsigned W = decltype(width)::value;
        float v[W];
        for (unsigned k = 0; k < W; ++k) v[k] = to_f32(x.at[k]);
        if (target - j < W)  // the chunk holding the target (unsigned: false for j > target): leave it out
          for (unsigned k = 0; k < W; ++k) v[k] = j + k == target ? -INFINITY : v[k];
        softmax_add_chunk<W>(m, s, v);
      });
  block_softmax_merge(m, s);
  // Every thread the same bits (the same m, s). m − x_t > 88 overflows the product to +∞: such a loss is past the
  // cap anyway. A non-finite row stays NaN, as on the cpu backend (its softmax takes ∞ − ∞ or carries the NaN): a
  // NaN logit makes s or the product NaN, which the cap lets through (fminf would not), and a target of +∞ is NaN.
  const float uncapped = x_target == INFINITY ? NAN : log1pf(s * expf(m - x_target)), cap = -logf(1e-30f);
  const float loss = uncapped > cap ? cap : uncapped;
  if (threadIdx.x == 0) losses[n] = loss;
  if (dloss == 0.0f) return;  // the losses only (evaluation)
  const float top = fmaxf(m, x_target);
  // dloss·p = dloss·e^(x − top)/Σ_j e^(x_j − top); at the target dloss·(p − 1), p − 1 from the loss.
  const float scale = dloss / (s * expf(m - top) + expf(x_target - top)), top_log2 = top * kLog2e;
  const bf16 target_gradient = to_bf16_rne(expm1f(-loss) * dloss);
  for_each_loaded_chunk<kClassifierLoadsAhead>(threadIdx.x, blockDim.x, V, vectorized, load,
                                               [&](auto width, std::size_t j, auto x) {
                                                 constexpr unsigned W = decltype(width)::value;
                                                 for (bf16& p : x.at)
                                                   p = to_bf16_rne(exp2_of(to_f32(p), top_log2) * scale);
                                                 if (target - j < W)  // the target's chunk
                                                   for (unsigned k = 0; k < W; ++k)
                                                     if (j + k == target) x.at[k] = target_gradient;
                                                 store_lanes<W>(row + j, x);
                                               });
}

__global__ void loss_sum(double* acc, const float* losses, std::size_t N) {
  __shared__ double partial[kLossSumThreads];
  double x = 0.0;
  for (std::size_t i = threadIdx.x; i < N; i += blockDim.x) x += losses[i];
  partial[threadIdx.x] = x;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *acc += partial[0];
}

}  // namespace dptrain::kernels
