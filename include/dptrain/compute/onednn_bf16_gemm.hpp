// --cpu-gemm onednn-bf16: the cpu backend's products in BF16 with fp32 accumulation, through oneDNN's matmul
// primitive, where the CPU has BF16 dot-product instructions (AVX512_BF16 or AMX) to run it on. It is the CUDA
// backend's arithmetic (cuBLASLt, BF16 in, fp32 compute), and a declared lower precision: each operand is rounded
// to BF16 (nearest, ties to even: within 2⁻⁸ relative) before the product, so each term of a product differs from
// fp32's by up to 2⁻⁷ relative (docs/cpu-speed.md states the bound the tests hold it to). --cpu-gemm auto never
// chooses it.
//
// Each call rounds A and B (unless given in BF16) into the calling thread's own BF16 buffers and runs a primitive
// made once per shape (and alpha, beta) on that thread: the backend calls it from every thread of an OpenMP team at
// once, and after the first step nothing is allocated.
#pragma once
#include <string>

#include "dptrain/core/bf16_type.hpp"

namespace dptrain {

// Empty where this build and CPU can run it; else one line saying why (no oneDNN, no BF16 instructions).
std::string onednn_bf16_unavailable();

// Row-major C[m,n] = alpha·op(bf16(A))·op(bf16(B)) + beta·C with fp32 accumulation (an SgemmFunction,
// compute/cpu_gemm.hpp). Only where onednn_bf16_unavailable() is empty.
void onednn_bf16_sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                       const float* b, int ldb, float beta, float* c, int ldc);

// The same with B already in BF16 (a weight the engine holds in BF16, leading dimension ldb): the bits of
// onednn_bf16_sgemm given B's values in fp32 (their rounding is exact), without rounding B on every call.
void onednn_bf16_gemm_bf16_b(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                             const bf16* b, int ldb, float beta, float* c, int ldc);

// Batched, for attention's per-head products: C[i] = alpha·op(A[i])·op(B[i]) + beta·C[i] for i < batch, one
// primitive call for all of them. A and B are BF16, C fp32, each `batch` dense row-major matrices one after another
// (A[i] stored [k,m] where trans_a, B[i] stored [n,k] where trans_b; C[i] is [m,n]).
void onednn_bf16_batched_gemm(bool trans_a, bool trans_b, int batch, int m, int n, int k, float alpha, const bf16* a,
                              const bf16* b, float beta, float* c);

}  // namespace dptrain
