// Elementwise kernels on BF16 activations with fp32 arithmetic: the tanh-approximate GELU and its backward, the
// ring's BF16 reduce-add (fp32 add, one rounding: what NCCL does per hop), out += a on fp32 (gradients) and the
// casts between fp32 and BF16 (bitwise core/bf16.hpp's). Each is one element's arithmetic mapped over n by
// for_each_element (vectorized.cuh: 16-byte accesses where the pointers are aligned), so any grid covers any n.
#include "elementwise.cuh"

namespace dptrain::kernels {

namespace {

// out = f(a), element by element, with f on fp32 values (a BF16 input widened exactly) and the result rounded to
// Out once.
template <typename Out, typename In, typename F>
__device__ __forceinline__ void map1(Out* out, const In* a, std::size_t n, F f) {
  for_each_element(n, aligned16(out, a), [=](auto width, std::size_t i) {
    constexpr unsigned W = decltype(width)::value;
    const Lanes<In, W> x = load_lanes<W>(a + i);
    Lanes<Out, W> y;
    for (unsigned k = 0; k < W; ++k) y.at[k] = from_f32<Out>(f(to_f32(x.at[k])));
    store_lanes<W>(out + i, y);
  });
}

// out = f(a, b), the same way.
template <typename Out, typename A, typename B, typename F>
__device__ __forceinline__ void map2(Out* out, const A* a, const B* b, std::size_t n, F f) {
  for_each_element(n, aligned16(out, a, b), [=](auto width, std::size_t i) {
    constexpr unsigned W = decltype(width)::value;
    const Lanes<A, W> x = load_lanes<W>(a + i);
    const Lanes<B, W> z = load_lanes<W>(b + i);
    Lanes<Out, W> y;
    for (unsigned k = 0; k < W; ++k) y.at[k] = from_f32<Out>(f(to_f32(x.at[k]), to_f32(z.at[k])));
    store_lanes<W>(out + i, y);
  });
}

}  // namespace

// out[i] = gelu(in[i]).
__global__ void gelu_forward(bf16* out, const bf16* in, std::size_t n) {
  map1(out, in, n, [](float x) { return gelu(x); });
}

// din[i] = dout[i]·gelu'(in[i]), rounded once.
__global__ void gelu_backward(bf16* din, const bf16* in, const bf16* dout, std::size_t n) {
  map2(din, in, dout, n, [](float x, float d) { return d * gelu_derivative(x); });
}

// acc[i] = bf16(acc[i] + incoming[i]) with the sum in fp32: bitwise what host_reduce_add computes.
__global__ void reduce_add_bf16(bf16* acc, const bf16* incoming, std::size_t n) {
  map2(acc, acc, incoming, n, [](float a, float b) { return a + b; });
}

// out[i] += a[i], fp32.
__global__ void add_f32(float* out, const float* a, std::size_t n) {
  map2(out, out, a, n, [](float o, float x) { return o + x; });
}

// out[i] = bf16(in[i]), round to nearest even (NaN stays a quiet NaN): bitwise core/bf16.hpp's to_bf16.
__global__ void cast_f32_to_bf16(bf16* out, const float* in, std::size_t n) {
  map1(out, in, n, [](float x) { return x; });
}

// out[i] = in[i] as fp32 (exact): bitwise core/bf16.hpp's to_float.
__global__ void cast_bf16_to_f32(float* out, const bf16* in, std::size_t n) {
  map1(out, in, n, [](float x) { return x; });
}

}  // namespace dptrain::kernels
