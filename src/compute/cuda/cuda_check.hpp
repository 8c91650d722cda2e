// Checked CUDA runtime (core/cuda_check.hpp) and cuBLASLt calls: a failing call throws with the call's text, the
// library's message, and where; an allocation failure is std::bad_alloc.
#pragma once
#include <cublasLt.h>

#include "dptrain/core/cuda_check.hpp"

namespace dptrain::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
// A kernel of the Bf16Kernels operation `operation` that failed to launch or (synchronize_each_call) to run.
[[noreturn]] void throw_kernel_error(cudaError_t error, const char* operation, dim3 grid, dim3 block,
                                     unsigned shared_bytes);

// DPTRAIN_CUDA_SYNC=1 in the environment: wait for each kernel and GEMM as it is issued, so that an asynchronous
// fault is reported at the call that caused it (slow; for finding a fault, not for timing).
bool synchronize_each_call();

inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}

}  // namespace dptrain::cuda
