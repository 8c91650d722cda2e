// The messages of failed cuBLASLt calls.
#include "cuda_check.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string_view>

namespace dptrain::cuda {

void throw_kernel_error(cudaError_t error, const char* operation, dim3 grid, dim3 block, unsigned shared_bytes) {
  if (error == cudaErrorMemoryAllocation) throw std::bad_alloc();
  throw std::runtime_error(fmt::format(
      "CUDA error {} ({}) in a kernel of {} (grid {}×{}×{}, block {}×{}×{}, {} bytes of dynamic shared memory){}",
      cudaGetErrorName(error), cudaGetErrorString(error), operation, grid.x, grid.y, grid.z, block.x, block.y,
      block.z, shared_bytes,
      synchronize_each_call() ? "" : "; an earlier kernel may have caused it: DPTRAIN_CUDA_SYNC=1 waits for each"));
}

bool synchronize_each_call() {
  static const bool enabled = [] {
    const char* value = std::getenv("DPTRAIN_CUDA_SYNC");
    return value != nullptr && std::string_view(value) == "1";
  }();
  return enabled;
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw std::bad_alloc();
  throw std::runtime_error(fmt::format("cuBLASLt error {} ({}) in {} at {}:{}", cublasLtGetStatusName(status),
                                       cublasLtGetStatusString(status), call, file, line));
}

}  // namespace dptrain::cuda
