// Checked CUDA runtime (core/cuda_check.hpp) and cuBLASLt calls: a failing call throws with the call's text, the
// library's message, and where; an allocation failure is std::bad_alloc.
#pragma once
#include <cublasLt.h>

#include "dptrain/core/cuda_check.hpp"

namespace dptrain::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

inline void check(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}

}  // namespace dptrain::cuda
