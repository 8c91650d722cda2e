// The messages of failed CUDA runtime calls.
#include "dptrain/core/cuda_check.hpp"

#include <fmt/format.h>

#include <new>
#include <stdexcept>

namespace dptrain::cuda {

void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a sticky-free error so that later calls are not blamed for it
  if (error == cudaErrorMemoryAllocation) throw std::bad_alloc();
  throw std::runtime_error(fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(error),
                                       cudaGetErrorString(error), call, file, line));
}

}  // namespace dptrain::cuda
