// The sgemm library under the cpu backend (--cpu-gemm): OpenBLAS, the default (the fastest on every shape of the
// model measured so far: docs/cpu-speed.md), or oneDNN's dnnl_sgemm where the build found it (libdnnl-dev), whose
// kernels are generated at run time for the CPU it finds (AVX2, AVX-512) whatever OpenBLAS was pinned to. Both are
// row-major fp32 with fp32 accumulation, and both run on the calling thread when called inside an OpenMP parallel
// region, as the backend calls them. They do not give the same bits: all ranks of a job use the same one.
// `--cpu-gemm auto` times both on the model's own products (train/cpu_gemm_choice.hpp).
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dptrain {

struct CpuGemm {
  std::string name;  // "openblas", "onednn"
  // Row-major C[m,n] = alpha·op(A)[m,k]·op(B)[k,n] + beta·C, op = transpose where trans_*.
  void (*sgemm)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
                int ldb, float beta, float* c, int ldc) = nullptr;
};

// The libraries this build has: "openblas", and "onednn" where built with it.
std::vector<std::string> cpu_gemm_names();
// Why `name` cannot be used (unknown, or not in this build), as one line naming what is accepted; empty if it can.
std::string cpu_gemm_unavailable(std::string_view name);
// UserError with cpu_gemm_unavailable()'s line where it cannot.
CpuGemm make_cpu_gemm(std::string_view name);

// One sgemm call as the cpu backend makes it (row-major, op = transpose where trans_*).
struct GemmProduct {
  bool trans_a, trans_b;
  int m, n, k;
  double flops() const { return 2.0 * m * n * k; }
};

// The calls one transformer block makes for one window of `rows` tokens at width C on one of `threads` threads:
// the forward, input-gradient and weight-gradient products of the qkv [3C,C], attention projection [C,C], fc
// [4C,C] and fc projection [C,4C] weights, as CpuBackend::matmul_forward/matmul_backward call them (a thread's
// weight-gradient block is 1/threads of the rows).
std::vector<GemmProduct> block_products(int rows, int C, int threads);

// Seconds for every thread of an OpenMP team of `threads` to run `products` once, each on its own operands
// (so the threads share the caches and memory as training does): the best of `rounds` rounds after one warm-up.
double time_products(const CpuGemm& gemm, std::span<const GemmProduct> products, int threads, int rounds);

}  // namespace dptrain
