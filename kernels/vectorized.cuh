// 16-byte accesses for the memory-bound kernels (elementwise.cu, optimizer.cu, attention's permutes, the embedding's
// forward, the classifier's rows, the LayerNorm backward's rows): each thread moves kVector consecutive elements per
// step, 8 BF16 in one 16-byte load or store, 8 fp32 in two, instead of one 2- or 4-byte access per element (on Hopper
// a warp's 2-byte accesses fill a quarter of what one instruction can move). Where a pointer of the call is not
// 16-byte aligned (a slice at an odd offset), the kernel takes one element at a time instead; either way every
// element gets the same arithmetic, so the bits do not depend on the path.
//
//   for_each_element(n, aligned16(out, in), [=](auto width, std::size_t i) {  // elements [i, i + W)
//     constexpr unsigned W = decltype(width)::value;                         // kVector, or 1
//     const Lanes<bf16, W> x = load_lanes<W>(in + i);
//     ...
//   });
#pragma once
#include "common.cuh"

namespace dptrain::kernels {

constexpr unsigned kVector = 8;  // elements per thread and step on the vectorised path

// W consecutive elements of T in registers, 16-byte aligned where they fill whole 16-byte accesses.
template <typename T, unsigned W>
struct alignas(W * sizeof(T) % 16 == 0 ? 16 : alignof(T)) Lanes {
  T at[W];
};

template <unsigned W>
struct Width {
  static constexpr unsigned value = W;
};

// Whether every address is a multiple of 16 bytes.
template <typename... T>
__device__ __forceinline__ bool aligned16(const T*... p) {
  return ((reinterpret_cast<std::uintptr_t>(p) % 16 == 0) && ...);
}

// p[0, W): in 16-byte accesses where W elements fill them (p must then be 16-byte aligned), else one by one.
template <unsigned W, typename T>
__device__ __forceinline__ Lanes<T, W> load_lanes(const T* p) {
  Lanes<T, W> x;
  if constexpr (W * sizeof(T) % 16 == 0) {
#if defined(__CUDACC__)
    for (unsigned a = 0; a < W * sizeof(T) / 16; ++a)
      reinterpret_cast<uint4*>(x.at)[a] = reinterpret_cast<const uint4*>(p)[a];
#else
    for (unsigned a = 0; a < W * sizeof(T) / 16; ++a) cuda_on_cpu::vector_access(p + a * 16 / sizeof(T));
    std::memcpy(x.at, p, sizeof x.at);
#endif
  } else {
    for (unsigned k = 0; k < W; ++k) x.at[k] = p[k];
  }
  return x;
}

template <unsigned W, typename T>
__device__ __forceinline__ void store_lanes(T* p, const Lanes<T, W>& x) {
  if constexpr (W * sizeof(T) % 16 == 0) {
#if defined(__CUDACC__)
    // __stwb: the plain store (st.global.wb), as one 16-byte vector; an assignment through uint4* may be split into
    // 4-byte stores where the value comes straight from a load (nvcc 13 did, for the permutes).
    for (unsigned a = 0; a < W * sizeof(T) / 16; ++a)
      __stwb(reinterpret_cast<uint4*>(p) + a, reinterpret_cast<const uint4*>(x.at)[a]);
#else
    for (unsigned a = 0; a < W * sizeof(T) / 16; ++a) cuda_on_cpu::vector_access(p + a * 16 / sizeof(T));
    std::memcpy(p, x.at, sizeof x.at);
#endif
  } else {
    for (unsigned k = 0; k < W; ++k) p[k] = x.at[k];
  }
}

// The grid's threads over n elements. Where `vectorized`, thread t takes the kVector elements of vectors t,
// t + threads, … below n / kVector, calling step(Width<kVector>{}, first element); then the n % kVector elements
// left (every element where not vectorized) go one at a time, step(Width<1>{}, i), grid-stride.
template <typename Step>
__device__ __forceinline__ void for_each_element(std::size_t n, bool vectorized, Step step) {
  const std::size_t first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t threads = std::size_t(gridDim.x) * blockDim.x;
  std::size_t done = 0;
  if (vectorized) {
    const std::size_t vectors = n / kVector;
    for (std::size_t j = first; j < vectors; j += threads) step(Width<kVector>{}, j * kVector);
    done = vectors * kVector;
  }
  for (std::size_t i = done + first; i < n; i += threads) step(Width<1>{}, i);
}

// Threads `thread` of `threads` over n elements in chunks of kVector: the thread takes chunks thread, thread +
// threads, …, each as one Width<kVector> step where `vectorized` and the chunk is whole, else element by element,
// Width<1> steps. A thread sees the same elements in the same order on either path, so a reduction over them gives
// the same bits whatever the alignment. For a row per block (thread = threadIdx.x, threads = blockDim.x) or a row
// per warp (the lane of 32). Each chunk's loads are separated from its arithmetic: load(width, j) returns what the
// step needs of the chunk at element j (Lanes of W = kVector or 1 elements), step(width, j, loaded) processes it,
// and the loads of Batch whole chunks are issued before the first of them is processed (memory-level parallelism
// for a thread with much arithmetic per chunk, or several arrays to read); the order of the steps, and so the bits
// of a reduction, do not depend on Batch.
template <unsigned Batch, typename Load, typename Step>
__device__ __forceinline__ void for_each_loaded_chunk(std::size_t thread, std::size_t threads, std::size_t n,
                                                      bool vectorized, Load load, Step step) {
  const std::size_t stride = threads * kVector;
  std::size_t first = thread * kVector;
  if (vectorized) {
    for (; first + (Batch - 1) * stride + kVector <= n; first += Batch * stride) {
      decltype(load(Width<kVector>{}, first)) loaded[Batch];
      for (unsigned b = 0; b < Batch; ++b) loaded[b] = load(Width<kVector>{}, first + b * stride);
      for (unsigned b = 0; b < Batch; ++b) step(Width<kVector>{}, first + b * stride, loaded[b]);
    }
  }
  for (; first < n; first += stride)
    if (vectorized && first + kVector <= n) {
      step(Width<kVector>{}, first, load(Width<kVector>{}, first));
    } else {
      for (std::size_t i = first; i < n && i < first + kVector; ++i) step(Width<1>{}, i, load(Width<1>{}, i));
    }
}

// The same walk where the step does its own loads: step(width, first element).
template <typename Step>
__device__ __forceinline__ void for_each_chunk(std::size_t thread, std::size_t threads, std::size_t n,
                                               bool vectorized, Step step) {
  struct Nothing {};
  for_each_loaded_chunk<1>(
      thread, threads, n, vectorized, [](auto, std::size_t) { return Nothing{}; },
      [&](auto width, std::size_t i, Nothing) { step(width, i); });
}

// 256 threads per block, one per `threads` up to 65,536 blocks, then grid-stride.
inline Launch grid_stride_launch(std::size_t threads) {
  const std::size_t blocks = threads == 0 ? 1 : (threads + 255) / 256;
  return {dim3(unsigned(blocks < 65536 ? blocks : 65536)), dim3(256), 0};
}

// For a for_each_element kernel over n elements: one thread per kVector of them.
inline Launch vectorized_launch(std::size_t n) { return grid_stride_launch((n + kVector - 1) / kVector); }

}  // namespace dptrain::kernels
