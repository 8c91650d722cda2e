// The messages of failed CUDA and cuBLASLt calls.
#include "cuda_check.hpp"

#include <new>
#include <stdexcept>

#include <fmt/format.h>

namespace dptrain::cuda {

void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a sticky-free error so that later calls are not blamed for it
  if (error == cudaErrorMemoryAllocation) throw std::bad_alloc();
  throw std::runtime_error(
      fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(error), cudaGetErrorString(error), call, file,
                  line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw std::bad_alloc();
  throw std::runtime_error(fmt::format("cuBLASLt error {} ({}) in {} at {}:{}", cublasLtGetStatusName(status),
                                       cublasLtGetStatusString(status), call, file, line));
}

}  // namespace dptrain::cuda
