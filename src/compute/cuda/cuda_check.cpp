// The messages of failed cuBLASLt calls.
#include "cuda_check.hpp"

#include <fmt/format.h>

#include <new>
#include <stdexcept>

namespace dptrain::cuda {

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw std::bad_alloc();
  throw std::runtime_error(fmt::format("cuBLASLt error {} ({}) in {} at {}:{}", cublasLtGetStatusName(status),
                                       cublasLtGetStatusString(status), call, file, line));
}

}  // namespace dptrain::cuda
