// LayerNorm forward on BF16 rows with fp32 statistics: one warp per row, the mean and the variance each a
// warp-wide sum (each lane over its chunks of 8, then a butterfly), so every run gives the same bits. Two passes over
// the row (mean, then Σ(x − mean)²) as the CPU backend does: no catastrophic cancellation on rows far from zero.
//
// Backward: a block takes a contiguous range of rows (reductions.cuh's partition), a warp per row in turn. The input
// gradient needs two sums over each row, so each lane takes chunks of 8 elements (16-byte accesses where the rows
// are aligned, vectorized.cuh), sums, and after a butterfly writes din in a second loop over the same chunks (from
// L1). The parameter gradients need sums over rows: where the row fits (layernorm_backward_one_pass), the first
// loop also adds each element's dw and db terms into the warp's own columns in shared memory (its rows in order),
// and the block's partial is the warps' columns added in warp order; otherwise each thread afterwards owns
// columns and adds the block's rows in order, re-reading them. sum_partials then adds the blocks' partials in
// block order: no atomics, the same bits on every run.
#include "layernorm.cuh"
#include "vectorized.cuh"

namespace dptrain::kernels {

// out[N,C] = (in − mean)·rstd·w + b; mean[N], rstd[N] fp32. Block of warps_per_block·32 threads, one row per warp;
// each lane takes chunks of 8 (16-byte accesses where the rows are aligned), the same chunks in each of the three
// passes (the first issues several chunks' loads at once; the second and third read the row from cache).
__global__ void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* in, const bf16* w, const bf16* b,
                                  std::size_t N, std::size_t C) {
  const unsigned lane = threadIdx.x % 32, warps_per_block = blockDim.x / 32;
  const std::size_t row = std::size_t(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  if (row >= N) return;  // a whole warp leaves together: shuffles stay full-mask
  const bf16* x = in + row * C;
  bf16* o = out + row * C;
  const bool vectorized = aligned16(x, o, w, b);  // rows of a multiple of 8 elements
  float sum = 0.0f;  // the first pass brings the row from memory: its chunks' loads issued together
  for_each_loaded_chunk<kLayerNormChunksAhead>(
      lane, 32, C, vectorized, [x](auto width, std::size_t c) { return load_lanes<decltype(width)::value>(x + c); },
      [&](auto width, std::size_t, const auto& xc) {
        for (unsigned k = 0; k < decltype(width)::value; ++k) sum += to_f32(xc.at[k]);
      });
  const float m = warp_sum(sum) / float(C);
  float squares = 0.0f;
  for_each_chunk(lane, 32, C, vectorized, [&](auto width, std::size_t c) {
    constexpr unsigned W = decltype(width)::value;
    const Lanes<bf16, W> xc = load_lanes<W>(x + c);
    for (unsigned k = 0; k < W; ++k) {
      const float d = to_f32(xc.at[k]) - m;
      squares += d * d;
    }
  });
  const float s = 1.0f / sqrtf(warp_sum(squares) / float(C) + 1e-5f);  // IEEE, as the cpu backend (rsqrtf: 2 ulp)
  for_each_chunk(lane, 32, C, vectorized, [&](auto width, std::size_t c) {
    constexpr unsigned W = decltype(width)::value;
    const Lanes<bf16, W> xc = load_lanes<W>(x + c), wc = load_lanes<W>(w + c), bc = load_lanes<W>(b + c);
    Lanes<bf16, W> y;
    for (unsigned k = 0; k < W; ++k)
      y.at[k] = to_bf16_rne((to_f32(xc.at[k]) - m) * s * to_f32(wc.at[k]) + to_f32(bc.at[k]));
    store_lanes<W>(o + c, y);
  });
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

namespace {

// A chunk of a row as the backward reads it: w, dout, in, and (in the second loop) din's old value.
template <unsigned W>
struct RowChunk {
  Lanes<bf16, W> w, dout, in, din;
};

// The block's partials of dw and db: each thread sums W adjacent columns (one 16-byte access per row and tensor
// where W = 8), each column over the rows [first, last) in order, kRowBatch rows loaded before they are added; so
// each column gets the bits of the plain loop on either path.
template <unsigned W>
__device__ void weight_columns(float* partial, const bf16* dout, const bf16* in, const float* mean, const float* rstd,
                               std::size_t first, std::size_t last, std::size_t C) {
  for (std::size_t c = std::size_t(threadIdx.x) * W; c < C; c += std::size_t(blockDim.x) * W) {
    float dw[W] = {}, db[W] = {};
    auto add = [&](const Lanes<bf16, W>& d, const Lanes<bf16, W>& x, float m, float s) {
      for (unsigned k = 0; k < W; ++k) {
        const float dk = to_f32(d.at[k]);
        dw[k] += dk * (to_f32(x.at[k]) - m) * s;
        db[k] += dk;
      }
    };
    std::size_t row = first;
    for (; row + kRowBatch <= last; row += kRowBatch) {
      Lanes<bf16, W> d[kRowBatch], x[kRowBatch];
      for (unsigned b = 0; b < kRowBatch; ++b) {
        d[b] = load_lanes<W>(dout + (row + b) * C + c);
        x[b] = load_lanes<W>(in + (row + b) * C + c);
      }
      for (unsigned b = 0; b < kRowBatch; ++b) add(d[b], x[b], mean[row + b], rstd[row + b]);
    }
    for (; row < last; ++row)
      add(load_lanes<W>(dout + row * C + c), load_lanes<W>(in + row * C + c), mean[row], rstd[row]);
    for (unsigned k = 0; k < W; ++k) {
      partial[c + k] = dw[k];
      partial[C + c + k] = db[k];
    }
  }
}

}  // namespace

// din += (w·dout − mean(w·dout) − norm·mean(w·dout·norm))·rstd with norm = (in − mean)·rstd, as the cpu backend.
__global__ void layernorm_backward(bf16* din, const bf16* dout, const bf16* in, const bf16* w, const float* mean,
                                   const float* rstd, std::size_t N, std::size_t C, float* scratch) {
  DPTRAIN_DYNAMIC_SHARED(float, columns);  // one pass: each warp's dw, db sums over its rows (slot order, below)
  const std::size_t rows = partial_rows(N, gridDim.x), first = std::size_t(blockIdx.x) * rows;
  const std::size_t last = first + rows < N ? first + rows : N;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const bool one_pass = layernorm_backward_one_pass(C);
  // Column c's sums at slot(c) of the warp's dw and db: element c % 8 of chunk c / 8 stored at (c % 8)·chunks +
  // c / 8, so that the lanes, each on its own chunk, touch 32 consecutive floats at a time (no bank conflicts).
  const std::size_t chunks = ceil_div(C, kVector), span = layernorm_backward_warp_floats(C);
  auto slot = [chunks](std::size_t c) { return c % kVector * chunks + c / kVector; };
  float* warp_dw = columns + warp * span;  // only where one_pass
  float* warp_db = warp_dw + span / 2;
  if (one_pass)  // each lane zeroes the columns it will add to (for_each_chunk's, whatever the path)
    for_each_chunk(lane, 32, C, false, [&](auto, std::size_t c) { warp_dw[slot(c)] = warp_db[slot(c)] = 0.0f; });
  for (std::size_t row = first + warp; row < last; row += warps) {  // whole warps leave together
    const bf16* d = dout + row * C;
    const bf16* x = in + row * C;
    bf16* dx = din + row * C;
    const float m = mean[row], s = rstd[row];
    const bool vectorized = aligned16(d, x, w, dx);  // rows of a multiple of 8 elements
    float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
    auto load = [&](auto width, std::size_t c) {
      constexpr unsigned W = decltype(width)::value;
      return RowChunk<W>{load_lanes<W>(w + c), load_lanes<W>(d + c), load_lanes<W>(x + c), {}};
    };
    for_each_loaded_chunk<kLayerNormChunksAhead>(
        lane, 32, C, vectorized, load, [&](auto width, std::size_t c, const auto& chunk) {
          constexpr unsigned W = decltype(width)::value;
          float dk[W], norm[W];
          for (unsigned k = 0; k < W; ++k) {
            dk[k] = to_f32(chunk.dout.at[k]);
            norm[k] = (to_f32(chunk.in.at[k]) - m) * s;
            const float dnorm = to_f32(chunk.w.at[k]) * dk[k];
            dnorm_sum += dnorm;
            dnorm_norm_sum += dnorm * norm[k];
          }
          if (one_pass) {  // the chunk's running sums read at once, then written: one shared-memory latency a chunk
            float dw[W], db[W];
            for (unsigned k = 0; k < W; ++k) {
              dw[k] = warp_dw[slot(c + k)];
              db[k] = warp_db[slot(c + k)];
            }
            for (unsigned k = 0; k < W; ++k) {
              warp_dw[slot(c + k)] = dw[k] + dk[k] * norm[k];
              warp_db[slot(c + k)] = db[k] + dk[k];
            }
          }
        });
    const float dnorm_mean = warp_sum(dnorm_sum) / float(C), dnorm_norm_mean = warp_sum(dnorm_norm_sum) / float(C);
    auto load_with_din = [&](auto width, std::size_t c) {
      constexpr unsigned W = decltype(width)::value;
      RowChunk<W> chunk = load(width, c);
      chunk.din = load_lanes<W>(dx + c);
      return chunk;
    };
    for_each_loaded_chunk<kLayerNormChunksAhead>(
        lane, 32, C, vectorized, load_with_din, [&](auto width, std::size_t c, auto chunk) {
          constexpr unsigned W = decltype(width)::value;
          for (unsigned k = 0; k < W; ++k) {
            const float norm = (to_f32(chunk.in.at[k]) - m) * s;
            chunk.din.at[k] = to_bf16_rne(
                to_f32(chunk.din.at[k]) +
                (to_f32(chunk.w.at[k]) * to_f32(chunk.dout.at[k]) - dnorm_mean - norm * dnorm_norm_mean) * s);
          }
          store_lanes<W>(dx + c, chunk.din);
        });
  }
  float* partial = scratch + std::size_t(blockIdx.x) * 2 * C;
  if (one_pass) {
    __syncthreads();
    for (std::size_t c = threadIdx.x; c < 2 * C; c += blockDim.x) {  // dw's columns, then db's
      const std::size_t at = c < C ? slot(c) : span / 2 + slot(c - C);
      float sum = columns[at];
      for (unsigned v = 1; v < warps; ++v) sum += columns[v * span + at];
      partial[c] = sum;
    }
  } else if (aligned16(dout, in) && C % 8 == 0) {  // every row's chunks of 8 are 16-byte aligned
    weight_columns<8>(partial, dout, in, mean, rstd, first, last, C);
  } else {
    weight_columns<1>(partial, dout, in, mean, rstd, first, last, C);
  }
}

}  // namespace dptrain::kernels
