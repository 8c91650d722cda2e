// The token + position embedding, forward and backward.
//
// Forward: out = bf16(wte + wpe) with the sum in fp32, kVector channels per thread in 16-byte accesses where C is a
// multiple of kVector and the pointers are aligned (vectorized.cuh), one at a time otherwise.
//
// Backward without atomics, deterministic and bitwise the cpu backend's (which adds the rows into dwte and dwpe
// in row order): every element of dwte and dwpe is owned by exactly one thread, which adds its rows in row order.
//
// dwpe: thread (t, c) adds dout[t, c], dout[T + t, c], … (the windows in order) to a register and stores once.
// Reads dout once (N·C BF16), coalesced in c.
//
// dwte: which rows go to a token is known only from the tokens, so a block scans them. Blocks are (channel group of
// kWteThreads channels) × (token bucket, token % buckets); a block reads all N tokens in tiles of kWteThreads,
// compacts the tile's rows whose token is in its bucket into a shared list (in row order: a warp prefix sum of the
// match flags, then the warps' counts), and each thread adds dout[row, c] of its own channel c for every listed
// row, in list order. The running sums live in shared memory, a direct-mapped cache of kWteSlots dwte rows per
// block (slot = token / buckets % kWteSlots): on a miss the thread writes the evicted row's sum back to dwte and
// loads the new token's current dwte value, so a token that recurs (the common case in text) costs a shared-memory
// add per row, not a global read-modify-write. Every thread of a block sees the same list and takes the same
// cache decisions (each keeps its own copy of the slot tags), and a thread touches only its own channel's
// column, in shared memory and in dwte, so the only barriers are those of the tile's compaction. Each destination
// element (token v, channel c) is handled by one thread of one block, its rows added in row order starting from
// dwte's value: bitwise the cpu loop, whatever the grid.
//
// Cost on an H200 at N = 65,536, C = 768, V = 50,257: 3 × 256 = 768 blocks of 256 threads, all resident at once
// (16 KiB + 2 KiB of shared memory each). Each block reads the 256 KiB of tokens (from L2) in 256 tiles of ~10
// shuffles and 2 barriers. The additions read dout once (100 MB, ~25 µs of HBM); a block's first sight of a token
// (and a cache conflict) costs one dwte load and one store of its 256 channels. The tail is the bucket of the most
// frequent token: a serial chain of rounds of dout loads (kWteLoadsAhead rows' loads issued before they are
// added), one memory latency each. Measured: 2.76 ms a step with 8 rows a round on byte-level text (a space is one
// row in six, ~11,000 rows in one bucket; docs/cuda.md); ~2,600 rows for GPT-2's most frequent token (4 %). The
// alternatives cost more or need what the harness forbids: a global read-modify-write per row (a dependent load
// latency per row on the hot bucket), float atomics (non-deterministic), or a device sort of the rows by token.
#include "encoder.cuh"

namespace dptrain::kernels {

__global__ void embedding_forward(bf16* out, const std::int32_t* tokens, const bf16* wte, const bf16* wpe,
                                  std::size_t N, std::size_t T, std::size_t C) {
  // Rows of C channels, contiguous in out, wte and wpe: 16-byte runs where C is a multiple of kVector.
  const bool vectorized = C % kVector == 0 && aligned16(out, wte, wpe);
  for_each_element(N * C, vectorized, [=](auto width, std::size_t i) {
    constexpr unsigned W = decltype(width)::value;
    const std::size_t n = i / C, c = i % C;
    const Lanes<bf16, W> token = load_lanes<W>(wte + std::size_t(tokens[n]) * C + c);
    const Lanes<bf16, W> position = load_lanes<W>(wpe + (n % T) * C + c);
    Lanes<bf16, W> sum;
    for (unsigned k = 0; k < W; ++k) sum.at[k] = to_bf16_rne(to_f32(token.at[k]) + to_f32(position.at[k]));
    store_lanes<W>(out + i, sum);
  });
}

__global__ void embedding_backward_wpe(float* dwpe, const bf16* dout, std::size_t N, std::size_t T, std::size_t C) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < T * C;
       i += std::size_t(gridDim.x) * blockDim.x) {
    float sum = dwpe[i];
    for (std::size_t j = i; j < N * C; j += T * C) sum += to_f32(dout[j]);  // rows t, t + T, t + 2T, …
    dwpe[i] = sum;
  }
}

namespace {

// Σ of x over the lanes below this one, and over the whole warp (`total`, every lane). Shuffles down only (what
// the CPU harness has): a suffix sum, then total − suffix.
__device__ __forceinline__ unsigned warp_exclusive_prefix(unsigned x, unsigned& total) {
  const unsigned lane = threadIdx.x % 32;
  unsigned suffix = x;  // becomes Σ over lanes ≥ this one
  for (unsigned delta = 1; delta < 32; delta *= 2) {
    const unsigned other = __shfl_down_sync(kFullMask, suffix, delta);
    if (lane + delta < 32) suffix += other;
  }
  total = warp_sum(x);
  return total - suffix;
}

// Rows whose dout loads are issued before they are added: a bucket that holds a frequent token (a space in byte-level
// text is one row in six) is a serial chain of such rounds, one memory latency each. 16 keeps the kernel at 40
// registers, so that all 768 blocks of gpt2-124m's launch are resident at once (6 an SM); 32 took 64.
constexpr unsigned kWteLoadsAhead = 16;

}  // namespace

__global__ void embedding_backward_wte(float* __restrict__ dwte, const bf16* __restrict__ dout,
                                       const std::int32_t* __restrict__ tokens, std::size_t N, std::size_t C) {
  DPTRAIN_DYNAMIC_SHARED(float, cache);  // [kWteSlots][kWteThreads]: slot s's running sum of channel tid
  __shared__ unsigned match_row[kWteThreads];  // the tile's rows in this block's bucket (offsets in the tile)
  __shared__ std::int32_t match_token[kWteThreads];
  __shared__ unsigned warp_count[kWteThreads / 32];

  const unsigned groups = wte_channel_groups(C), buckets = gridDim.x / groups;
  const unsigned group = blockIdx.x % groups, bucket = blockIdx.x / groups;
  const unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
  const std::size_t c = std::size_t(group) * kWteThreads + tid;
  const bool owner = c < C;  // threads past C take part in the scan and the barriers only
  float* mine = cache + tid;  // slot s at mine[s * kWteThreads]

  std::int32_t tag[kWteSlots];  // the token each slot holds (−1: none); the same on every thread of the block
  for (unsigned s = 0; s < kWteSlots; ++s) tag[s] = -1;

  std::int32_t next_token = tid < N ? tokens[tid] : 0;
  for (std::size_t base = 0; base < N; base += kWteThreads) {
    // Compact the tile's matching rows, in row order; the next tile's token is loaded now, its latency hidden
    // behind this tile's additions.
    const std::size_t row = base + tid;
    const std::int32_t token = next_token;
    if (row + kWteThreads < N) next_token = tokens[row + kWteThreads];
    const unsigned match = row < N && unsigned(token) % buckets == bucket ? 1u : 0u;
    unsigned warp_total;
    unsigned position = warp_exclusive_prefix(match, warp_total);
    if (lane == 0) warp_count[warp] = warp_total;
    __syncthreads();
    unsigned count = 0;
    for (unsigned w = 0; w < warps; ++w) {
      if (w < warp) position += warp_count[w];
      count += warp_count[w];
    }
    if (match) {
      match_row[position] = tid;
      match_token[position] = token;
    }
    __syncthreads();

    // Add the listed rows, kWteLoadsAhead at a time: their loads first, then the additions in order.
    for (unsigned k0 = 0; k0 < count; k0 += kWteLoadsAhead) {
      float d[kWteLoadsAhead];
      for (unsigned u = 0; u < kWteLoadsAhead; ++u)
        d[u] = owner && k0 + u < count ? to_f32(dout[(base + match_row[k0 + u]) * C + c]) : 0.0f;
      for (unsigned u = 0; u < kWteLoadsAhead; ++u) {
        if (k0 + u >= count) break;
        const std::int32_t v = match_token[k0 + u];
        const unsigned s = unsigned(v) / buckets % kWteSlots;
        if (tag[s] != v) {  // a miss: write the slot's sum back, start from dwte's current value
          if (owner) {
            if (tag[s] >= 0) dwte[std::size_t(tag[s]) * C + c] = mine[s * kWteThreads];
            mine[s * kWteThreads] = dwte[std::size_t(v) * C + c];
          }
          tag[s] = v;
        }
        if (owner) mine[s * kWteThreads] += d[u];
      }
    }
    // No barrier here: the next tile writes warp_count, read before this tile's second barrier, and the list only
    // after its own first barrier, which every thread reaches once done with this list.
  }
  for (unsigned s = 0; s < kWteSlots; ++s)
    if (owner && tag[s] >= 0) dwte[std::size_t(tag[s]) * C + c] = mine[s * kWteThreads];
}

}  // namespace dptrain::kernels
