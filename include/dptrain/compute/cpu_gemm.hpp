// The sgemm libraries under the cpu backend (--cpu-gemm): OpenBLAS, and oneDNN's dnnl_sgemm where the build found
// it (libdnnl-dev), whose kernels are generated at run time for the CPU it finds (AVX2, AVX-512) whatever OpenBLAS
// was pinned to (the default, by-cpu, picks one by the CPU: train/cpu_gemm_choice.hpp). Both are row-major fp32
// with fp32 accumulation, and both run on the calling thread when called inside an OpenMP parallel region, as the
// backend calls them.
//
// The backend makes three kinds of call, told apart by which operand is transposed, and the libraries are not
// equally fast at each (docs/cpu-speed.md): A·Bᵀ ("nt": the matmul forward, attention's scores and dP), A·B ("nn":
// the input gradient, attention's output and dq) and Aᵀ·B ("tn": the weight gradient, attention's dv and dk). So a
// CpuGemm names one library per kind: `openblas`, `onednn`, `onednn-bf16` (BF16 operands: onednn_bf16_gemm.hpp),
// or `nt=onednn,nn=openblas,tn=openblas`. Each kind of call always goes to the same library, so the backend's
// bitwise promises hold for any mix; the libraries do not give the same bits, so all ranks of a job use the same
// mix. `--cpu-gemm auto` times them on the model's own
// products (train/cpu_gemm_choice.hpp).
#pragma once
#include <array>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dptrain/core/bf16_type.hpp"

namespace dptrain {

// Row-major C[m,n] = alpha·op(A)[m,k]·op(B)[k,n] + beta·C, op = transpose where trans_*.
using SgemmFunction = void (*)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                               const float* b, int ldb, float beta, float* c, int ldc);

// The same with B given in BF16 (a weight the engine holds in BF16), for libraries that multiply BF16 operands.
using Bf16BGemmFunction = void (*)(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                                   int lda, const bf16* b, int ldb, float beta, float* c, int ldc);

// Batched BF16 products, `batch` dense matrices per operand (compute/onednn_bf16_gemm.hpp).
using BatchedBf16GemmFunction = void (*)(bool trans_a, bool trans_b, int batch, int m, int n, int k, float alpha,
                                         const bf16* a, const bf16* b, float beta, float* c);

enum class GemmCase { nt, nn, tn };  // A·Bᵀ, A·B, Aᵀ·B
constexpr std::array<GemmCase, 3> kGemmCases = {GemmCase::nt, GemmCase::nn, GemmCase::tn};
std::string_view gemm_case_name(GemmCase c);  // "nt", "nn", "tn"
// The case of a call; Aᵀ·Bᵀ, which the backend never makes, counts as Aᵀ·B.
constexpr GemmCase gemm_case(bool trans_a, bool trans_b) {
  return trans_a ? GemmCase::tn : trans_b ? GemmCase::nt : GemmCase::nn;
}

struct CpuGemm {
  std::string name;                        // "openblas", "onednn" or "nt=…,nn=…,tn=…" (a mix)
  std::array<std::string, 3> libraries;    // per GemmCase
  std::array<SgemmFunction, 3> functions;  // per GemmCase
  // Per GemmCase where its library multiplies BF16 operands (onednn-bf16): the call that takes B in BF16, which
  // spares rounding a weight's fp32 copy on every call (the same bits). Null for the fp32 libraries.
  std::array<Bf16BGemmFunction, 3> bf16_b_functions{};
  // Where every kind of call is onednn-bf16: attention's products of all heads of a window in one batched call
  // each (compute/cpu/bf16_attention.hpp). Null otherwise: attention calls the library per head and block.
  BatchedBf16GemmFunction batched_bf16 = nullptr;

  void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda, const float* b,
             int ldb, float beta, float* c, int ldc) const {
    functions[std::size_t(gemm_case(trans_a, trans_b))](trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                                                        ldc);
  }
  // Whether this kind of call has a BF16-B form.
  bool takes_bf16_b(bool trans_a, bool trans_b) const {
    return bf16_b_functions[std::size_t(gemm_case(trans_a, trans_b))] != nullptr;
  }
  // Only where takes_bf16_b().
  void gemm_bf16_b(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                   const bf16* b, int ldb, float beta, float* c, int ldc) const {
    bf16_b_functions[std::size_t(gemm_case(trans_a, trans_b))](trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb,
                                                               beta, c, ldc);
  }
};

// The fp32 libraries this build has (what auto chooses among): "openblas", and "onednn" where built with it.
std::vector<std::string> cpu_gemm_names();
// "onednn-bf16" where this build and CPU can run it (compute/onednn_bf16_gemm.hpp): BF16 operands, fp32
// accumulation, a declared lower precision that is used only where named.
std::vector<std::string> cpu_gemm_bf16_names();
// Why `spec` (a library, or nt=…,nn=…,tn=… naming a library for each case once) cannot be used, as one line naming
// what is accepted; empty if it can. "auto" is the trainer's to resolve and is not a spec.
std::string cpu_gemm_unavailable(std::string_view spec);
// UserError with cpu_gemm_unavailable()'s line where it cannot. A mix of one library is named as that library.
CpuGemm make_cpu_gemm(std::string_view spec);
// The spec of one library per case (in kGemmCases order): the library's name where they are all one.
std::string cpu_gemm_spec(const std::array<std::string, 3>& libraries);

// One sgemm call as the cpu backend makes it (row-major, op = transpose where trans_*).
struct GemmProduct {
  bool trans_a, trans_b;
  int m, n, k;
  double flops() const { return 2.0 * m * n * k; }
  GemmCase gemm_case() const { return dptrain::gemm_case(trans_a, trans_b); }
};

// The calls one transformer block makes for one window of `rows` tokens at width C on one of `threads` threads:
// the forward (nt), input-gradient (nn) and weight-gradient (tn) products of the qkv [3C,C], attention projection
// [C,C], fc [4C,C] and fc projection [C,4C] weights, as CpuBackend::matmul_forward/matmul_backward call them (a
// thread's weight-gradient block is 1/threads of the rows).
std::vector<GemmProduct> block_products(int rows, int C, int threads);

// Seconds for every thread of an OpenMP team of `threads` to run each of `products` for `windows` windows, as the
// backend's calls do window after window: the weight operand (B of nt and nn) shared by the threads, each thread's
// weight-gradient block (C of tn) its own, and the activations of each window apart (so they come from memory, not
// from the last call's cache). The best of `rounds` rounds after one warm-up.
double time_products(const CpuGemm& gemm, std::span<const GemmProduct> products, int threads, int windows,
                     int rounds);
// The activations time_products holds per thread and window, in bytes.
std::size_t probe_window_bytes(std::span<const GemmProduct> products);

}  // namespace dptrain
